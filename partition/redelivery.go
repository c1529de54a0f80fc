package partition

import (
	"bytes"

	"github.com/km0/edgeproc/mqtt"
)

// A broker that loses the relay's connection (restarted, or the network
// between them cut) gives the same relay again, on its next connection,
// what it had sent and got no ack for, flagged as duplicates and before
// anything new. The relay had put those positions in batches, stored or
// on their way: storing them again would put each in the stream twice.
// The broker sends at most its window (the Receive Maximum the relay
// announces) unacked, so a redelivery is one of the relay's last window
// of positions: it keeps them, and a redelivered message found there is
// acked once the batch that holds it is stored, and not stored again.
// Only redeliveries are looked up, in an index built at the first one.

// lastReceived is the relay's last window of positions and their
// batches, owned by the batcher.
type lastReceived struct {
	ring  [mqtt.DefaultReceiveMaximum]receivedPos
	next  int
	index map[uint64]int // entryID → place in ring, while redeliveries come
}

type receivedPos struct {
	token   string
	payload []byte
	b       *batch
}

// add keeps a position the relay received and the batch it went to.
func (r *lastReceived) add(token string, payload []byte, b *batch) {
	r.ring[r.next] = receivedPos{token: token, payload: payload, b: b}
	r.next = (r.next + 1) % len(r.ring)
}

// batchOf is the batch that holds m's earlier copy when m is a
// redelivery of one of the last window's positions, or nil. The first
// message that is no redelivery ends the redeliveries.
func (r *lastReceived) batchOf(token string, m *mqtt.Message) *batch {
	if !m.Duplicate {
		r.index = nil
		return nil
	}
	if r.index == nil {
		r.index = make(map[uint64]int, len(r.ring))
		for i, p := range r.ring {
			if p.b != nil {
				r.index[entryID(p.token, p.payload)] = i
			}
		}
	}
	i, ok := r.index[entryID(token, m.Payload)]
	if !ok {
		return nil
	}
	if p := r.ring[i]; p.token == token && bytes.Equal(p.payload, m.Payload) {
		return p.b
	}
	return nil
}
