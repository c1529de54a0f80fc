package testenv

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// echoServer listens on a free loopback port and echoes what each
// connection sends.
func echoServer(t *testing.T) int { port, _ := tcpServer(t, true); return port }

// silentServer listens on a free loopback port and sends the server's side
// of every accepted connection on conns, doing nothing with it: the test
// alone reads and writes it.
func silentServer(t *testing.T) (port int, conns <-chan net.Conn) { return tcpServer(t, false) }

func tcpServer(t *testing.T, echo bool) (int, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range open {
			c.Close()
		}
	})
	ch := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			if echo {
				go func() { _, _ = io.Copy(c, c) }()
			} else {
				ch <- c
			}
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, ch
}

func dial(port int, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), timeout)
}

func dialPort(t *testing.T, port int) net.Conn {
	t.Helper()
	c, err := dial(port, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %d: %v", port, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// exchange sends msg on c and reads it back within d.
func exchange(c net.Conn, msg string, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("echo %q, want %q", buf, msg)
	}
	return nil
}

func TestNetFault_DropIsSilentAndOnlyOnItsPort(t *testing.T) {
	nf := StartNetFaults(t)
	port := echoServer(t)
	other := echoServer(t)
	c, o := dialPort(t, port), dialPort(t, other)
	kept := dialPort(t, port) // excepted from the drop
	for _, conn := range []net.Conn{c, o, kept} {
		if err := exchange(conn, "before", 2*time.Second); err != nil {
			t.Fatalf("before the drop: %v", err)
		}
	}

	keptPort := kept.LocalAddr().(*net.TCPAddr).Port
	restore := nf.Drop(port, keptPort)
	if rules := nf.Rules(); !strings.Contains(rules, fmt.Sprintf("tcp dport %d tcp sport != %d drop", port, keptPort)) ||
		!strings.Contains(rules, fmt.Sprintf("tcp sport %d tcp dport != %d drop", port, keptPort)) {
		t.Errorf("no drop rules for port %d but client port %d in:\n%s", port, keptPort, rules)
	}
	// The connection in place: the bytes vanish, nothing says so.
	err := exchange(c, "during", 1500*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("exchange on the dropped port: %v, want a silent timeout", err)
	}
	// A new connection: its SYNs vanish too (a timeout, not a refusal).
	if nc, err := dial(port, time.Second); err == nil {
		nc.Close()
		t.Errorf("a new connection to the dropped port %d succeeded", port)
	} else if !errors.Is(err, os.ErrDeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
		t.Errorf("dial the dropped port: %v, want a timeout", err)
	}
	// The excepted connection: untouched.
	if err := exchange(kept, "kept", 2*time.Second); err != nil {
		t.Errorf("the connection excepted from the drop: %v", err)
	}
	// Another port: untouched, old and new connections alike.
	if err := exchange(o, "other", 2*time.Second); err != nil {
		t.Errorf("port %d (not dropped) during the drop: %v", other, err)
	}
	if err := exchange(dialPort(t, other), "fresh", 2*time.Second); err != nil {
		t.Errorf("new connection to port %d (not dropped) during the drop: %v", other, err)
	}

	restore()
	restore() // twice is harmless
	if strings.Contains(nf.Rules(), "drop") {
		t.Errorf("rules left after restore:\n%s", nf.Rules())
	}
	// Half-open, not broken: TCP retransmits what was dropped, the echo of
	// "during" arrives, then the connection carries on.
	buf := make([]byte, len("during"))
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "during" {
		t.Errorf("after the drop, the connection in place: %q %v, want the echo of \"during\"", buf, err)
	}
	if err := exchange(c, "after", 5*time.Second); err != nil {
		t.Errorf("after the drop, the connection in place: %v", err)
	}
	if err := exchange(dialPort(t, port), "new", 2*time.Second); err != nil {
		t.Errorf("after the drop, a new connection: %v", err)
	}
}

// send writes msg on from and reads it on to, within d.
func send(from, to net.Conn, msg string, d time.Duration) error {
	_ = from.SetDeadline(time.Now().Add(d))
	_ = to.SetDeadline(time.Now().Add(d))
	defer from.SetDeadline(time.Time{})
	defer to.SetDeadline(time.Time{})
	if _, err := io.WriteString(from, msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(to, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("read %q, want %q", buf, msg)
	}
	return nil
}

// sendReset writes msg on c and reads from it: the error the side gets.
func sendReset(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	_, err := c.Read(make([]byte, 1))
	return err
}

func TestNetFault_CutResetsBothSides(t *testing.T) {
	nf := StartNetFaults(t)
	port, accepted := silentServer(t)
	other := echoServer(t)
	c := dialPort(t, port)
	s := <-accepted
	idle := dialPort(t, port) // its client sends nothing while the cut lasts
	idleServer := <-accepted
	o := dialPort(t, other)
	for _, p := range [][2]net.Conn{{c, s}, {s, c}, {idle, idleServer}, {idleServer, idle}} {
		if err := send(p[0], p[1], "before", 2*time.Second); err != nil {
			t.Fatalf("before the cut: %v", err)
		}
	}
	if err := exchange(o, "before", 2*time.Second); err != nil {
		t.Fatalf("before the cut: %v", err)
	}

	restore := nf.Cut(port)
	// Each side of one connection: reset as it sends.
	if err := sendReset(c, "x"); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("client on the cut port: %v, want a connection reset", err)
	}
	if err := sendReset(s, "y"); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("server on the cut port: %v, want a connection reset", err)
	}
	// The idle connection's server sends; its client does not.
	if err := sendReset(idleServer, "z"); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("server of the idle connection on the cut port: %v, want a connection reset", err)
	}
	// A new connection is refused.
	if nc, err := dial(port, 2*time.Second); err == nil {
		nc.Close()
		t.Errorf("a new connection to the cut port %d succeeded", port)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial the cut port: %v, want connection refused", err)
	}
	if err := exchange(o, "other", 2*time.Second); err != nil {
		t.Errorf("port %d (not cut) during the cut: %v", other, err)
	}
	if err := exchange(dialPort(t, other), "fresh", 2*time.Second); err != nil {
		t.Errorf("new connection to port %d (not cut) during the cut: %v", other, err)
	}

	restore()
	if strings.Contains(nf.Rules(), "reject") {
		t.Errorf("rules left after restore:\n%s", nf.Rules())
	}
	// The client that sent nothing during the cut learns of it at its
	// first send after: its server's socket is gone.
	if err := sendReset(idle, "late"); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("idle client after the cut: %v, want a reset (its server's socket is gone)", err)
	}
	nc := dialPort(t, port)
	if err := send(nc, <-accepted, "new", 2*time.Second); err != nil {
		t.Errorf("after the cut, a new connection: %v", err)
	}
}

// TestNetFault_TablesRemoved checks that the table goes at cleanup, that a
// stale table of the same name (rules and all) is replaced, and that a
// dead process's table is removed while a live one's is left alone.
func TestNetFault_TablesRemoved(t *testing.T) {
	SkipShort(t, "nftables rules (as root)")
	bin, err := nftBinary()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("nftables needs root: run as root, or go test -short to skip this test")
	}
	nftRun := func(args ...string) error {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	exists := func(table string) bool { return nftRun("list", "table", "inet", table) == nil }
	port := echoServer(t)

	// A stale table of the name the next one takes, dropping port.
	name := fmt.Sprintf("%s%d_stale", netFaultsPrefix, os.Getpid())
	for _, args := range [][]string{
		{"add", "table", "inet", name},
		{"add", "chain", "inet", name, "out", "{ type filter hook output priority filter; policy accept; }"},
		{"add", "rule", "inet", name, "out", "tcp", "dport", fmt.Sprint(port), "drop"},
	} {
		if err := nftRun(args...); err != nil {
			t.Fatal(err)
		}
	}
	// A dead process's table, and another live table of this process.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadTable := fmt.Sprintf("%s%d_1", netFaultsPrefix, dead.Process.Pid)
	liveTable := fmt.Sprintf("%s%d_live", netFaultsPrefix, os.Getpid())
	for _, tb := range []string{deadTable, liveTable} {
		if err := nftRun("add", "table", "inet", tb); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = nftRun("delete", "table", "inet", liveTable) })

	t.Run("own table", func(t *testing.T) {
		nf := startNetFaults(t, name)
		if err := exchange(dialPort(t, port), "stale rule gone", 2*time.Second); err != nil {
			t.Errorf("the stale table's drop rule still acts: %v", err)
		}
		nf.Drop(port) // not restored: the cleanup removes it with the table
		if exists(deadTable) {
			t.Errorf("table %s of dead process %d left in place", deadTable, dead.Process.Pid)
		}
		if !exists(liveTable) {
			t.Errorf("table %s of this live process removed", liveTable)
		}
	})
	if exists(name) {
		t.Errorf("table %s left after the test's cleanup", name)
	}
	if err := exchange(dialPort(t, port), "after cleanup", 2*time.Second); err != nil {
		t.Errorf("port %d after the table's removal: %v", port, err)
	}
}

func TestNetFault_ClientPorts(t *testing.T) {
	port := echoServer(t)
	a, b := dialPort(t, port), dialPort(t, port)
	want := map[int]bool{a.LocalAddr().(*net.TCPAddr).Port: true, b.LocalAddr().(*net.TCPAddr).Port: true}
	got := ClientPorts(t, port)
	if len(got) != 2 || !want[got[0]] || !want[got[1]] {
		t.Errorf("ClientPorts(%d) = %v, want the two clients' ports %v (not the server's side)", port, got, want)
	}
	if got := ClientPorts(t, echoServer(t)); len(got) != 0 {
		t.Errorf("ClientPorts of a server with no client = %v", got)
	}
}

func TestPortOf(t *testing.T) {
	for in, want := range map[string]int{
		"mqtt://127.0.0.1:1883": 1883, "nats://127.0.0.1:4222": 4222, "127.0.0.1:9464": 9464,
	} {
		if got := PortOf(t, in); got != want {
			t.Errorf("PortOf(%q) = %d, want %d", in, got, want)
		}
	}
}
