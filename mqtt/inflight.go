package mqtt

import (
	"context"
	"sync"
)

// inflight holds one connection's QoS 1 messages from their delivery to the
// handler until their PUBACK is written, in receive order, and caps them at
// ReceiveMaximum.
//
// MQTT requires PUBACKs in the order the PUBLISHes came, so an ack releases
// PUBACKs only for the acked prefix: a message acked early waits, holding its
// slot, until every earlier one is acked too. The cap is therefore on what
// the broker has not had a PUBACK for, which is what its own Receive Maximum
// counts. The broker is supposed to stop there (MQTT v5 §4.9), but
// Mosquitto 2.0.11, the Debian version, does not: once the client's quota
// has been used up and a PUBACK arrives, it sends its whole backlog
// (measured: ~1900 unacked messages in flight with Receive Maximum 20; see
// mosquitto issue #2301). Holding the reader here makes the bound a
// property of this package rather than of the broker; the rest waits in the
// socket and the broker's queue.
type inflight struct {
	mu    sync.Mutex
	ids   []uint16 // a ring of len ReceiveMaximum: packet identifiers by receive order
	acked []bool
	head  int    // the ring index of the oldest message
	n     int    // messages held
	base  uint64 // the sequence number of the oldest message
	dead  bool   // the connection has gone: acks are stale
	space chan struct{}
	// write takes the PUBACKs an ack released, in order; it is called with
	// mu held, so two acks released concurrently cannot swap their packets.
	write func([]byte)
	out   []byte // the PUBACKs of one release, reused
}

func newInflight(max uint16, write func([]byte)) *inflight {
	return &inflight{
		ids:   make([]uint16, max),
		acked: make([]bool, max),
		space: make(chan struct{}, 1),
		write: write,
	}
}

// add holds message id, waiting while the ring is full, and returns its
// sequence number for ack. It returns false if ctx ends or the connection
// dies first.
func (f *inflight) add(ctx context.Context, id uint16) (uint64, bool) {
	for {
		f.mu.Lock()
		if f.dead {
			f.mu.Unlock()
			return 0, false
		}
		if f.n < len(f.ids) {
			i := (f.head + f.n) % len(f.ids)
			f.ids[i], f.acked[i] = id, false
			seq := f.base + uint64(f.n)
			f.n++
			f.mu.Unlock()
			return seq, true
		}
		f.mu.Unlock()
		select {
		case <-f.space:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// ack marks message seq acked and writes the PUBACKs that releases. It
// reports false when the ack is stale: the connection has gone (its packet
// identifiers mean nothing on the next one; the broker redelivers).
func (f *inflight) ack(seq uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead || seq < f.base || seq-f.base >= uint64(f.n) {
		return false
	}
	f.acked[(f.head+int(seq-f.base))%len(f.ids)] = true
	out := f.out[:0]
	for f.n > 0 && f.acked[f.head] {
		out = appendPuback(out, f.ids[f.head])
		f.head = (f.head + 1) % len(f.ids)
		f.n--
		f.base++
	}
	f.out = out
	if len(out) > 0 {
		f.write(out)
		select {
		case f.space <- struct{}{}:
		default:
		}
	}
	return true
}

// kill marks the connection gone: later acks are stale, and a reader
// waiting in add gives up.
func (f *inflight) kill() {
	f.mu.Lock()
	f.dead = true
	f.mu.Unlock()
	select {
	case f.space <- struct{}{}:
	default:
	}
}

// count returns the messages held: delivered and not yet acknowledged to
// the broker.
func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}
