package mqtt

import (
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// Message is one PUBLISH received from the broker. The handler given to Start
// owns it: Topic and Payload are never touched by paho again and may be
// retained.
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

	src      *Source
	client   *paho.Client // the connection that delivered the message
	packetID uint16
	qos      byte
	acked    atomic.Bool
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
	if m.src == nil || !m.acked.CompareAndSwap(false, true) || m.qos == 0 {
		return
	}
	s := m.src
	// Acking through a client that is gone would be a no-op in paho (its ack
	// tracker is reset on shutdown), but a packet identifier of the old
	// connection must never reach the new one, so check here explicitly.
	if !s.win.release(m.client) {
		s.staleAcks.Add(1)
		return
	}
	// Only PacketID and QoS matter to paho's ack tracker; building the full
	// packet again would copy properties for nothing.
	if m.qos == 1 {
		s.unsent.Add(1) // before paho's timer can write it
	}
	if err := m.client.Ack(&paho.Publish{PacketID: m.packetID, QoS: m.qos}); err != nil {
		if m.qos == 1 {
			s.unsent.Add(-1)
		}
		s.staleAcks.Add(1) // paho.ErrPacketNotFound: the connection dropped meanwhile
		return
	}
	s.acked.Add(1)
}
