package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildEdgeproc builds the edgeproc binary into a temporary directory of
// tb and returns its path (the build cache makes a second build cheap).
func BuildEdgeproc(tb testing.TB) string {
	tb.Helper()
	SkipShort(tb, "the edgeproc binary as a process")
	bin := filepath.Join(tb.TempDir(), "edgeproc")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/km0/edgeproc/cmd/edgeproc")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// FreeAddr returns a loopback host:port that was free a moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", freePort(tb))
}

// procLogMax bounds the output a Proc keeps: its tail.
const procLogMax = 1 << 20

// Proc is a subprocess owned by one test, its stdout and stderr kept (the
// last procLogMax bytes) and shown when the test fails. It is killed when
// the test ends.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's, once done is closed

	mu   sync.Mutex
	logs bytes.Buffer
}

// StartProc starts bin with args; name labels its logs.
func StartProc(tb testing.TB, name, bin string, args ...string) *Proc {
	tb.Helper()
	SkipShort(tb, "a process ("+name+")")
	p := &Proc{Name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = (*procLog)(p), (*procLog)(p)
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	tb.Cleanup(func() {
		p.Kill()
		if tb.Failed() {
			tb.Logf("%s output (tail):\n%s", name, p.Logs())
		}
	})
	return p
}

type procLog Proc

func (l *procLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.logs.Write(b)
	if n := l.logs.Len(); n > procLogMax {
		l.logs.Next(n - procLogMax)
	}
	return len(b), nil
}

// Logs returns the kept output.
func (p *Proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig (SIGSTOP and SIGCONT pause and resume the process).
func (p *Proc) Signal(sig syscall.Signal) error {
	return p.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL, as kill -9, and waits until the process is gone.
// Killing an exited process is harmless.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop asks for a graceful shutdown (SIGTERM) and returns the process's
// exit error: nil for a clean exit, an error too when it has not exited
// within timeout (it is then killed).
func (p *Proc) Stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM", p.Name, timeout)
	}
}

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on every Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// CPU returns the CPU time the running process has used, user + system,
// from /proc/PID/stat (10 ms resolution).
func (p *Proc) CPU() (time.Duration, error) {
	d, err := CPUOf(p.Pid())
	if err != nil {
		return 0, fmt.Errorf("cpu of %s: %w", p.Name, err)
	}
	return d, nil
}

// CPUOf returns the CPU time process pid has used, user + system, from
// /proc/PID/stat (10 ms resolution).
func CPUOf(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses: fields count from
	// after its closing one, where field 3 (state) comes first.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat line")
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// LoadAvg is /proc/loadavg's three load averages, or "?": benchmarks
// note the machine's load beside their figures.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
