package position

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"testing"
)

// This file holds Decode and DecodeOwnTracks to what they returned before
// their field rules moved into Check: decodeBefore and
// decodeOwnTracksBefore are the decoders as they were, checking each
// field as they read it.

func decodeBefore(d *Decoder, payload []byte, p *Position) Reason {
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
	c := f[fieldCourier].of(payload)
	if c[0] != '"' {
		return BadCourier
	}
	c = c[1 : len(c)-1]
	if hasBackslash(c) {
		n, ok := unescapeASCII(d.courier[:], c)
		if !ok {
			return BadCourier
		}
		c = d.courier[:n]
	}
	if !ValidCourier(c) {
		return BadCourier
	}
	p.Courier = c
	var ok bool
	if p.Lat, ok = parseFinite(f[fieldLat].of(payload)); !ok || p.Lat < -90 || p.Lat > 90 {
		return BadCoordinates
	}
	if p.Lon, ok = parseFinite(f[fieldLon].of(payload)); !ok || p.Lon < -180 || p.Lon > 180 {
		return BadCoordinates
	}
	ts := f[fieldTS].of(payload)
	if !isNumber(ts) {
		return BadTimestamp
	}
	if p.TS, ok = parseInt(ts); !ok || p.TS <= 0 || p.TS > MaxTimestamp {
		return BadTimestamp
	}
	if a, ok := parseFinite(f[fieldAccuracy].of(payload)); ok && a >= 0 {
		p.Accuracy = a
	}
	return OK
}

func decodeOwnTracksBefore(d *Decoder, payload []byte, topic, filter string, level int, p *Position) Reason {
	*p = Position{Accuracy: -1}
	if len(payload) > MaxPayload {
		return TooLarge
	}
	var f fieldSpans
	if !d.scanTop(payload, &f) {
		return MalformedJSON
	}
	readArrival(payload, &f, p)
	t := f[fieldType].of(payload)
	if t == nil || t[0] == 'n' {
		p.Missing = "_type"
		return MissingField
	}
	if !isLocation(t) {
		p.Type = MsgOther
		if t[0] == '"' {
			var buf [len("configuration")]byte
			if n, ok := unescapeASCII(buf[:], t[1:len(t)-1]); ok {
				p.Type = messageType(buf[:n])
			}
		}
		return Ignored
	}
	for _, k := range [...]struct {
		f    field
		name string
	}{{fieldLat, "lat"}, {fieldLon, "lon"}, {fieldTst, "tst"}} {
		if v := f[k.f].of(payload); v == nil || v[0] == 'n' {
			p.Missing = k.name
			return MissingField
		}
	}
	var c []byte
	var ok bool
	if topic != "" {
		var lv string
		if lv, ok = TopicLevel(filter, topic, level); ok && len(lv) <= maxCourier {
			c = d.courier[:copy(d.courier[:], lv)]
		}
	} else if tv := d.payloadTopic(f[fieldTopic].of(payload)); tv != nil {
		c, ok = TopicLevel(filter, tv, level)
	}
	if !ok || !ValidCourier(c) {
		return BadCourier
	}
	p.Courier = c
	if p.Lat, ok = parseFinite(f[fieldLat].of(payload)); !ok || p.Lat < -90 || p.Lat > 90 {
		return BadCoordinates
	}
	if p.Lon, ok = parseFinite(f[fieldLon].of(payload)); !ok || p.Lon < -180 || p.Lon > 180 {
		return BadCoordinates
	}
	tst := f[fieldTst].of(payload)
	if !isNumber(tst) {
		return BadTimestamp
	}
	s, ok := parseInt(tst)
	if !ok || s <= 0 || s > MaxTst {
		return BadTimestamp
	}
	p.TS = s * 1000
	if a, ok := parseFinite(f[fieldAcc].of(payload)); ok && a >= 0 {
		p.Accuracy = a
	}
	return OK
}

// identical reports whether a and b are the same position bit for bit
// (a -0 is not 0, NaN is NaN).
func identical(a, b *Position) bool {
	return bytes.Equal(a.Courier, b.Courier) && (a.Courier == nil) == (b.Courier == nil) &&
		math.Float64bits(a.Lat) == math.Float64bits(b.Lat) && math.Float64bits(a.Lon) == math.Float64bits(b.Lon) &&
		a.TS == b.TS && math.Float64bits(a.Accuracy) == math.Float64bits(b.Accuracy) &&
		a.Arrival == b.Arrival && a.HasArrival == b.HasArrival && a.Missing == b.Missing && a.Type == b.Type
}

// sameAsBefore fails unless got (reason r) is what the decoder gave
// before (wantR, want): the same reason, and the same position bit for
// bit when it is OK; on a rejection the same arrival fields, Missing and
// Type, everything else zero (Accuracy -1), as Decode documents.
func sameAsBefore(t *testing.T, in []byte, r Reason, got *Position, wantR Reason, want *Position) {
	t.Helper()
	if r != wantR {
		t.Fatalf("%q: got %v, want %v as before", in, r, wantR)
	}
	if r != OK {
		want = &Position{Accuracy: -1, Arrival: want.Arrival, HasArrival: want.HasArrival, Missing: want.Missing, Type: want.Type}
	}
	if !identical(got, want) {
		t.Fatalf("%q (%v):\ngot  %+v (courier %q)\nwant %+v (courier %q)", in, r, *got, got.Courier, *want, want.Courier)
	}
}

func checkDecodeSameAsBefore(t *testing.T, d *Decoder, in []byte) {
	t.Helper()
	var got, want Position
	r := d.Decode(in, &got)
	gotCourier := bytes.Clone(got.Courier) // may alias d's buffer
	got.Courier = gotCourier
	wantR := decodeBefore(d, in, &want)
	sameAsBefore(t, in, r, &got, wantR, &want)
}

func checkOwnTracksSameAsBefore(t *testing.T, d *Decoder, in []byte, topic string, level int) {
	t.Helper()
	var got, want Position
	r := d.DecodeOwnTracks(in, topic, otFilter, level, &got)
	got.Courier = bytes.Clone(got.Courier)
	wantR := decodeOwnTracksBefore(d, in, topic, otFilter, level, &want)
	sameAsBefore(t, in, r, &got, wantR, &want)
}

// Edge literals of the fields Check judges: the ranges' edges, -0,
// numbers beyond float64 or int64, fractions and exponents, other types,
// escapes, the longest courier id and one byte more.
var (
	edgeCourierLits = []string{`"van-3"`, `""`, `"` + string(bytes.Repeat([]byte("x"), 64)) + `"`, `"` + string(bytes.Repeat([]byte("x"), 65)) + `"`,
		`"v\u0061n"`, `"\u00e9"`, `"a b"`, `"a/b"`, `"\ud800"`, "\"a\xff\"", `5`, `true`, `{}`, `["a"]`}
	edgeLatLits = []string{"41.9794", "0", "-0", "-0.0", "0e5", "90", "-90", "90.0", "90.00000000000001", "-90.00000000000001",
		"90.000000000000001", "1e999", "-1e999", "1e-400", "-1e-400", "4.9e-324", `"41"`, "true", "[]", "9e1", "-9E+1"}
	edgeLonLits = []string{"2.8214", "-0", "180", "-180", "180.00000000000003", "180.000000000000001", "-180.00000000000003",
		"1e309", "0.1e1", `"2"`, "false", "{}"}
	edgeTSLits = []string{"1726308298000", "1", "0", "-0", "-1", "253402300799999", "253402300800000", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "1.0", "1e3", "1726308298000.5", "01", `"1"`, "[]"}
	edgeAccLits = []string{"", "8.5", "-0", "-1", "1e999", "null", `"3"`}
)

// TestDecode_SameAsBefore runs every combination of the edge literals,
// and the fuzz seeds, through Decode and the decoder as it was.
func TestDecode_SameAsBefore(t *testing.T) {
	var d Decoder
	for _, s := range fuzzSeeds {
		checkDecodeSameAsBefore(t, &d, []byte(s))
	}
	n := 0
	for _, c := range edgeCourierLits {
		for _, lat := range edgeLatLits {
			for _, lon := range edgeLonLits {
				for _, ts := range edgeTSLits {
					acc := edgeAccLits[n%len(edgeAccLits)]
					in := obj("courier", c, "lat", lat, "lon", lon, "timestamp_ms", ts, "accuracy_m", acc, "arrival_ms", strconv.Itoa(n))
					checkDecodeSameAsBefore(t, &d, []byte(in))
					n++
				}
			}
		}
	}
}

// TestDecodeOwnTracks_SameAsBefore does the same for OwnTracks' fields,
// with the courier from the MQTT topic and from a replay line's.
func TestDecodeOwnTracks_SameAsBefore(t *testing.T) {
	var d Decoder
	for _, s := range otFuzzSeeds {
		for _, topic := range []string{"", "owntracks/van-3/phone", "owntracks/a b/c", "owntracks/x"} {
			checkOwnTracksSameAsBefore(t, &d, []byte(s), topic, 0)
			checkOwnTracksSameAsBefore(t, &d, []byte(s), topic, 1)
		}
	}
	tsts := []string{"1706856298", "1", "0", "-1", "253402300799", "253402300800", "9223372036854775", "9223372036854775807",
		"9223372036854775808", "1.5", "1e3", `"1"`}
	topics := []string{"", "owntracks/van-3/phone", "owntracks/a b/phone", "owntracks/" + string(bytes.Repeat([]byte("x"), 65)) + "/p", "other/x"}
	lineTopics := []string{"", `"owntracks/van-3/phone"`, `"owntracks/\u00e9/p"`, `"owntracks/a"`, `5`}
	n := 0
	for _, lat := range edgeLatLits {
		for _, lon := range edgeLonLits {
			for _, tst := range tsts {
				for i, topic := range topics {
					in := `{"_type":"location","lat":` + lat + `,"lon":` + lon + `,"tst":` + tst + `,"acc":8`
					if topic == "" {
						if lt := lineTopics[n%len(lineTopics)]; lt != "" {
							in += `,"topic":` + lt
						}
					}
					in += `}`
					checkOwnTracksSameAsBefore(t, &d, []byte(in), topic, i%2)
					n++
				}
			}
		}
	}
}

// FuzzDecodeFields_SameAsBefore fuzzes the literals of the fields Check
// judges, inside an otherwise valid object.
func FuzzDecodeFields_SameAsBefore(f *testing.F) {
	f.Add(`"van-3"`, "41.9794", "2.8214", "1726308298000", "8.5")
	f.Add(`"x"`, "-0", "180.00000000000003", "253402300800000", "-0")
	f.Add(`""`, "1e999", "true", "1.0", `"1"`)
	f.Add(`"\u0061"`, "90.000000000000001", "-0e0", "-0", "1e999")
	f.Fuzz(func(t *testing.T, courier, lat, lon, ts, acc string) {
		var d Decoder
		in := `{"courier":` + courier + `,"lat":` + lat + `,"lon":` + lon + `,"timestamp_ms":` + ts + `,"accuracy_m":` + acc + `}`
		checkDecodeSameAsBefore(t, &d, []byte(in))
	})
}

// FuzzDecode_SameAsBefore and FuzzDecodeOwnTracks_SameAsBefore take any
// payload.
func FuzzDecode_SameAsBefore(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var d Decoder
		checkDecodeSameAsBefore(t, &d, in)
	})
}

func FuzzDecodeOwnTracks_SameAsBefore(f *testing.F) {
	for _, s := range otFuzzSeeds {
		f.Add([]byte(s), "", false)
		f.Add([]byte(s), "owntracks/van-3/phone", true)
	}
	f.Fuzz(func(t *testing.T, in []byte, topic string, device bool) {
		var d Decoder
		level := 0
		if device {
			level = 1
		}
		checkOwnTracksSameAsBefore(t, &d, in, topic, level)
	})
}

// TestCheck_AgreesWithDecode: Check on values is what Decode says of a
// payload carrying exactly those values (floats in the shortest form
// that parses back to them); a value no JSON number gives (NaN, ±Inf)
// is BadCoordinates.
func TestCheck_AgreesWithDecode(t *testing.T) {
	couriers := [][]byte{[]byte("van-3"), nil, {}, bytes.Repeat([]byte("x"), 64), bytes.Repeat([]byte("x"), 65), []byte("a b"), []byte("\xff"), []byte("é")}
	negZero := math.Copysign(0, -1)
	lats := []float64{41.9794, 0, negZero, 90, -90, math.Nextafter(90, 91), math.Nextafter(-90, -91), 5e-324, math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64}
	lons := []float64{2.8214, negZero, 180, -180, math.Nextafter(180, 181), math.Nextafter(-180, -181), math.NaN(), math.Inf(-1)}
	tss := []int64{1726308298000, 1, 0, -1, MaxTimestamp, MaxTimestamp + 1, math.MinInt64, math.MaxInt64}
	var d Decoder
	for _, c := range couriers {
		for _, lat := range lats {
			for _, lon := range lons {
				for _, ts := range tss {
					v := Position{Courier: c, Lat: lat, Lon: lon, TS: ts, Accuracy: 3, Arrival: 7, HasArrival: true}
					got := Check(&v)
					finite := !math.IsNaN(lat) && !math.IsInf(lat, 0) && !math.IsNaN(lon) && !math.IsInf(lon, 0)
					if !finite {
						if got == OK || ValidCourier(c) && got != BadCoordinates {
							t.Fatalf("Check(%+v) = %v, want bad_coordinates (courier %q)", v, got, c)
						}
						continue
					}
					q, _ := json.Marshal(string(c))
					in := obj("courier", string(q), "lat", strconv.FormatFloat(lat, 'g', -1, 64),
						"lon", strconv.FormatFloat(lon, 'g', -1, 64), "timestamp_ms", strconv.FormatInt(ts, 10))
					var p Position
					if want := d.Decode([]byte(in), &p); got != want {
						t.Fatalf("Check(%+v) = %v; Decode(%s) = %v", v, got, in, want)
					}
				}
			}
		}
	}
}

// TestCheck_ReadsOnlyItsFields: Accuracy, Arrival, Missing and Type do
// not change Check's answer.
func TestCheck_ReadsOnlyItsFields(t *testing.T) {
	p := Position{Courier: []byte("a"), Lat: 1, Lon: 2, TS: 3}
	for _, q := range []Position{p, {Courier: p.Courier, Lat: 1, Lon: 2, TS: 3, Accuracy: math.NaN(), Arrival: -5, Missing: "lat", Type: MsgLWT}} {
		if r := Check(&q); r != OK {
			t.Fatalf("Check(%+v) = %v, want ok", q, r)
		}
	}
}
