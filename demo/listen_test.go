package demo

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// listeningAddrs returns the local addresses of the TCP sockets process pid
// listens on, read from /proc: its socket inodes, matched against the
// LISTEN entries (state 0A) of /proc/PID/net/tcp and tcp6.
func listeningAddrs(t *testing.T, pid int) []string {
	t.Helper()
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatalf("list %s: %v", fdDir, err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var addrs []string
	for _, file := range []string{"tcp", "tcp6"} {
		p := fmt.Sprintf("/proc/%d/net/%s", pid, file)
		f, err := os.Open(p)
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			addrs = append(addrs, procAddr(t, fields[1]))
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
	}
	return addrs
}

// procAddr decodes /proc/net/tcp's "0100007F:1F90": the address as
// host-order (little-endian) 32-bit words, the port in hex.
func procAddr(t *testing.T, s string) string {
	t.Helper()
	hexIP, hexPort, ok := strings.Cut(s, ":")
	b, err := hex.DecodeString(hexIP)
	port, perr := strconv.ParseUint(hexPort, 16, 16)
	if !ok || err != nil || perr != nil || len(b)%4 != 0 {
		t.Fatalf("bad /proc address %q", s)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	return net.JoinHostPort(net.IP(b).String(), strconv.FormatUint(port, 10))
}

// assertLoopbackOnly fails the test for any listener of pid that is not on
// 127.0.0.1, and for none at all (the check would then prove nothing).
func assertLoopbackOnly(t *testing.T, pid int) {
	t.Helper()
	addrs := listeningAddrs(t, pid)
	if len(addrs) < 3 {
		t.Errorf("got listeners %v, want at least MQTT, NATS and HTTP", addrs)
	}
	for _, a := range addrs {
		if host, _, _ := net.SplitHostPort(a); host != "127.0.0.1" {
			t.Errorf("got a listener on %s, want 127.0.0.1 only", a)
		}
	}
}

func TestProcAddr(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0100007F:1F90", "127.0.0.1:8080"},
		{"00000000:0016", "0.0.0.0:22"},
		{"00000000000000000000000001000000:01BB", "[::1]:443"},
		{"00000000000000000000000000000000:0050", "[::]:80"},
	}
	for _, tt := range tests {
		if got := procAddr(t, tt.in); got != tt.want {
			t.Errorf("procAddr(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
