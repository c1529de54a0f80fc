// Package entry is the unit of a market's log: what a source records, in
// order, for the engine to apply (engine.Apply) live and again when a
// recovery or a new owner replays the log. The MQTT source keeps entries
// in its write-ahead log (package wal, which frames them on disk); the
// partitioned source reads them from the messages of a partition's stream.
package entry

import "fmt"

// Kind says what an Entry records. Its values are part of the write-ahead
// log's frame format: never renumber them.
type Kind uint8

const (
	// Position is an arrived message (Topic, Payload). It is the zero
	// value.
	Position Kind = 0
	// Tick is an idle advance of processing time to Arrival; Topic and
	// Payload are normally empty.
	Tick Kind = 1
	// Listen records that the source (re)started listening at Arrival
	// (contract §3, deaf is not silent): the silence before it does not
	// count for the idle rule. Topic and Payload are empty.
	Listen Kind = 2

	// Kinds is the number of kinds this binary knows: [0, Kinds).
	Kinds = 3
)

func (k Kind) String() string {
	switch k {
	case Position:
		return "position"
	case Tick:
		return "tick"
	case Listen:
		return "listen"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Entry is one record of a market's log: an arrived message, an idle
// tick or a listen.
type Entry struct {
	// Kind is what the entry records. Default Position.
	Kind Kind
	// Arrival is the processing time at which the message arrived, in Unix
	// milliseconds.
	Arrival int64
	// Topic is the MQTT topic the message was published on.
	Topic string
	// Payload is the message body, as received. Entries a log hands out on
	// replay may alias its read buffers: the bytes are never modified, but
	// keeping the slice may keep a whole segment in memory, so copy it to
	// keep it.
	Payload []byte
}
