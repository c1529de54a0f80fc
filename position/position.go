// Package position decodes and validates one courier position: an MQTT
// payload or one line of a replay file (contract §2), in the contract's
// own format (Decode) or as the OwnTracks app publishes it
// (DecodeOwnTracks; contract §2, Input formats).
//
// Decoding is the hottest path of the service, so it uses a small strict
// single-pass JSON scanner instead of encoding/json: it allocates nothing,
// and it sees the raw literal of every number, which the rejection rules
// need (integer versus fraction/exponent, int64 range, finiteness).
//
// The scanner accepts exactly what encoding/json's json.Valid accepts, for
// every input of at most MaxPayload bytes. In particular, like
// encoding/json, it accepts bytes that are not valid UTF-8 inside strings
// (encoding/json replaces them with U+FFFD when it unquotes); such bytes
// can never form a valid courier id, so they only matter for validity.
// Nested values of unknown fields are validated and skipped at any depth:
// MaxPayload bounds the depth to MaxPayload/2, so there is no separate
// depth limit below json.Valid's.
//
// Duplicate keys behave as in encoding/json: the last occurrence wins.
// Keys are compared after unescaping, so "\u0063ourier" is "courier".
package position

import (
	"math"
	"strconv"
)

// MaxPayload is the largest accepted payload, in bytes (4 KiB). A payload
// of exactly MaxPayload bytes is accepted; a larger one is TooLarge.
const MaxPayload = 4096

// Reason is why an input was rejected; OK means accepted. String gives the
// contract's reason text.
type Reason uint8

// Rejection reasons, in the order the contract checks them (the first that
// applies is reported).
const (
	OK              Reason = iota
	TooLarge               // over MaxPayload bytes
	MalformedJSON          // not JSON, or not a JSON object
	MissingField           // a required field absent or null (Position.Missing names it)
	BadCourier             // courier not a string of 1–64 chars of [A-Za-z0-9._:-]
	BadCoordinates         // lat/lon not finite numbers, or out of range
	BadTimestamp           // timestamp_ms not an integer literal in (0, MaxTimestamp]
	CourierMismatch        // topic courier differs from the payload's (see CheckTopic)
	FutureTimestamp        // too far ahead of the processing clock (checked by the caller)
	CourierLimit           // an untracked courier while the market is full (decided by the engine)

	// Ignored is not a rejection: the input is an OwnTracks message of
	// another _type than location (Position.Type says which). It is
	// counted by type and not dead-lettered (contract §2, Input formats).
	// Reasons does not list it.
	Ignored
)

// MaxTimestamp is the largest timestamp_ms accepted: 9999-12-31T23:59:59.999Z.
// Bounding event time far below 2^63 keeps every window end, session end
// and watermark sum of the engine within int64.
const MaxTimestamp = 253402300799999

// Reasons lists every rejection reason in contract order, for metrics and
// summaries. Treat it as read-only.
var Reasons = [...]Reason{
	TooLarge, MalformedJSON, MissingField, BadCourier,
	BadCoordinates, BadTimestamp, CourierMismatch, FutureTimestamp, CourierLimit,
}

var reasonText = [...]string{
	OK:              "ok",
	TooLarge:        "too_large",
	MalformedJSON:   "malformed_json",
	MissingField:    "missing_field",
	BadCourier:      "bad_courier",
	BadCoordinates:  "bad_coordinates",
	BadTimestamp:    "bad_timestamp",
	CourierMismatch: "courier_mismatch",
	FutureTimestamp: "future_timestamp",
	CourierLimit:    "courier_limit",
	Ignored:         "ignored",
}

// String returns the contract's text for r ("ok", "too_large", ...), or
// "reason(N)" for a value that is not a defined Reason.
func (r Reason) String() string {
	if int(r) < len(reasonText) {
		return reasonText[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Position is one decoded courier position.
type Position struct {
	// Courier is the decoded courier id. It aliases the payload or the
	// Decoder's scratch buffer: it is valid until the next Decode and
	// until the payload is modified. Copy it to keep it.
	Courier []byte
	// Lat and Lon are degrees, in [-90, 90] and [-180, 180].
	Lat, Lon float64
	// TS is timestamp_ms, the event time in ms since the Unix epoch (> 0).
	TS int64
	// Accuracy is accuracy_m in metres when it is a finite number >= 0,
	// else -1 (absent, null, wrong type, negative or not finite).
	Accuracy float64
	// Arrival is arrival_ms (replay lines only), in ms since the Unix
	// epoch; it is meaningful only when HasArrival is true.
	Arrival int64
	// HasArrival reports whether the payload carried an integer
	// arrival_ms. It is set even when Decode rejects the payload, as long
	// as the payload is within MaxPayload and is a valid JSON object.
	HasArrival bool
	// Missing names the required field a MissingField rejection is for:
	// the first absent or null one in the order the format lists them.
	Missing string
	// Type is an Ignored OwnTracks message's _type.
	Type MessageType
}

// SecondsBefore is 2001-01-01T00:00:00Z in ms: a timestamp_ms below it
// most likely counts seconds, not milliseconds (a phone sending seconds
// writes about 1.7e9, which read as ms is January 1970).
const SecondsBefore = 978307200000

// Decoder decodes position payloads. It is reusable and not safe for
// concurrent use; its zero value is ready.
type Decoder struct {
	// courier holds an unescaped courier id (one written with escapes);
	// Position.Courier then aliases it.
	courier [maxCourier]byte
	// topic holds an unescaped replay-line topic (DecodeOwnTracks).
	topic [MaxPayload]byte
	// nest records, per open nesting level of a skipped value, whether it
	// is an object (bit set) or an array. Kept here rather than on the
	// stack so no call pays for zeroing it.
	nest [maxDepth / 64]uint64
}

// Decode fills p from payload and returns OK or the first rejection reason,
// checked in the contract's order: TooLarge, MalformedJSON, MissingField,
// BadCourier, BadCoordinates, BadTimestamp. The last three are Check's,
// on the values the payload's fields give (a field of the wrong type, or
// one that does not parse, fails its rule). CourierMismatch and
// FutureTimestamp need context the payload does not have: see CheckTopic.
//
// p is always reset first. On rejection, only p.HasArrival and p.Arrival
// are set (see Position.HasArrival), and p.Missing on MissingField; the
// other fields are zero, Accuracy -1. Decode never panics. It does not
// allocate, except to parse an unusual number literal longer than 32
// bytes with more than 15 significant digits.
func (d *Decoder) Decode(payload []byte, p *Position) Reason {
	*p = Position{Accuracy: -1}
	if len(payload) > MaxPayload {
		return TooLarge
	}
	var f fieldSpans
	if !d.scanTop(payload, &f) {
		return MalformedJSON
	}
	readArrival(payload, &f, p)
	for _, k := range [...]struct {
		f    field
		name string
	}{{fieldCourier, "courier"}, {fieldLat, "lat"}, {fieldLon, "lon"}, {fieldTS, "timestamp_ms"}} {
		if v := f[k.f].of(payload); v == nil || v[0] == 'n' {
			p.Missing = k.name
			return MissingField
		}
	}

	p.Courier = d.courierOf(f[fieldCourier].of(payload))
	p.Lat = coordinate(f[fieldLat].of(payload))
	p.Lon = coordinate(f[fieldLon].of(payload))
	if ts := f[fieldTS].of(payload); isNumber(ts) {
		p.TS, _ = parseInt(ts) // 0, which Check refuses, when not an int64 literal
	}
	if r := Check(p); r != OK {
		rejected(p)
		return r
	}

	if a, ok := parseFinite(f[fieldAccuracy].of(payload)); ok && a >= 0 {
		p.Accuracy = a
	}
	return OK
}

// Check returns the first of the contract's field rules (§2) that p's
// values break, in the contract's order, or OK:
//
//   - BadCourier: p.Courier is not 1–64 chars of [A-Za-z0-9._:-]
//     (ValidCourier);
//   - BadCoordinates: p.Lat is not in [-90, 90] or p.Lon not in
//     [-180, 180] (NaN and ±Inf are in neither);
//   - BadTimestamp: p.TS is not in (0, MaxTimestamp].
//
// It reads nothing else of p. Decode and DecodeOwnTracks apply it to
// the values they read, so values from elsewhere (a lake's row) that
// Check accepts are values Decode accepts from a payload that carries
// them, and those it refuses are refused for the same reason. It does
// not allocate.
func Check(p *Position) Reason {
	if !ValidCourier(p.Courier) {
		return BadCourier
	}
	if !(p.Lat >= -90 && p.Lat <= 90 && p.Lon >= -180 && p.Lon <= 180) {
		return BadCoordinates
	}
	if p.TS <= 0 || p.TS > MaxTimestamp {
		return BadTimestamp
	}
	return OK
}

// coordinate is v, a validated JSON value, as a coordinate for Check: its
// value when it is a finite number, else NaN (in no range).
func coordinate(v []byte) float64 {
	f, ok := parseFinite(v)
	if !ok {
		return math.NaN()
	}
	return f
}

// courierOf is v, a validated JSON value, as a courier id for Check: a
// string's contents, unescaped (into d.courier) when it has escapes. It
// is nil, which Check refuses, when v is not a string, or has escapes and
// unescaped is not ASCII or longer than a courier id may be.
func (d *Decoder) courierOf(v []byte) []byte {
	if len(v) == 0 || v[0] != '"' {
		return nil
	}
	c := v[1 : len(v)-1]
	if hasBackslash(c) {
		n, ok := unescapeASCII(d.courier[:], c)
		if !ok {
			return nil
		}
		c = d.courier[:n]
	}
	return c
}

// rejected clears what p holds besides the arrival fields, for a
// rejection by Check.
func rejected(p *Position) {
	*p = Position{Accuracy: -1, Arrival: p.Arrival, HasArrival: p.HasArrival}
}

// readArrival sets p's arrival fields from an integer arrival_ms.
func readArrival(payload []byte, f *fieldSpans, p *Position) {
	if v := f[fieldArrival].of(payload); isNumber(v) {
		if n, ok := parseInt(v); ok {
			p.Arrival, p.HasArrival = n, true
		}
	}
}

// maxCourier is the longest valid courier id, in bytes.
const maxCourier = 64

// courierByte marks the bytes allowed in a courier id: [A-Za-z0-9._:-].
var courierByte = func() (t [256]bool) {
	for c := 'A'; c <= 'Z'; c++ {
		t[c], t[c+'a'-'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "._:-" {
		t[c] = true
	}
	return t
}()

// ValidCourier reports whether b is 1–64 chars of [A-Za-z0-9._:-].
func ValidCourier(b []byte) bool {
	if len(b) == 0 || len(b) > maxCourier {
		return false
	}
	for _, c := range b {
		if !courierByte[c] {
			return false
		}
	}
	return true
}
