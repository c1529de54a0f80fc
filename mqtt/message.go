package mqtt

import (
	"sync/atomic"
	"time"
)

// Message is one PUBLISH received from the broker. The handler given to Start
// owns it: Topic and Payload are its own and may be retained.
type Message struct {
	// Topic is the topic the message was published to (not the filter).
	Topic string
	// Payload is the message body, as published.
	Payload []byte
	// Arrival is the wall-clock time at which the message was handed to the
	// handler (receive order, so non-decreasing unless the clock steps back).
	Arrival time.Time
	// Duplicate is the MQTT DUP flag: the broker delivered this message
	// before, on an earlier connection, and got no ack.
	Duplicate bool

	c     *client // the connection that delivered the message
	seq   uint64  // its place in c's receive order
	id    uint16  // its packet identifier
	qos   byte
	acked atomic.Bool
}

// Ack acknowledges the message to the broker, which then never redelivers
// it. Call it only once the message is durable (edgeproc: in the write-ahead
// log). It is safe from any goroutine and in any order: the PUBACK is
// released in receive order, after every earlier message of the same
// connection is acked, within Config.AckInterval. Calls after the first do
// nothing, as do acks of QoS 0 messages. An ack for a message of a connection
// that has since dropped is discarded (Stats.StaleAcks): the broker
// redelivers that message.
func (m *Message) Ack() {
	if m.c == nil || !m.acked.CompareAndSwap(false, true) || m.qos == 0 {
		return
	}
	if !m.c.in.ack(m.seq) {
		m.c.s.staleAcks.Add(1)
		m.c.s.resent.remember(m, int(m.c.s.cfg.ReceiveMaximum))
		return
	}
	m.c.s.acked.Add(1)
}
