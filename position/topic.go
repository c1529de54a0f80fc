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
	if rest, found := strings.CutPrefix(filter, "$share/"); found {
		_, filter, found = strings.Cut(rest, "/")
		if !found {
			return "", false
		}
	}
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return "", false
	}
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			if fmore { // '#' is valid only as the last level
				return "", false
			}
			return courier, ok
		}
		tl, trest, tmore := strings.Cut(topic, "/")
		switch {
		case fl == "+":
			courier, ok = tl, true
		case fl != tl:
			return "", false
		}
		switch {
		case fmore && tmore:
			filter, topic = frest, trest
		case !fmore && !tmore:
			return courier, ok
		case fmore && frest == "#":
			// "a/#" also matches "a".
			return courier, ok
		default:
			return "", false
		}
	}
}

// CheckTopic returns CourierMismatch when the topic carries a courier id
// (TopicCourier reports ok) that differs from p.Courier, else OK.
func CheckTopic(filter, topic string, p *Position) Reason {
	if c, ok := TopicCourier(filter, topic); ok && c != string(p.Courier) {
		return CourierMismatch
	}
	return OK
}
