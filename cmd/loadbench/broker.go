package main

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
	"syscall"
	"time"
)

// brokerReadyTimeout bounds how long Mosquitto may take to listen, and to
// exit after SIGTERM.
const brokerReadyTimeout = 10 * time.Second

// mosquitto is a Mosquitto process started by loadbench on 127.0.0.1.
type mosquitto struct {
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    *tail.Buffer
}

// startMosquitto starts bin with a generated configuration in dir: the
// settings of examples/mosquitto.conf (persistence, max_queued_messages 0)
// on a free loopback port. It returns once the broker accepts connections.
func startMosquitto(bin, dir string) (*mosquitto, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("mosquitto not found at %s (%w); install it with: apt-get install -y mosquitto, or pass --mqtt URL", bin, err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "mosquitto-data") + string(filepath.Separator)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, fmt.Errorf("create mosquitto data dir: %w", err)
	}
	conf := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(conf, mosquittoConfig(port, data), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", conf, err)
	}
	m := &mosquitto{
		addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		exited: make(chan struct{}),
		log:    tail.New(32 << 10),
	}
	m.cmd = exec.Command(bin, "-c", conf)
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = m.cmd.Wait()
		close(m.exited)
	}()
	if err := waitListening(m.addr, m.exited, brokerReadyTimeout); err != nil {
		m.stop()
		return nil, fmt.Errorf("mosquitto on %s: %w\nlog:\n%s", m.addr, err, m.log)
	}
	return m, nil
}

// mosquittoConfig renders the broker configuration. max_queued_messages 0
// matters: the default (1000) silently drops messages queued for a
// persistent session that falls behind, which would flatter a slow
// consumer. As root, "user root" keeps the temp persistence dir writable
// (Mosquitto otherwise switches to the mosquitto user).
func mosquittoConfig(port int, dataDir string) []byte {
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
	return b.Bytes()
}

// url is the broker as an MQTT URL.
func (m *mosquitto) url() string { return "mqtt://" + m.addr }

// stop sends SIGTERM and waits for the broker to exit, killing it after
// brokerReadyTimeout.
func (m *mosquitto) stop() {
	select {
	case <-m.exited:
		return
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(brokerReadyTimeout):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

// waitListening polls addr until it accepts a TCP connection, the process
// behind it exits, or timeout passes.
func waitListening(addr string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before listening")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening after %s: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort asks the kernel for an unused loopback port. Another process may
// take it before it is bound; the start then fails with a clear error.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
