// Package testenv starts real servers for integration tests.
//
// Every server binds 127.0.0.1 only, keeps its state in tb.TempDir() and is
// stopped by tb.Cleanup, so tests never share a port, a directory or a
// process. A missing server binary fails the test (it is never skipped), with
// the command that installs it.
package testenv

import (
	"bytes"
	"fmt"
	"github.com/km0/edgeproc/internal/tail"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// MosquittoBinary is where Debian's mosquitto package installs the broker.
const MosquittoBinary = "/usr/sbin/mosquitto"

// mosquittoReadyTimeout bounds how long a (re)start may take before the test
// fails; Mosquitto normally listens within a few milliseconds.
const mosquittoReadyTimeout = 10 * time.Second

// Mosquitto is a Mosquitto broker process owned by one test. Its port and
// persistence directory stay the same across Restart, so a persistent MQTT
// session outlives a broker restart exactly as it would in production.
type Mosquitto struct {
	tb      testing.TB
	port    int
	conf    string
	dataDir string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	stderr *tail.Buffer
}

// StartMosquitto starts /usr/sbin/mosquitto on 127.0.0.1 and a free port with
// a generated configuration (persistence on, unlimited queued messages, log to
// stderr) and returns once the broker accepts TCP connections. The broker is
// stopped when the test ends; its log is printed if the test failed.
func StartMosquitto(tb testing.TB) *Mosquitto {
	tb.Helper()
	if _, err := os.Stat(MosquittoBinary); err != nil {
		tb.Fatalf("mosquitto broker not found at %s (%v); install it with: apt-get install -y mosquitto", MosquittoBinary, err)
	}
	dir := tb.TempDir()
	m := &Mosquitto{
		tb:      tb,
		port:    freePort(tb),
		conf:    filepath.Join(dir, "mosquitto.conf"),
		dataDir: filepath.Join(dir, "data") + string(filepath.Separator),
		stderr:  tail.New(64 << 10),
	}
	if err := os.Mkdir(m.dataDir, 0o700); err != nil {
		tb.Fatalf("create mosquitto data dir: %v", err)
	}
	if err := os.WriteFile(m.conf, []byte(m.config()), 0o600); err != nil {
		tb.Fatalf("write mosquitto config: %v", err)
	}
	tb.Cleanup(func() {
		m.Stop()
		if tb.Failed() {
			tb.Logf("mosquitto log (tail):\n%s", m.stderr.String())
		}
	})
	m.start()
	return m
}

// config renders the broker configuration. max_queued_messages 0 matters:
// Mosquitto's default (1000) silently drops messages for a persistent session
// that falls further behind, which would hide exactly the losses the tests
// look for.
func (m *Mosquitto) config() string {
	var b bytes.Buffer
	// Started as root, Mosquitto switches to the "mosquitto" user, which cannot
	// enter the test's 0700 temp dir; staying root keeps the persistence dir
	// writable. As a normal user the option has no effect.
	if os.Geteuid() == 0 {
		name := "root"
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		fmt.Fprintf(&b, "user %s\n", name)
	}
	fmt.Fprintf(&b, "listener %d 127.0.0.1\n", m.port)
	b.WriteString("allow_anonymous true\n")
	b.WriteString("persistence true\n")
	fmt.Fprintf(&b, "persistence_location %s\n", m.dataDir)
	b.WriteString("max_queued_messages 0\n")
	b.WriteString("log_dest stderr\n")
	b.WriteString("log_timestamp_format %H:%M:%S\n")
	return b.String()
}

// URL is the broker address as an MQTT URL, e.g. "mqtt://127.0.0.1:41234".
func (m *Mosquitto) URL() string {
	return "mqtt://" + m.Addr()
}

// Addr is the broker's host:port.
func (m *Mosquitto) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port))
}

// Stop terminates the broker with SIGTERM, so it writes its persistence file,
// and waits for it to exit. Stopping a stopped broker does nothing.
func (m *Mosquitto) Stop() {
	m.tb.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	select {
	case <-m.exited:
	default:
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(mosquittoReadyTimeout):
			_ = m.cmd.Process.Kill()
			<-m.exited
			m.tb.Errorf("mosquitto did not exit within %s of SIGTERM; killed", mosquittoReadyTimeout)
		}
	}
	m.cmd = nil
}

// Restart stops the broker and starts it again on the same port with the same
// persistence directory: persistent sessions and their queued messages
// survive.
func (m *Mosquitto) Restart() {
	m.tb.Helper()
	m.Stop()
	m.start()
}

func (m *Mosquitto) start() {
	m.tb.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	cmd := exec.Command(MosquittoBinary, "-c", m.conf)
	cmd.Stdout = m.stderr
	cmd.Stderr = m.stderr
	if err := cmd.Start(); err != nil {
		m.tb.Fatalf("start %s: %v", MosquittoBinary, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	m.cmd, m.exited = cmd, exited

	deadline := time.Now().Add(mosquittoReadyTimeout)
	for {
		conn, err := net.DialTimeout("tcp", m.Addr(), 200*time.Millisecond)
		if err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-exited:
			m.cmd = nil
			m.tb.Fatalf("mosquitto exited before accepting connections on %s: %v\nlog:\n%s", m.Addr(), cmd.ProcessState, m.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			m.cmd = nil
			m.tb.Fatalf("mosquitto not accepting connections on %s after %s: %v\nlog:\n%s", m.Addr(), mosquittoReadyTimeout, err, m.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// freePort asks the kernel for an unused loopback port. Another process could
// take it before the broker binds; the broker then fails to start and the
// test says so, which is rare enough not to retry.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		tb.Fatalf("find a free port: unexpected address %v", l.Addr())
	}
	return addr.Port
}
