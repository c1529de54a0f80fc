package mqtt

import (
	"context"
	"sync"

	"github.com/eclipse/paho.golang/paho"
)

// window caps the messages handed to the handler and not yet acked, per
// connection, at ReceiveMaximum.
//
// The broker is supposed to do this (MQTT v5 §4.9), but Mosquitto 2.0.11, the
// Debian version, does not: once the client's quota has been exhausted and a
// PUBACK arrives, it sends its whole backlog (measured here: ~1900 unacked
// messages in flight with Receive Maximum 20; see mosquitto issue #2301). paho
// itself then only buffers ReceiveMaximum messages and pushes
// back through TCP, but nothing would stop a handler that never blocks from
// accumulating unacked messages. Holding the handler here makes the bound a
// property of this package rather than of the broker.
type window struct {
	max  int
	wake chan struct{} // capacity 1: an ack happened

	mu          sync.Mutex
	client      *paho.Client // connection being counted; nil when none
	outstanding int
}

func newWindow(max uint16) *window {
	return &window{max: int(max), wake: make(chan struct{}, 1)}
}

// acquire reserves a slot for a message delivered by client, waiting while
// max messages of that connection are unacked. A message from a new client
// starts a new count: the old connection's unacked messages will be
// redelivered and its acks are discarded. It returns false if ctx ends first.
func (w *window) acquire(ctx context.Context, client *paho.Client) bool {
	for {
		w.mu.Lock()
		if w.client != client {
			w.client, w.outstanding = client, 0
		}
		if w.outstanding < w.max {
			w.outstanding++
			w.mu.Unlock()
			return true
		}
		w.mu.Unlock()
		select {
		case <-w.wake:
		case <-ctx.Done():
			return false
		}
	}
}

// release frees the slot of a message delivered by client and reports whether
// client is still the live connection (false: the ack is stale and must not
// be sent).
func (w *window) release(client *paho.Client) bool {
	w.mu.Lock()
	live := client != nil && client == w.client
	if live && w.outstanding > 0 {
		w.outstanding--
	}
	w.mu.Unlock()
	if live {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return live
}

// reset forgets the current connection: every later release is stale.
func (w *window) reset() {
	w.mu.Lock()
	w.client, w.outstanding = nil, 0
	w.mu.Unlock()
}

// count returns the unacked messages of the current connection.
func (w *window) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.outstanding
}
