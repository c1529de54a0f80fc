package testenv

import (
	"net"
	"os"
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

func TestMosquitto_Config(t *testing.T) {
	m := StartMosquitto(t)
	b, err := os.ReadFile(m.conf)
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	for _, want := range []string{
		"listener " + strings.TrimPrefix(m.Addr(), "127.0.0.1:") + " 127.0.0.1\n",
		"persistence true\n",
		"persistence_location " + m.dataDir + "\n",
		"max_queued_messages 0\n", // the default 1000 silently drops messages
		"allow_anonymous true\n",
		"log_dest stderr\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q; got:\n%s", want, conf)
		}
	}
}

func mustDial(tb testing.TB, addr string) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	c.Close()
}
