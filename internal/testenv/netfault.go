package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// NetFaults is a test's own nftables table (family inet, named
// edgeproc_test_PID_N) with one chain on the output hook, through which
// the test drops or resets the loopback TCP traffic of ports it names: its
// own servers' ports, never anything else. Loopback traffic passes the
// output hook in both directions (client to server, server to client), so
// a rule there on the destination port and one on the source port catch
// a connection's every packet. The table is deleted when the test ends.
//
// It needs root and nft (Debian's nftables package, which scripts/test.sh
// installs). This kernel has no netem: a fault is a drop or a reset, never
// a delay.
type NetFaults struct {
	tb    testing.TB
	table string
	mu    sync.Mutex // serialises the nft transactions of one table
}

// netFaultsPrefix starts every table's name; the process id follows, so
// that concurrent test processes (go test runs packages in parallel) keep
// to their own tables.
const netFaultsPrefix = "edgeproc_test_"

var netFaultsSeq atomic.Int64

// StartNetFaults creates the test's table, with no rule yet. Without root
// or without nft the test fails, saying what is missing (as Tmpfs does);
// under -short it is skipped.
func StartNetFaults(tb testing.TB) *NetFaults {
	tb.Helper()
	return startNetFaults(tb, fmt.Sprintf("%s%d_%d", netFaultsPrefix, os.Getpid(), netFaultsSeq.Add(1)))
}

// nftBinary is where Debian's nftables package installs nft (a test's
// PATH may lack /usr/sbin).
func nftBinary() (string, error) {
	if p, err := exec.LookPath("nft"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nft"); err == nil {
		return "/usr/sbin/nft", nil
	}
	return "", errors.New("nft not found: apt-get install -y nftables (scripts/test.sh installs it)")
}

func startNetFaults(tb testing.TB, table string) *NetFaults {
	tb.Helper()
	SkipShort(tb, "nftables rules (as root)")
	if runtime.GOOS != "linux" {
		tb.Fatalf("nftables needs Linux, this is %s (go test -short skips the tests that need it)", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		tb.Fatal("network faults (nftables rules) need root: run the tests as root (scripts/test.sh in CI does), or go test -short to skip them")
	}
	if _, err := nftBinary(); err != nil {
		tb.Fatal(err)
	}
	removeStaleTables(tb)
	n := &NetFaults{tb: tb, table: table}
	// add + delete + add: a stale table of the same name (a process of
	// the same pid that died before its cleanup) goes, rules and all, in
	// the same transaction that creates the new one.
	if _, err := n.nft(fmt.Sprintf(`add table inet %[1]s
delete table inet %[1]s
add table inet %[1]s
add chain inet %[1]s out { type filter hook output priority filter; policy accept; }
`, table)); err != nil {
		tb.Fatalf("create nftables table %s: %v", table, err)
	}
	tb.Cleanup(func() {
		if _, err := n.nft("delete table inet " + table + "\n"); err != nil {
			tb.Errorf("remove nftables table %s: %v", table, err)
		}
	})
	return n
}

var staleTable = regexp.MustCompile(`(?m)^table inet (` + netFaultsPrefix + `(\d+)_\w+)$`)

// removeStaleTables deletes the tables of test processes that are gone: a
// process killed before its cleanup ran (a timeout's exit skips every
// t.Cleanup) leaves its table, and a rule left in it would match a port a
// later test draws. A table of a live process is never touched.
func removeStaleTables(tb testing.TB) {
	tb.Helper()
	bin, _ := nftBinary()
	out, err := exec.Command(bin, "list", "tables").CombinedOutput()
	if err != nil {
		tb.Fatalf("nft list tables: %v: %s", err, out)
	}
	for _, m := range staleTable.FindAllStringSubmatch(string(out), -1) {
		pid, err := strconv.Atoi(m[2])
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if out, err := exec.Command(bin, "delete", "table", "inet", m[1]).CombinedOutput(); err != nil {
			tb.Logf("remove the stale nftables table %s: %v: %s", m[1], err, out)
		} else {
			tb.Logf("removed the stale nftables table %s (its process %d is gone)", m[1], pid)
		}
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Table is the table's name (family inet).
func (n *NetFaults) Table() string { return n.table }

// nft runs script (nft -f syntax) as one transaction, echoing what it
// added with handles.
func (n *NetFaults) nft(script string) (string, error) {
	bin, err := nftBinary()
	if err != nil {
		return "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := exec.Command(bin, "--echo", "--handle", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nft: %w: %s\nscript:\n%s", err, strings.TrimSpace(string(out)), script)
	}
	return string(out), nil
}

var ruleHandle = regexp.MustCompile(`# handle (\d+)`)

// Drop silently drops every TCP packet to or from port on 127.0.0.1 until
// the returned restore is called: a connection in place goes half-open
// (neither side is told anything; each learns of it only from its own
// timeouts, and one that outlives the drop resumes when TCP retransmits),
// and a new one cannot connect (its SYNs vanish). The connections from
// the client ports in except (ClientPorts: the test's own publisher, say)
// are left alone. restore may be called more than once; the rules go with
// the table at cleanup in any case.
func (n *NetFaults) Drop(port int, except ...int) (restore func()) {
	n.tb.Helper()
	return n.rules(port, except, "drop")
}

// Cut resets every connection to or from port on 127.0.0.1 until the
// returned restore is called: any packet either side sends is dropped
// and answered, to its sender, with a TCP reset, so each side sees the
// connection reset the moment it sends (a side that sends nothing while
// the cut lasts finds its peer's socket gone at its first send after it,
// and gets a reset from the peer's kernel); a new connection is refused.
// The connections from the client ports in except are left alone.
func (n *NetFaults) Cut(port int, except ...int) (restore func()) {
	n.tb.Helper()
	// A reset is let through: the one the reject sends for a client's
	// packet leaves with the server's port as its source, and rejecting it
	// in turn would drop it.
	return n.rules(port, except, "tcp flags & rst == 0 reject with tcp reset")
}

// rules adds verdict for port's packets both ways (but those of the
// client ports in except), in one transaction, and returns what deletes
// those two rules.
func (n *NetFaults) rules(port int, except []int, verdict string) func() {
	n.tb.Helper()
	for _, p := range append([]int{port}, except...) {
		if p <= 0 || p > 65535 {
			n.tb.Fatalf("netfault: port %d", p)
		}
	}
	var toServer, fromServer string // the exceptions, as the client's port
	if len(except) > 0 {
		set := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(except)), ", "), "[]")
		toServer, fromServer = "tcp sport != { "+set+" } ", "tcp dport != { "+set+" } "
	}
	out, err := n.nft(fmt.Sprintf(`add rule inet %[1]s out ip daddr 127.0.0.1 tcp dport %[2]d %[4]s%[3]s
add rule inet %[1]s out ip saddr 127.0.0.1 tcp sport %[2]d %[5]s%[3]s
`, n.table, port, verdict, toServer, fromServer))
	if err != nil {
		n.tb.Fatalf("netfault: %s port %d: %v", verdict, port, err)
	}
	var del strings.Builder
	for _, m := range ruleHandle.FindAllStringSubmatch(out, -1) {
		fmt.Fprintf(&del, "delete rule inet %s out handle %s\n", n.table, m[1])
	}
	if strings.Count(del.String(), "\n") != 2 {
		n.tb.Fatalf("netfault: %s port %d: no two rule handles in nft's echo:\n%s", verdict, port, out)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if _, err := n.nft(del.String()); err != nil {
				n.tb.Errorf("netfault: restore port %d: %v", port, err)
			}
		})
	}
}

// ClientPorts returns the local ports of this process's TCP connections
// to 127.0.0.1:port: its own clients of that server (a test's publisher
// standing for the phones or the gateway, whose path is not the one a
// fault between edgeproc and the server is about), for Drop's and Cut's
// except. The sockets come from /proc/net/tcp, kept if one of this
// process's file descriptors is theirs.
func ClientPorts(tb testing.TB, port int) []int {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		tb.Fatalf("client ports: %v", err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatalf("client ports: %v", err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []int
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) < 10 || !mine[f[9]] {
			continue
		}
		lip, lport, ok1 := strings.Cut(f[1], ":")
		rip, rport, ok2 := strings.Cut(f[2], ":")
		if !ok1 || !ok2 || !isLoopback(rip) || !isLoopback(lip) {
			continue
		}
		l, err1 := strconv.ParseInt(lport, 16, 32)
		r, err2 := strconv.ParseInt(rport, 16, 32)
		if err1 == nil && err2 == nil && int(r) == port && int(l) != port {
			out = append(out, int(l))
		}
	}
	return out
}

// isLoopback: /proc/net/tcp prints 127.0.0.1 in the host's byte order.
func isLoopback(hexIP string) bool { return hexIP == "0100007F" || hexIP == "7F000001" }

// Rules lists the table as nft prints it, for a test's log.
func (n *NetFaults) Rules() string {
	bin, err := nftBinary()
	if err != nil {
		return err.Error()
	}
	out, err := exec.Command(bin, "list", "table", "inet", n.table).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("nft list table inet %s: %v: %s", n.table, err, out)
	}
	return string(out)
}

// PortOf is the port of a server address: a URL ("mqtt://127.0.0.1:1883",
// "nats://127.0.0.1:4222") or host:port.
func PortOf(tb testing.TB, addr string) int {
	tb.Helper()
	hostport := addr
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		hostport = u.Host
	}
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		tb.Fatalf("port of %q: %v", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 {
		tb.Fatalf("port of %q: %q", addr, p)
	}
	return port
}
