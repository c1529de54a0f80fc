package mqtt

import (
	"bytes"
	"sync"
	"sync/atomic"
)

// resent remembers the messages acked too late: acked (durable, for
// edgeproc: in its write-ahead log) after their connection had dropped,
// so that the broker never had their PUBACK. A broker resuming the
// session sends each again on the next connection, with its packet
// identifier and the DUP flag, before anything new (MQTT v5 §4.4).
// Handing such a copy on would make the consumer store the message twice
// and, once the windows of its position have fired, count it as late data
// although it came on time. A copy that matches one (packet identifier,
// topic and payload) is acked at once instead, and counted in
// Stats.Resent. A connection has at most ReceiveMaximum unacked messages,
// so no more are remembered; the first message without DUP on a later
// connection forgets them all: the broker has resent what it had.
type resent struct {
	n    atomic.Int32 // len(byID): the per-message path looks at it alone
	mu   sync.Mutex
	from *client // the connection whose acks came too late
	byID map[uint16]resentMsg
}

type resentMsg struct {
	topic   string
	payload []byte
}

// remember records m, acked after its connection dropped.
func (r *resent) remember(m *Message, max int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.from != m.c {
		r.from, r.byID = m.c, nil // an older connection's: the broker resent those already
	}
	if len(r.byID) >= max {
		return
	}
	if r.byID == nil {
		r.byID = make(map[uint16]resentMsg)
	}
	r.byID[m.id] = resentMsg{topic: m.Topic, payload: bytes.Clone(m.Payload)}
	r.n.Store(int32(len(r.byID)))
}

// resends reports whether p, read from c, is a copy of a message acked
// too late, forgetting it; a message without DUP on another connection
// than theirs forgets them all.
func (r *resent) resends(c *client, p *publish, topic string) bool {
	if r.n.Load() == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c == r.from {
		return false
	}
	if !p.dup {
		r.byID, r.from = nil, nil
		r.n.Store(0)
		return false
	}
	m, ok := r.byID[p.id]
	if !ok || m.topic != topic || !bytes.Equal(m.payload, p.payload) {
		return false
	}
	delete(r.byID, p.id)
	r.n.Store(int32(len(r.byID)))
	return true
}
