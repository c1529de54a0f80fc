package partition

import (
	"strings"

	"github.com/km0/edgeproc/position"
)

// A position's subject in the positions stream is its partition's subject
// (jetstream.subject with the partition's number) ending with one token:
// the courier's, the topic level that names the courier. With
// mqtt.format edgeproc that is the topic's last level (the payload's
// courier must equal it); with owntracks, the level of mqtt.topic that
// mqtt.owntracks_courier names (USER of owntracks/USER/DEVICE, or DEVICE),
// and the other levels are not kept: the courier is all the engine reads
// of an OwnTracks topic. One courier has one token, and so one partition,
// whatever its other levels (a USER's two phones).
//
// The token is the level as nats-server's MQTT gateway writes it, so that
// the relay and the gateway's mapping store a courier alike
// (appendToken):
//
//   - a '.' is "//" (it would split the token);
//   - an empty level is "/" (as the gateway writes it; it reads back as
//     the level "/", which is no courier id either);
//   - space and control characters, DEL, '*', '>', '/' and bytes outside
//     ASCII are '/' and two upper-case hex digits ("jane doe" is
//     "jane/20doe"): they would make the subject invalid or a wildcard
//     (the gateway refuses whitespace and keeps the others as they are;
//     none is in a courier id, contract §2);
//   - a level longer than a courier id can be keeps only its first
//     maxLevel bytes, still no courier id, so that a phone's long topic
//     cannot make a subject the server refuses.
//
// A level that is a courier id is therefore kept as the gateway keeps
// it, and one that is not reads back as no courier id: the engine judges
// it as on the MQTT topic (bad_courier, courier_mismatch). The streams
// written before OwnTracks was supported hold only "//" and "/" tokens
// as escapes, which read back as they always did.

// maxLevel is the most bytes of a topic level a token keeps: one more
// than the longest courier id (64 bytes, contract §2; TestMaxLevel checks
// it against position.ValidCourier).
const maxLevel = 65

// maxToken is the longest token appendToken writes: maxLevel bytes, each
// escaped in three.
const maxToken = 3 * maxLevel

// appendToken appends level to b as a subject token (see above); it does
// not allocate when b has room for maxToken bytes more.
func appendToken(b []byte, level string) []byte {
	if level == "" {
		return append(b, '/')
	}
	if len(level) > maxLevel {
		level = level[:maxLevel]
	}
	for i := 0; i < len(level); i++ {
		switch c := level[i]; {
		case c == '.':
			b = append(b, '/', '/')
		case c <= ' ' || c >= 0x7f || c == '*' || c == '>' || c == '/':
			const hex = "0123456789ABCDEF"
			b = append(b, '/', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return b
}

// courierLevel is the level of topic that names the courier: the level
// of filter's '+' number level (format owntracks), or with level < 0 the
// topic's last level (format edgeproc). A topic that does not match
// filter (the broker delivers none) is returned whole, no courier id:
// its position is rejected as bad_courier, as on the MQTT source.
func courierLevel(topic, filter string, level int) string {
	if level < 0 {
		return topic[strings.LastIndexByte(topic, '/')+1:]
	}
	if lv, ok := position.TopicLevel(filter, topic, level); ok {
		return lv
	}
	return topic
}

// appendMQTTTopic appends to b the MQTT topic the NATS subject s stands
// for: '.' separates levels ('/' in MQTT), and inside a token "//" is a
// '.' and '/' with two upper-case hex digits that byte (appendToken); any
// other '/' is kept. The engine reads the courier from the topic as on
// an MQTT source.
func appendMQTTTopic[T string | []byte](b []byte, s T) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			b = append(b, '/')
		case c != '/':
			b = append(b, c)
		case i+1 < len(s) && s[i+1] == '/':
			b = append(b, '.')
			i++
		case i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return b
}

// isHex reports whether c is an upper-case hex digit, as appendToken
// writes them.
func isHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

// natsToMQTT is appendMQTTTopic for a string.
func natsToMQTT(s string) string { return string(appendMQTTTopic(nil, s)) }
