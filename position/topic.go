package position

import "strings"

// TopicCourier returns the topic level matched by the last '+' of the MQTT
// subscription filter, e.g. ("km0/girona/positions/+",
// "km0/girona/positions/van-3") gives ("van-3", true). ok is false when the
// filter has no '+' level or the topic does not match the filter.
//
// Matching follows MQTT: '+' matches exactly one level (possibly empty,
// which then yields ("", true)), a final '#' matches any remaining levels
// including none, and a filter starting with a wildcard does not match a
// topic starting with '$'. A shared-subscription prefix "$share/NAME/" is
// removed from the filter first, since messages arrive with the plain
// topic. It does not allocate.
func TopicCourier(filter, topic string) (courier string, ok bool) {
	return TopicLevel(filter, topic, -1)
}

// TopicLevel returns the topic level matched by the '+' level number n
// (0-based, in filter order; n < 0: the last) of the subscription filter,
// with TopicCourier's matching rules: ("owntracks/+/+",
// "owntracks/jane/phone", 1) gives ("phone", true). ok is false when the
// topic does not match the filter or the filter has no such '+' level.
// topic is a string (an MQTT message's) or bytes (a replay line's "topic",
// which it aliases); it does not allocate.
func TopicLevel[T string | []byte](filter string, topic T, n int) (level T, ok bool) {
	var none T
	if rest, found := strings.CutPrefix(filter, "$share/"); found {
		_, filter, found = strings.Cut(rest, "/")
		if !found {
			return none, false
		}
	}
	if len(topic) > 0 && topic[0] == '$' && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return none, false
	}
	plus := 0 // '+' levels passed so far
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			if fmore { // '#' is valid only as the last level
				return none, false
			}
			return level, ok
		}
		tl, trest, tmore := cutLevel(topic)
		switch {
		case fl == "+":
			if n < 0 || plus == n {
				level, ok = tl, true
			}
			plus++
		case !sameLevel(fl, tl):
			return none, false
		}
		switch {
		case fmore && tmore:
			filter, topic = frest, trest
		case !fmore && !tmore:
			return level, ok
		case fmore && frest == "#":
			// "a/#" also matches "a".
			return level, ok
		default:
			return none, false
		}
	}
}

// cutLevel is strings.Cut(t, "/") for a string or bytes.
func cutLevel[T string | []byte](t T) (level, rest T, more bool) {
	for i := 0; i < len(t); i++ {
		if t[i] == '/' {
			return t[:i], t[i+1:], true
		}
	}
	return t, t[len(t):], false
}

// sameLevel reports whether a filter level equals a topic level, byte for
// byte.
func sameLevel[T string | []byte](f string, t T) bool {
	if len(f) != len(t) {
		return false
	}
	for i := 0; i < len(f); i++ {
		if f[i] != t[i] {
			return false
		}
	}
	return true
}

// CheckTopic returns CourierMismatch when the topic carries a courier id
// (TopicCourier reports ok) that differs from p.Courier, else OK.
func CheckTopic(filter, topic string, p *Position) Reason {
	if c, ok := TopicCourier(filter, topic); ok && c != string(p.Courier) {
		return CourierMismatch
	}
	return OK
}
