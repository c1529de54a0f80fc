package reference

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	// maxLineBytes is the 4 KiB payload limit; longer lines are too_large.
	maxLineBytes = 4096
	// maxRawBytes bounds the "raw" field of a rejected record.
	maxRawBytes = 1024
	// maxTimestamp is the largest valid timestamp_ms, 9999-12-31T23:59:59.999Z.
	maxTimestamp = 253402300799999
)

var courierPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// decoded is what one line yields before the clock-dependent future check.
type decoded struct {
	arrival    int64
	hasArrival bool
	// reason is the first rejection reason of §2 that applies, or "".
	reason string
	// field is the missing field of a missing_field rejection.
	field string
	// ignored: an OwnTracks message of another _type (§2 Input formats):
	// an arrival, nothing else.
	ignored bool
	pos     position
}

// decodeLine applies the §2 checks in their order, except future_timestamp
// (which needs the clock) and courier_mismatch (no topic in a replay).
func decodeLine(line []byte, p *Params) decoded {
	var d decoded
	if len(line) > maxLineBytes {
		d.reason = "too_large"
		return d
	}
	obj, ok := decodeObject(line)
	if !ok {
		d.reason = "malformed_json"
		return d
	}
	if raw, ok := obj["arrival_ms"]; ok {
		d.arrival, d.hasArrival = integerLiteral(raw)
	}
	if p.Format == "owntracks" {
		decodeOwnTracks(obj, p, &d)
		return d
	}

	if d.field = firstMissing(obj, "courier", "lat", "lon", "timestamp_ms"); d.field != "" {
		d.reason = "missing_field"
		return d
	}

	courier, ok := decodeValue(obj["courier"]).(string)
	if !ok || !courierPattern.MatchString(courier) {
		d.reason = "bad_courier"
		return d
	}
	lat, okLat := finiteNumber(obj["lat"])
	lon, okLon := finiteNumber(obj["lon"])
	if !okLat || !okLon || lat < -90 || lat > 90 || lon < -180 || lon > 180 {
		d.reason = "bad_coordinates"
		return d
	}
	ts, ok := integerLiteral(obj["timestamp_ms"])
	if !ok || ts <= 0 || ts > maxTimestamp {
		d.reason = "bad_timestamp"
		return d
	}
	d.pos = position{courier: courier, ts: ts, lat: lat, lon: lon, acc: accuracy(obj["accuracy_m"])}
	return d
}

// firstMissing returns the first of fields that is absent or null, or "".
func firstMissing(obj map[string]json.RawMessage, fields ...string) string {
	for _, f := range fields {
		raw, ok := obj[f]
		if !ok || string(bytes.TrimSpace(raw)) == "null" {
			return f
		}
	}
	return ""
}

// accuracy is an accuracy member's value as the distance filter takes
// it, or 0 when it is absent or not a finite number >= 0.
func accuracy(raw json.RawMessage) float64 {
	if raw == nil {
		return 0
	}
	a, ok := finiteNumber(raw)
	if !ok || a < 0 {
		return 0
	}
	// The filter takes it in whole centimetres, at most 655.35 m
	// (docs/semantics.md).
	return math.Min(math.Round(a*100), 65535) / 100
}

// maxTst is the largest OwnTracks tst: 9999-12-31T23:59:59Z in seconds.
const maxTst = 253402300799

// decodeOwnTracks applies §2 Input formats' owntracks rules to a valid
// object: _type first (any other type than "location" is ignored), then
// the §2 order read on _type, lat, lon, tst, and the courier from the
// line's "topic" member.
func decodeOwnTracks(obj map[string]json.RawMessage, p *Params, d *decoded) {
	if d.field = firstMissing(obj, "_type"); d.field != "" {
		d.reason = "missing_field"
		return
	}
	if typ, _ := decodeValue(obj["_type"]).(string); typ != "location" {
		d.ignored = true
		return
	}
	if d.field = firstMissing(obj, "lat", "lon", "tst"); d.field != "" {
		d.reason = "missing_field"
		return
	}
	topic, _ := decodeValue(obj["topic"]).(string)
	courier, ok := topicLevel(p.Topic, topic, p.CourierLevel)
	if !ok || !courierPattern.MatchString(courier) {
		d.reason = "bad_courier"
		return
	}
	lat, okLat := finiteNumber(obj["lat"])
	lon, okLon := finiteNumber(obj["lon"])
	if !okLat || !okLon || lat < -90 || lat > 90 || lon < -180 || lon > 180 {
		d.reason = "bad_coordinates"
		return
	}
	tst, ok := integerLiteral(obj["tst"])
	if !ok || tst <= 0 || tst > maxTst {
		d.reason = "bad_timestamp"
		return
	}
	d.pos = position{courier: courier, ts: tst * 1000, lat: lat, lon: lon, acc: accuracy(obj["acc"])}
}

// topicLevel returns the level of topic that the n-th '+' (0-based) of
// the MQTT subscription filter matches: levels split on '/', '+' matches
// one level, a last '#' any rest (none included), a filter starting with a
// wildcard matches no topic starting with '$', and a "$share/NAME/" prefix
// is not part of the filter.
func topicLevel(filter, topic string, n int) (string, bool) {
	if strings.HasPrefix(filter, "$share/") {
		parts := strings.SplitN(filter, "/", 3)
		if len(parts) < 3 {
			return "", false
		}
		filter = parts[2]
	}
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return "", false
	}
	fl, tl := strings.Split(filter, "/"), strings.Split(topic, "/")
	level, found, plus := "", false, 0
	for i, f := range fl {
		if f == "#" {
			if !found || i != len(fl)-1 {
				return "", false
			}
			return level, true
		}
		if i >= len(tl) {
			return "", false
		}
		switch f {
		case "+":
			if plus == n {
				level, found = tl[i], true
			}
			plus++
		case tl[i]:
		default:
			return "", false
		}
	}
	if !found || len(tl) != len(fl) {
		return "", false
	}
	return level, true
}

// decodeObject parses line as exactly one JSON object (JSON null, arrays,
// scalars and trailing data are not).
func decodeObject(line []byte) (map[string]json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return obj, true
}

// decodeValue decodes one member of an already valid object; numbers come
// back as json.Number, so a quoted number stays a string.
func decodeValue(raw json.RawMessage) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	return v
}

// finiteNumber reports raw as a float64 when it is a JSON number whose value
// is finite as a float64 (1e400 is not; 1e-400 rounds to 0 and is).
func finiteNumber(raw json.RawMessage) (float64, bool) {
	n, ok := decodeValue(raw).(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(n.String(), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// integerLiteral reports raw as an int64 when it is a JSON number written
// without fraction or exponent and within int64. (ParseInt would refuse '.',
// 'e' and 'E' too; the check states the contract's rule.)
func integerLiteral(raw json.RawMessage) (int64, bool) {
	n, ok := decodeValue(raw).(json.Number)
	if !ok || strings.ContainsAny(n.String(), ".eE") {
		return 0, false
	}
	v, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// truncateRaw keeps at most maxRawBytes of line, ending on a rune boundary
// as utf8.DecodeRune sees it (an invalid byte counts as a one-byte rune).
func truncateRaw(line []byte) string {
	if len(line) <= maxRawBytes {
		return string(line)
	}
	cut := 0
	for cut < len(line) {
		_, size := utf8.DecodeRune(line[cut:])
		if cut+size > maxRawBytes {
			break
		}
		cut += size
	}
	return string(line[:cut])
}
