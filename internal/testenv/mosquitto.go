// Package testenv starts real servers for integration tests.
//
// Every server binds 127.0.0.1 only, keeps its state in tb.TempDir() and is
// stopped by tb.Cleanup, so tests never share a port, a directory or a
// process. A missing server binary fails the test (it is never skipped), with
// the command that installs it.
package testenv

import (
	"testing"

	"github.com/km0/edgeproc/internal/mosquitto"
)

// MosquittoBinary is where Debian's mosquitto package installs the broker.
const MosquittoBinary = mosquitto.Binary

// Mosquitto is a Mosquitto broker process owned by one test. Its port and
// persistence directory stay the same across Restart, so a persistent MQTT
// session outlives a broker restart exactly as it would in production.
type Mosquitto struct {
	tb testing.TB
	b  *mosquitto.Broker
}

// StartMosquitto starts /usr/sbin/mosquitto on 127.0.0.1 and a free port with
// a generated configuration (persistence on, unlimited queued messages, log to
// stderr) and returns once the broker accepts TCP connections. The broker is
// stopped when the test ends; its log is printed if the test failed.
func StartMosquitto(tb testing.TB) *Mosquitto {
	tb.Helper()
	SkipShort(tb, "a Mosquitto broker")
	b, err := mosquitto.Start(MosquittoBinary, tb.TempDir(), 64<<10)
	if err != nil {
		tb.Fatal(err)
	}
	m := &Mosquitto{tb: tb, b: b}
	tb.Cleanup(func() {
		m.Stop()
		if tb.Failed() {
			tb.Logf("mosquitto log (tail):\n%s", b.Log())
		}
	})
	return m
}

// URL is the broker address as an MQTT URL, e.g. "mqtt://127.0.0.1:41234".
func (m *Mosquitto) URL() string { return m.b.URL() }

// Addr is the broker's host:port.
func (m *Mosquitto) Addr() string { return m.b.Addr() }

// PID is the running broker's process id, or 0.
func (m *Mosquitto) PID() int { return m.b.PID() }

// Stop terminates the broker with SIGTERM, so it writes its persistence file,
// and waits for it to exit. Stopping a stopped broker does nothing.
func (m *Mosquitto) Stop() {
	m.tb.Helper()
	if err := m.b.Stop(); err != nil {
		m.tb.Error(err)
	}
}

// Restart stops the broker and starts it again on the same port with the same
// persistence directory: persistent sessions and their queued messages
// survive.
func (m *Mosquitto) Restart() {
	m.tb.Helper()
	if err := m.b.Restart(); err != nil {
		m.tb.Fatal(err)
	}
}
