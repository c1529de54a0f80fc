package testenv

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestMosquitto_StopRestartSamePort(t *testing.T) {
	m := StartMosquitto(t)
	url := m.URL()
	if !strings.HasPrefix(url, "mqtt://127.0.0.1:") {
		t.Fatalf("got URL %q, want mqtt://127.0.0.1:PORT", url)
	}
	mustDial(t, m.Addr())

	m.Stop()
	if c, err := net.DialTimeout("tcp", m.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatalf("after Stop: dial %s succeeded, want refused", m.Addr())
	}
	m.Stop() // stopping twice is harmless

	m.Restart()
	if m.URL() != url {
		t.Errorf("after Restart: got URL %q, want the same %q", m.URL(), url)
	}
	mustDial(t, m.Addr())
}

func mustDial(tb testing.TB, addr string) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	c.Close()
}
