package position

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
)

// referenceObject is the start the references share: the size and JSON
// object checks, the members, and the arrival fields (meaningful whatever
// the reason). m is nil when in is already rejected with reason.
func referenceObject(in []byte) (m map[string]json.RawMessage, p Position, reason Reason) {
	p = Position{Accuracy: -1}
	if len(in) > MaxPayload {
		return nil, p, TooLarge
	}
	trimmed := bytes.TrimLeft(in, " \t\r\n")
	if !json.Valid(in) || len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, p, MalformedJSON
	}
	if err := json.Unmarshal(in, &m); err != nil {
		panic("json.Valid object failed to unmarshal: " + err.Error())
	}
	if n, ok := rawInt(m["arrival_ms"]); ok {
		p.Arrival, p.HasArrival = n, true
	}
	return m, p, OK
}

// rawIsNum reports whether a JSON value is a number.
func rawIsNum(raw json.RawMessage) bool {
	return len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9')
}

// rawInt is a JSON integer literal's value: no fraction, no exponent.
func rawInt(raw json.RawMessage) (int64, bool) {
	if !rawIsNum(raw) || bytes.ContainsAny(raw, ".eE") {
		return 0, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

// reference decodes in with encoding/json and the contract's rules, as
// plainly as possible, to check Decode against. It returns the reason, the
// position, and the arrival fields (meaningful whatever the reason).
func reference(in []byte) (Reason, Position) {
	m, p, reason := referenceObject(in)
	if m == nil {
		return reason, p
	}
	floatOf := func(raw json.RawMessage) (float64, bool) {
		if !rawIsNum(raw) {
			return 0, false
		}
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, false
		}
		f, err := strconv.ParseFloat(n.String(), 64)
		return f, err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
	}

	for _, k := range []string{"courier", "lat", "lon", "timestamp_ms"} {
		if raw, ok := m[k]; !ok || string(raw) == "null" {
			p.Missing = k
			return MissingField, p
		}
	}
	var courier string
	if err := json.Unmarshal(m["courier"], &courier); err != nil || !ValidCourier([]byte(courier)) {
		return BadCourier, p
	}
	p.Courier = []byte(courier)
	var ok bool
	if p.Lat, ok = floatOf(m["lat"]); !ok || p.Lat < -90 || p.Lat > 90 {
		return BadCoordinates, p
	}
	if p.Lon, ok = floatOf(m["lon"]); !ok || p.Lon < -180 || p.Lon > 180 {
		return BadCoordinates, p
	}
	if p.TS, ok = rawInt(m["timestamp_ms"]); !ok || p.TS <= 0 || p.TS > MaxTimestamp {
		return BadTimestamp, p
	}
	if a, ok := floatOf(m["accuracy_m"]); ok && a >= 0 {
		p.Accuracy = a
	}
	return OK, p
}

// fuzzSeeds are interesting inputs, also used by TestDecode_MatchesReference
// so that plain `go test` checks them against encoding/json.
var fuzzSeeds = []string{
	typical,
	`{"courier":"van-3","lat":41.9794,"lon":2.8214,"timestamp_ms":1726308298000,"accuracy_m":8.5,"arrival_ms":1726308298123}`,
	`{"\u0063ourier":"v\u0061n-3","lat":-90,"lon":180,"timestamp_ms":1,"accuracy_m":-0}`,
	`{"courier":"a","lat":1e999,"lon":0,"timestamp_ms":1}`,
	`{"courier":"a","lat":0,"lon":0,"timestamp_ms":1.0}`,
	`{"courier":"a","lat":0,"lon":0,"timestamp_ms":9223372036854775808}`,
	`{"courier":"a","lat":0,"lon":0,"timestamp_ms":-0}`,
	`{"courier":"a","lat":0,"lon":0,"timestamp_ms":01}`,
	`{"courier":"a","lat":NaN,"lon":0,"timestamp_ms":1}`,
	`{"courier":"a","lat":0,"lon":0,"timestamp_ms":1,}`,
	`{"courier":"a\ud800","lat":0,"lon":0,"timestamp_ms":1}`,
	"{\"courier\":\"a\xff\",\"lat\":0,\"lon\":0,\"timestamp_ms\":1}",
	`{"courier":null,"lat":"x","lon":0,"timestamp_ms":1}`,
	`{"courier":"a","lat":1,"lon":2,"timestamp_ms":3,"courier":"b","lat":null}`,
	`{"x":[{"y":[[],{}]},"\"\\\/\b\f\n\r\t\u1234",-0.5e-3,true,false,null],"arrival_ms":5}`,
	`{"arrival_ms":-9223372036854775808}`,
	` {} `,
	`[]`,
	`"x"`,
	`{'a':1}`,
	`{"a":1`,
	`{"a" 1}`,
	"",
}

func TestDecode_MatchesReference(t *testing.T) {
	for _, s := range fuzzSeeds {
		checkAgainstReference(t, []byte(s))
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkAgainstReference(t, in)
	})
}

func checkAgainstReference(t *testing.T, in []byte) {
	t.Helper()
	var d Decoder
	var got Position
	orig := bytes.Clone(in)
	r := d.Decode(in, &got)
	if !bytes.Equal(in, orig) {
		t.Fatalf("Decode modified its input %q", orig)
	}
	wantR, want := reference(in)
	if r != wantR {
		t.Fatalf("Decode(%q) = %v, want %v (encoding/json reference)", in, r, wantR)
	}
	if got.Missing != want.Missing {
		t.Fatalf("Decode(%q): Missing = %q, want %q", in, got.Missing, want.Missing)
	}
	if got.HasArrival != want.HasArrival || got.Arrival != want.Arrival {
		t.Fatalf("Decode(%q): HasArrival, Arrival = %v, %d; want %v, %d", in, got.HasArrival, got.Arrival, want.HasArrival, want.Arrival)
	}
	if r == OK && !samePosition(got, want) {
		t.Fatalf("Decode(%q):\ngot  %+v (courier %q)\nwant %+v (courier %q)", in, got, got.Courier, want, want.Courier)
	}
}

// The scanner must accept exactly what json.Valid accepts, also inside
// nested values Decode skips: wrap each value as an unknown field.
func TestScan_MatchesJSONValid(t *testing.T) {
	values := []string{
		`0`, `-0`, `01`, `-`, `1.`, `.1`, `1e`, `1e+`, `1E-2`, `1.5e+10`, `-1.25E3`, `1e01`, `0.0`, `00`, `2.`, `-.5`,
		`true`, `false`, `null`, `tru`, `nulll`, `NaN`, `Infinity`,
		`""`, `"a"`, `"\u00e9"`, `"\uD83D\uDE9A"`, `"\ud800"`, `"\u12"`, `"\u12g4"`, `"\x"`, `"\'"`, `"\/"`, `"a` + "\x7f" + `"`,
		"\"\x1f\"", "\"\xff\"", "\"\xc3\xa9\"", `"\"`, `"\\"`,
		`[]`, `[ ]`, `[1]`, `[1,]`, `[,1]`, `[1 2]`, `[[[]]]`, `[[[]]`, `[]]`,
		`{}`, `{ }`, `{"a":1}`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`, `{"a":{"b":[{"c":null}]}}`,
		`{"a":1]`, `[1}`, `{"a" : [ 1 , { } ] }`, "[\v]",
	}
	var d Decoder
	for _, v := range values {
		in := []byte(`{"unknown":` + v + `}`)
		var p Position
		gotValid := d.Decode(in, &p) != MalformedJSON
		if want := json.Valid(in); gotValid != want {
			t.Errorf("value %q: scanner valid = %v, json.Valid = %v", v, gotValid, want)
		}
	}
}

// Nesting as deep as MaxPayload allows must be accepted like json.Valid
// does, without recursion.
func TestScan_MaxDepth(t *testing.T) {
	depth := (MaxPayload - len(`{"x":}`)) / 2
	in := []byte(`{"x":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
	if len(in) > MaxPayload {
		t.Fatalf("test payload is %d bytes, want <= %d", len(in), MaxPayload)
	}
	var d Decoder
	var p Position
	if got := d.Decode(in, &p); got != MissingField {
		t.Errorf("Decode(depth %d) = %v, want missing_field", depth, got)
	}
	mixed := []byte(`{"x":` + strings.Repeat(`{"a":[`, 400) + strings.Repeat(`]}`, 400) + `}`)
	if got := d.Decode(mixed, &p); got != MissingField {
		t.Errorf("Decode(mixed depth 800) = %v, want missing_field", got)
	}
}

// FuzzDecodeFields reaches the value rules faster than FuzzDecode: it
// fuzzes the raw literals of the fields inside an otherwise valid object.
func FuzzDecodeFields(f *testing.F) {
	f.Add(`"van-3"`, "41.9794", "2.8214", "1726308298000", "8.5", "1726308298123")
	f.Add(`"\u0076an-3"`, "-90", "180.0", "9223372036854775807", "-0", "-9223372036854775808")
	f.Add(`"x"`, "0", "0", "253402300799999", "0", "253402300800000")
	f.Add(`"x"`, "0", "0", "253402300800000", "0", "1")
	f.Add(`"a"`, "1e999", "1e-400", "1.0", "0e99999", "1e3")
	f.Add(`""`, "123456789012345.6", "-0.000000000000000000001234", "01", "null", `"5"`)
	f.Fuzz(func(t *testing.T, courier, lat, lon, ts, acc, arrival string) {
		in := `{"courier":` + courier + `,"lat":` + lat + `,"lon":` + lon +
			`,"timestamp_ms":` + ts + `,"accuracy_m":` + acc + `,"arrival_ms":` + arrival + `}`
		checkAgainstReference(t, []byte(in))
	})
}
