package fleet

import (
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends to dst the MQTT payload of e, the contract's JSON
// object (§2) with accuracy_m, and with "arrival_ms" too when withArrival
// (one line of a replay file, without the newline):
//
//	{"courier":"c0001","lat":41.9794,"lon":2.8214,"timestamp_ms":1767614400000,"accuracy_m":7.5}
//
// Numbers are written in the shortest form that parses back to the same
// float64, so a decoder gets exactly e's values. Non-finite Lat, Lon or
// Accuracy are written as NaN/+Inf/-Inf, which is not JSON — a receiver
// rejects it as malformed_json, as it would a phone sending them.
//
// For an event with Raw, the Raw bytes are appended instead; with
// withArrival and a Raw that ends as a JSON object ('}'), "arrival_ms" is
// inserted before the closing brace, so that a replay still reads the
// arrival of a payload that is wrong in another way.
func AppendJSON(dst []byte, e Event, withArrival bool) []byte {
	if e.Raw != nil {
		return appendRaw(dst, e, withArrival)
	}
	dst = appendPosition(dst, e)
	if withArrival {
		dst = appendArrival(dst[:len(dst)-1], e.Arrival, true)
	}
	return dst
}

func appendPosition(dst []byte, e Event) []byte {
	dst = append(dst, `{"courier":`...)
	dst = appendString(dst, e.Courier)
	dst = append(dst, `,"lat":`...)
	dst = strconv.AppendFloat(dst, e.Lat, 'f', -1, 64)
	dst = append(dst, `,"lon":`...)
	dst = strconv.AppendFloat(dst, e.Lon, 'f', -1, 64)
	dst = append(dst, `,"timestamp_ms":`...)
	dst = strconv.AppendInt(dst, e.TS, 10)
	dst = append(dst, `,"accuracy_m":`...)
	dst = strconv.AppendFloat(dst, e.Accuracy, 'f', -1, 64)
	return append(dst, '}')
}

// appendArrival appends the arrival_ms member and the closing brace; comma
// says whether a member precedes it.
func appendArrival(dst []byte, arrival int64, comma bool) []byte {
	if comma {
		dst = append(dst, ',')
	}
	dst = append(dst, `"arrival_ms":`...)
	dst = strconv.AppendInt(dst, arrival, 10)
	return append(dst, '}')
}

func appendRaw(dst []byte, e Event, withArrival bool) []byte {
	raw := e.Raw
	end := len(raw)
	for end > 0 && isSpace(raw[end-1]) {
		end--
	}
	if !withArrival || end == 0 || raw[end-1] != '}' {
		return append(dst, raw...)
	}
	body := raw[:end-1]
	last := len(body)
	for last > 0 && isSpace(body[last-1]) {
		last--
	}
	dst = append(dst, body...)
	return appendArrival(dst, e.Arrival, last > 0 && body[last-1] != '{')
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// appendString appends s as a JSON string. Generated courier ids need no
// escaping; anything else an Event may carry is escaped per RFC 8259, with
// invalid UTF-8 replaced by U+FFFD as encoding/json does.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b >= 0x20 && b != '"' && b != '\\' && b < utf8.RuneSelf {
			i++
			continue
		}
		if b < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
