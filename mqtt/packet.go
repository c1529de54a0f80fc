package mqtt

import (
	"bufio"
	"errors"
	"fmt"
)

// MQTT v5 control packet types (the fixed header's high nibble) this client
// reads or writes.
const (
	typeConnect    = 1
	typeConnack    = 2
	typePublish    = 3
	typePuback     = 4
	typeSubscribe  = 8
	typeSuback     = 9
	typePingreq    = 12
	typePingresp   = 13
	typeDisconnect = 14
)

// errMalformed is a packet that breaks MQTT v5's encoding rules.
var errMalformed = errors.New("malformed packet")

// readHeader reads a fixed header: the packet type, its flags and the
// remaining length (a variable byte integer of at most four bytes).
func readHeader(r *bufio.Reader) (typ, flags byte, n int, err error) {
	b, err := r.ReadByte()
	if err != nil {
		return 0, 0, 0, err
	}
	mul := 1
	for i := 0; ; i++ {
		c, err := r.ReadByte()
		if err != nil {
			return 0, 0, 0, err
		}
		n += int(c&0x7f) * mul
		if c&0x80 == 0 {
			break
		}
		if i == 3 {
			return 0, 0, 0, fmt.Errorf("%w: remaining length longer than four bytes", errMalformed)
		}
		mul <<= 7
	}
	return b >> 4, b & 0x0f, n, nil
}

// publish is a decoded PUBLISH. topic and payload alias the body it was
// decoded from.
type publish struct {
	topic   []byte
	payload []byte
	id      uint16 // 0 for QoS 0
	qos     byte
	dup     bool
}

// decodePublish decodes a PUBLISH from its fixed header's flags and its
// body (the remaining length's bytes). Properties are skipped: none changes
// what edgeproc does with a position, and a Topic Alias (the only one that
// would) is never allowed, as this client announces no Topic Alias
// Maximum — a PUBLISH without a topic is refused.
func decodePublish(flags byte, body []byte) (publish, error) {
	p := publish{qos: flags >> 1 & 3, dup: flags&8 != 0}
	if p.qos == 3 {
		return p, fmt.Errorf("%w: PUBLISH with QoS 3", errMalformed)
	}
	if len(body) < 2 {
		return p, fmt.Errorf("%w: PUBLISH shorter than its topic length", errMalformed)
	}
	tl := int(body[0])<<8 | int(body[1])
	rest := body[2:]
	if tl == 0 {
		return p, fmt.Errorf("%w: PUBLISH without a topic (no topic alias was allowed)", errMalformed)
	}
	if len(rest) < tl {
		return p, fmt.Errorf("%w: PUBLISH topic runs past the packet", errMalformed)
	}
	p.topic, rest = rest[:tl:tl], rest[tl:]
	if p.qos > 0 {
		if len(rest) < 2 {
			return p, fmt.Errorf("%w: PUBLISH without its packet identifier", errMalformed)
		}
		p.id, rest = uint16(rest[0])<<8|uint16(rest[1]), rest[2:]
		if p.id == 0 {
			return p, fmt.Errorf("%w: PUBLISH with packet identifier 0", errMalformed)
		}
	}
	pl, k, err := uvarint(rest)
	if err != nil {
		return p, fmt.Errorf("PUBLISH properties length: %w", err)
	}
	rest = rest[k:]
	if pl > len(rest) {
		return p, fmt.Errorf("%w: PUBLISH properties run past the packet", errMalformed)
	}
	p.payload = rest[pl:]
	return p, nil
}

// uvarint decodes a variable byte integer from the start of b and returns
// it with its length in bytes.
func uvarint(b []byte) (v, n int, err error) {
	mul := 1
	for i := 0; i < 4; i++ {
		if i == len(b) {
			return 0, 0, fmt.Errorf("%w: variable byte integer cut short", errMalformed)
		}
		v += int(b[i]&0x7f) * mul
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
		mul <<= 7
	}
	return 0, 0, fmt.Errorf("%w: variable byte integer longer than four bytes", errMalformed)
}

// appendPuback appends the PUBACK of packet id with reason Success: MQTT v5
// lets it omit the reason code and properties, so it is four bytes.
func appendPuback(b []byte, id uint16) []byte {
	return append(b, typePuback<<4, 2, byte(id>>8), byte(id))
}

// Fixed packets with no variable header of their own.
var (
	pingreq = []byte{typePingreq << 4, 0}
	// disconnectNormal is DISCONNECT with reason Normal disconnection and
	// no properties: the session stays on the broker for its expiry.
	disconnectNormal = []byte{typeDisconnect << 4, 0}
)
