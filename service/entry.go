package service

import (
	"bytes"

	"github.com/km0/edgeproc/wal"
)

// kind is what a write-ahead-log entry records. Every kind is applied to
// the engine by one function, driver.apply, live and at recovery alike.
type kind uint8

const (
	// kindPosition is an MQTT message as received, valid or not.
	kindPosition kind = iota + 1
	// kindTick is the idle rule applied at the entry's arrival.
	kindTick
	// kindListen records that the source (re)started listening at the
	// entry's arrival: the silence before it was deafness, not evidence.
	kindListen
)

// entry is one log entry as the service sees it.
type entry struct {
	kind    kind
	arrival int64 // ms
	topic   string
	payload []byte
}

// listenMark tells a listen entry from a tick in the log: both have an
// empty topic, which no MQTT message has.
var listenMark = []byte("\x00listen")

// walEntry is e as the log stores it.
func (e entry) walEntry() wal.Entry {
	switch e.kind {
	case kindTick:
		return wal.Entry{Arrival: e.arrival}
	case kindListen:
		return wal.Entry{Arrival: e.arrival, Payload: listenMark}
	}
	return wal.Entry{Arrival: e.arrival, Topic: e.topic, Payload: e.payload}
}

// entryOf is the entry a log record holds.
func entryOf(w wal.Entry) entry {
	switch {
	case w.Topic == "" && len(w.Payload) == 0:
		return entry{kind: kindTick, arrival: w.Arrival}
	case w.Topic == "" && bytes.Equal(w.Payload, listenMark):
		return entry{kind: kindListen, arrival: w.Arrival}
	}
	return entry{kind: kindPosition, arrival: w.Arrival, topic: w.Topic, payload: w.Payload}
}
