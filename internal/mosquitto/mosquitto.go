// Package mosquitto runs a real Mosquitto broker as a child process on
// 127.0.0.1, for integration tests (internal/testenv) and the live
// benchmark (cmd/loadbench): the settings of examples/mosquitto.conf, a free
// port, and a persistence directory that survives Restart.
package mosquitto

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/km0/edgeproc/internal/tail"
)

// Binary is where Debian's mosquitto package installs the broker.
const Binary = "/usr/sbin/mosquitto"

// readyTimeout bounds how long the broker may take to listen, and to exit
// after SIGTERM; it normally takes a few milliseconds.
const readyTimeout = 10 * time.Second

// Broker is a running Mosquitto process. Its port and persistence directory
// stay the same across Restart, so a persistent MQTT session outlives a
// broker restart exactly as it would in production. Its methods are safe
// for concurrent use.
type Broker struct {
	bin  string
	port int
	conf string // configuration file
	data string // persistence directory
	log  *tail.Buffer

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// Start writes a configuration into dir and starts bin ("" for Binary) on a
// free loopback port, returning once the broker accepts connections. The
// last logBytes of its output are kept for Log.
func Start(bin, dir string, logBytes int) (*Broker, error) {
	if bin == "" {
		bin = Binary
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("mosquitto not found at %s (%w); install it with: apt-get install -y mosquitto", bin, err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "mosquitto-data") + string(filepath.Separator)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, fmt.Errorf("create mosquitto data dir: %w", err)
	}
	b := &Broker{bin: bin, port: port, conf: filepath.Join(dir, "mosquitto.conf"), data: data, log: tail.New(logBytes)}
	if err := os.WriteFile(b.conf, Config(port, data), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", b.conf, err)
	}
	if err := b.start(); err != nil {
		return nil, err
	}
	return b, nil
}

// Config renders the broker configuration. max_queued_messages 0 matters:
// the default (1000) silently drops messages queued for a persistent
// session that falls behind, which would hide exactly the losses tests look
// for and flatter a slow consumer. Started as root, Mosquitto switches to
// the "mosquitto" user, which cannot enter a 0700 temp dir: "user root"
// keeps the persistence dir writable.
func Config(port int, dataDir string) []byte {
	var b bytes.Buffer
	if os.Geteuid() == 0 {
		name := "root"
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		fmt.Fprintf(&b, "user %s\n", name)
	}
	fmt.Fprintf(&b, "listener %d 127.0.0.1\n", port)
	b.WriteString("allow_anonymous true\n")
	b.WriteString("persistence true\n")
	fmt.Fprintf(&b, "persistence_location %s\n", dataDir)
	b.WriteString("max_queued_messages 0\n")
	b.WriteString("log_dest stderr\n")
	b.WriteString("log_timestamp_format %H:%M:%S\n")
	return b.Bytes()
}

// Addr is the broker's host:port.
func (b *Broker) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// URL is the broker as an MQTT URL, e.g. "mqtt://127.0.0.1:41234".
func (b *Broker) URL() string { return "mqtt://" + b.Addr() }

// PID is the process id of the running broker, or 0.
func (b *Broker) PID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// Log returns the end of the broker's output.
func (b *Broker) Log() string { return b.log.String() }

// Stop terminates the broker with SIGTERM, so that it writes its
// persistence file, and waits for it to exit; it kills it, and says so,
// when it does not exit in time. Stopping a stopped broker does nothing.
func (b *Broker) Stop() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return nil
	}
	defer func() { b.cmd = nil }()
	select {
	case <-b.exited:
		return nil
	default:
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
		return nil
	case <-time.After(readyTimeout):
		_ = b.cmd.Process.Kill()
		<-b.exited
		return fmt.Errorf("mosquitto did not exit within %s of SIGTERM; killed", readyTimeout)
	}
}

// Restart stops the broker and starts it again on the same port with the
// same persistence directory: persistent sessions and their queued
// messages survive.
func (b *Broker) Restart() error {
	if err := b.Stop(); err != nil {
		return err
	}
	return b.start()
}

func (b *Broker) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	cmd := exec.Command(b.bin, "-c", b.conf)
	cmd.Stdout, cmd.Stderr = b.log, b.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", b.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	if err := WaitListening(b.Addr(), exited, readyTimeout); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("mosquitto on %s: %w\nlog:\n%s", b.Addr(), err, b.log)
	}
	b.cmd, b.exited = cmd, exited
	return nil
}

// errExited is returned by WaitListening when the process exits first.
var errExited = errors.New("exited before listening")

// WaitListening polls addr until it accepts a TCP connection, the process
// behind it exits (exited is closed), or timeout passes.
func WaitListening(addr string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-exited:
			return errExited
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening after %s: %w", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreePort asks the kernel for an unused loopback port. Another process
// could take it before it is bound; the start then fails with a clear
// error, which is rare enough not to retry.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
