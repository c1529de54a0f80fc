package position

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

const typical = `{"courier":"van-3","lat":41.9794,"lon":2.8214,"timestamp_ms":1726308298000}`

// obj builds a payload from a typical valid one with some members replaced
// or removed: each pair is a key and its raw JSON value, "" to remove it.
func obj(pairs ...string) string {
	keys := []string{"courier", "lat", "lon", "timestamp_ms"}
	vals := map[string]string{"courier": `"van-3"`, "lat": "41.9794", "lon": "2.8214", "timestamp_ms": "1726308298000"}
	for i := 0; i+1 < len(pairs); i += 2 {
		if _, ok := vals[pairs[i]]; !ok {
			keys = append(keys, pairs[i])
		}
		vals[pairs[i]] = pairs[i+1]
	}
	var b strings.Builder
	b.WriteByte('{')
	for _, k := range keys {
		if vals[k] == "" {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + k + `":` + vals[k])
	}
	b.WriteByte('}')
	return b.String()
}

func TestDecode_Reasons(t *testing.T) {
	long64 := strings.Repeat("a", 64)
	// pad makes a valid payload of exactly n bytes using an unknown field.
	pad := func(n int) string {
		s := obj("x", `""`)
		return obj("x", `"`+strings.Repeat("p", n-len(s))+`"`)
	}
	tests := []struct {
		name string
		in   string
		want Reason
	}{
		{"typical", typical, OK},
		{"exactly MaxPayload", pad(MaxPayload), OK},
		{"one over MaxPayload", pad(MaxPayload + 1), TooLarge},
		{"too large even if garbage", strings.Repeat("x", MaxPayload+1), TooLarge},

		// malformed_json
		{"empty", "", MalformedJSON},
		{"only spaces", " \t\r\n", MalformedJSON},
		{"not json", "hello", MalformedJSON},
		{"array", `[` + typical + `]`, MalformedJSON},
		{"string top", `"courier"`, MalformedJSON},
		{"number top", `42`, MalformedJSON},
		{"null top", `null`, MalformedJSON},
		{"trailing garbage", typical + "x", MalformedJSON},
		{"two objects", typical + typical, MalformedJSON},
		{"leading and trailing whitespace ok", " \n\t\r" + typical + "\r\n\t ", OK},
		{"vertical tab is not whitespace", "\v" + typical, MalformedJSON},
		{"BOM", "\xef\xbb\xbf" + typical, MalformedJSON},
		{"NaN", obj("lat", "NaN"), MalformedJSON},
		{"Infinity", obj("lat", "Infinity"), MalformedJSON},
		{"-Infinity", obj("lon", "-Infinity"), MalformedJSON},
		{"single quotes", `{'courier':'van-3','lat':1,'lon':2,'timestamp_ms':3}`, MalformedJSON},
		{"trailing comma in object", `{"courier":"van-3","lat":1,"lon":2,"timestamp_ms":3,}`, MalformedJSON},
		{"trailing comma in nested array", obj("x", `[1,2,]`), MalformedJSON},
		{"leading zero", obj("timestamp_ms", "01"), MalformedJSON},
		{"leading zero negative", obj("lat", "-01.5"), MalformedJSON},
		{"plus sign", obj("lat", "+1"), MalformedJSON},
		{"bare dot", obj("lat", ".5"), MalformedJSON},
		{"dot without digits", obj("lat", "1."), MalformedJSON},
		{"exponent without digits", obj("lat", "1e"), MalformedJSON},
		{"exponent sign without digits", obj("lat", "1e+"), MalformedJSON},
		{"minus alone", obj("lat", "-"), MalformedJSON},
		{"hex number", obj("lat", "0x10"), MalformedJSON},
		{"bad escape", obj("courier", `"van\x3"`), MalformedJSON},
		{"short unicode escape", obj("courier", `"van\u33"`), MalformedJSON},
		{"bad hex in unicode escape", obj("courier", `"\u00g1"`), MalformedJSON},
		{"raw newline in string", obj("courier", "\"van\n3\""), MalformedJSON},
		{"raw tab in string", obj("x", "\"a\tb\""), MalformedJSON},
		{"NUL in string", obj("x", "\"a\x00b\""), MalformedJSON},
		{"unterminated string", `{"courier":"van-3`, MalformedJSON},
		{"unterminated object", `{"courier":"van-3"`, MalformedJSON},
		{"unterminated nested", obj("x", `{"a":[1,{"b":2}]`)[:len(obj("x", `{"a":[1,{"b":2}]`))-1], MalformedJSON},
		{"missing colon", `{"courier" "van-3"}`, MalformedJSON},
		{"missing value", `{"courier":}`, MalformedJSON},
		{"unquoted key", `{courier:"van-3"}`, MalformedJSON},
		{"misspelled literal", obj("x", "nul"), MalformedJSON},
		{"literal with suffix", obj("x", "truex"), MalformedJSON},
		{"capitalised literal", obj("x", "True"), MalformedJSON},
		{"nested object key not string", obj("x", `{1:2}`), MalformedJSON},
		{"mismatched brackets", obj("x", `[1}`), MalformedJSON},
		{"escaped quote then end", `{"courier":"van-3\"}`, MalformedJSON},
		{"backslash at end", `{"courier":"van-3\`, MalformedJSON},
		{"deep nesting valid", obj("x", strings.Repeat("[", 1000)+strings.Repeat("]", 1000)), OK},
		{"deep nesting unbalanced", obj("x", strings.Repeat("[", 1000)+strings.Repeat("]", 999)), MalformedJSON},
		{"nested unknown values skipped", obj("x", `{"a":[1,-2.5e+3,"s\"\\\/\b\f\n\r\t\u00e9",true,false,null,{},[]],"b":{"c":{}}}`), OK},
		{"invalid UTF-8 in unknown string accepted", obj("x", "\"\xff\xfe\""), OK},

		// missing_field
		{"no courier", obj("courier", ""), MissingField},
		{"no lat", obj("lat", ""), MissingField},
		{"no lon", obj("lon", ""), MissingField},
		{"no timestamp", obj("timestamp_ms", ""), MissingField},
		{"null courier", obj("courier", "null"), MissingField},
		{"null lat", obj("lat", "null"), MissingField},
		{"null lon", obj("lon", "null"), MissingField},
		{"null timestamp", obj("timestamp_ms", "null"), MissingField},
		{"empty object", `{}`, MissingField},
		{"key case matters", `{"Courier":"van-3","lat":1,"lon":2,"timestamp_ms":3}`, MissingField},
		{"missing wins over bad courier", obj("lat", "", "courier", "7"), MissingField},
		{"missing courier wins over bad lat", obj("courier", "", "lat", "91"), MissingField},
		{"missing timestamp wins over bad courier", obj("timestamp_ms", "", "courier", `""`), MissingField},
		{"later null overrides", `{"courier":"van-3","lat":1,"lon":2,"timestamp_ms":3,"lat":null}`, MissingField},

		// bad_courier
		{"courier number", obj("courier", "7"), BadCourier},
		{"courier bool", obj("courier", "true"), BadCourier},
		{"courier object", obj("courier", `{"id":"van-3"}`), BadCourier},
		{"courier array", obj("courier", `["van-3"]`), BadCourier},
		{"courier empty", obj("courier", `""`), BadCourier},
		{"courier 64 chars", obj("courier", `"`+long64+`"`), OK},
		{"courier 65 chars", obj("courier", `"`+long64+`a"`), BadCourier},
		{"courier all allowed chars", obj("courier", `"AZaz09._:-"`), OK},
		{"courier space", obj("courier", `"van 3"`), BadCourier},
		{"courier slash", obj("courier", `"van/3"`), BadCourier},
		{"courier plus", obj("courier", `"van+3"`), BadCourier},
		{"courier non-ASCII", obj("courier", `"vané"`), BadCourier},
		{"courier invalid UTF-8", obj("courier", "\"van\xff\""), BadCourier},
		{"courier escaped allowed char", obj("courier", `"van\u002d3"`), OK},
		{"courier escaped solidus", obj("courier", `"van\/3"`), BadCourier},
		{"courier escaped newline", obj("courier", `"van\n3"`), BadCourier},
		{"courier escaped non-ASCII", obj("courier", `"van\u00e9"`), BadCourier},
		{"courier escaped surrogate", obj("courier", `"\ud83d\ude9a"`), BadCourier},
		{"courier 64 escaped", obj("courier", `"`+strings.Repeat(`\u0061`, 64)+`"`), OK},
		{"courier 65 escaped", obj("courier", `"`+strings.Repeat(`\u0061`, 65)+`"`), BadCourier},
		{"bad courier wins over bad lat", obj("courier", `""`, "lat", "91"), BadCourier},
		{"bad courier wins over bad timestamp", obj("courier", `"a b"`, "timestamp_ms", "1.5"), BadCourier},

		// bad_coordinates
		{"lat string", obj("lat", `"41.9"`), BadCoordinates},
		{"lon bool", obj("lon", `true`), BadCoordinates},
		{"lat array", obj("lat", `[41.9]`), BadCoordinates},
		{"lat 90", obj("lat", "90"), OK},
		{"lat -90", obj("lat", "-90"), OK},
		{"lat 90.0000001", obj("lat", "90.0000001"), BadCoordinates},
		{"lat -90.0000001", obj("lat", "-90.0000001"), BadCoordinates},
		{"lon 180", obj("lon", "180"), OK},
		{"lon -180", obj("lon", "-180.0"), OK},
		{"lon 180.0000001", obj("lon", "180.0000001"), BadCoordinates},
		{"lon -181", obj("lon", "-181"), BadCoordinates},
		{"lat 1e999 not finite", obj("lat", "1e999"), BadCoordinates},
		{"lon -1e999 not finite", obj("lon", "-1e999"), BadCoordinates},
		{"lat exponent in range", obj("lat", "4.19794E1"), OK},
		{"lat underflow is 0", obj("lat", "1e-400"), OK},
		{"lat negative zero", obj("lat", "-0"), OK},
		{"lat long literal", obj("lat", "41.979400000000000000000000000000000000001"), OK},
		{"bad lat wins over bad timestamp", obj("lat", "91", "timestamp_ms", "0"), BadCoordinates},

		// bad_timestamp
		{"timestamp string", obj("timestamp_ms", `"1726308298000"`), BadTimestamp},
		{"timestamp bool", obj("timestamp_ms", `false`), BadTimestamp},
		{"timestamp fraction", obj("timestamp_ms", "1.0"), BadTimestamp},
		{"timestamp exponent", obj("timestamp_ms", "1e3"), BadTimestamp},
		{"timestamp exponent uppercase", obj("timestamp_ms", "1E3"), BadTimestamp},
		{"timestamp zero", obj("timestamp_ms", "0"), BadTimestamp},
		{"timestamp negative zero", obj("timestamp_ms", "-0"), BadTimestamp},
		{"timestamp negative", obj("timestamp_ms", "-1"), BadTimestamp},
		{"timestamp one", obj("timestamp_ms", "1"), OK},
		{"timestamp 9999-12-31T23:59:59.999Z", obj("timestamp_ms", "253402300799999"), OK},
		{"timestamp 10000-01-01", obj("timestamp_ms", "253402300800000"), BadTimestamp},
		{"timestamp max int64", obj("timestamp_ms", "9223372036854775807"), BadTimestamp},
		{"timestamp max int64 + 1", obj("timestamp_ms", "9223372036854775808"), BadTimestamp},
		{"timestamp huge", obj("timestamp_ms", "99999999999999999999"), BadTimestamp},
		{"timestamp min int64", obj("timestamp_ms", "-9223372036854775808"), BadTimestamp},

		// accuracy_m is never a rejection
		{"accuracy string", obj("accuracy_m", `"5"`), OK},
		{"accuracy negative", obj("accuracy_m", `-1`), OK},
		{"accuracy huge", obj("accuracy_m", `1e999`), OK},
		{"accuracy object", obj("accuracy_m", `{}`), OK},

		// keys
		{"escaped key", `{"\u0063ourier":"van-3","lat":1,"lon":2,"timestamp_ms":3}`, OK},
		{"fully escaped key", `{"courier":"van-3","\u006c\u0061\u0074":1,"lon":2,"\u0074imestamp\u005fms":3}`, OK},
		{"escaped key with non-ASCII is other key", `{"courier\u00e9":"van-3","lat":1,"lon":2,"timestamp_ms":3}`, MissingField},
		{"duplicate key last wins (good)", `{"courier":7,"lat":1,"lon":2,"timestamp_ms":3,"courier":"van-3"}`, OK},
		{"duplicate key last wins (bad)", `{"courier":"van-3","lat":1,"lon":2,"timestamp_ms":3,"courier":7}`, BadCourier},
		{"unknown fields ignored", obj("speed", "12.5", "meta", `{"k":[1,2]}`), OK},
	}
	var d Decoder
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Position
			if got := d.Decode([]byte(tt.in), &p); got != tt.want {
				t.Errorf("Decode(%.120q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestDecode_Values(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Position
	}{
		{"typical", typical, Position{Courier: []byte("van-3"), Lat: 41.9794, Lon: 2.8214, TS: 1726308298000, Accuracy: -1}},
		{
			"accuracy and arrival",
			`{"courier":"a","lat":-1.5,"lon":1e2,"timestamp_ms":5,"accuracy_m":12.5,"arrival_ms":1726308299000}`,
			Position{Courier: []byte("a"), Lat: -1.5, Lon: 100, TS: 5, Accuracy: 12.5, Arrival: 1726308299000, HasArrival: true},
		},
		{"accuracy zero", obj("accuracy_m", "0"), Position{Courier: []byte("van-3"), Lat: 41.9794, Lon: 2.8214, TS: 1726308298000, Accuracy: 0}},
		{"accuracy negative", obj("accuracy_m", "-0.1"), Position{Courier: []byte("van-3"), Lat: 41.9794, Lon: 2.8214, TS: 1726308298000, Accuracy: -1}},
		{"accuracy null", obj("accuracy_m", "null"), Position{Courier: []byte("van-3"), Lat: 41.9794, Lon: 2.8214, TS: 1726308298000, Accuracy: -1}},
		{"accuracy string", obj("accuracy_m", `"3"`), Position{Courier: []byte("van-3"), Lat: 41.9794, Lon: 2.8214, TS: 1726308298000, Accuracy: -1}},
		{"accuracy not finite", obj("accuracy_m", "2e308"), Position{Courier: []byte("van-3"), Lat: 41.9794, Lon: 2.8214, TS: 1726308298000, Accuracy: -1}},
		{"escaped courier", obj("courier", `"\u0076an\u002D3"`), Position{Courier: []byte("van-3"), Lat: 41.9794, Lon: 2.8214, TS: 1726308298000, Accuracy: -1}},
		{"duplicate lat last wins", `{"courier":"c","lat":1,"lon":2,"timestamp_ms":3,"lat":-4.25}`, Position{Courier: []byte("c"), Lat: -4.25, Lon: 2, TS: 3, Accuracy: -1}},
		{"arrival negative ok", obj("arrival_ms", "-5"), Position{Courier: []byte("van-3"), Lat: 41.9794, Lon: 2.8214, TS: 1726308298000, Accuracy: -1, Arrival: -5, HasArrival: true}},
		{"arrival min int64", obj("arrival_ms", "-9223372036854775808"), Position{Courier: []byte("van-3"), Lat: 41.9794, Lon: 2.8214, TS: 1726308298000, Accuracy: -1, Arrival: math.MinInt64, HasArrival: true}},
	}
	var d Decoder
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Position
			if r := d.Decode([]byte(tt.in), &p); r != OK {
				t.Fatalf("Decode(%q) = %v, want ok", tt.in, r)
			}
			if !samePosition(p, tt.want) {
				t.Errorf("Decode(%q):\ngot  %+v (courier %q)\nwant %+v (courier %q)", tt.in, p, p.Courier, tt.want, tt.want.Courier)
			}
		})
	}
}

func samePosition(a, b Position) bool {
	return bytes.Equal(a.Courier, b.Courier) && a.Lat == b.Lat && a.Lon == b.Lon && a.TS == b.TS &&
		a.Accuracy == b.Accuracy && a.Arrival == b.Arrival && a.HasArrival == b.HasArrival
}

// The contract reads arrival_ms from any line within 4 KiB that is a JSON
// object, whatever else is wrong with it.
func TestDecode_ArrivalOnRejectedLines(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		wantReason  Reason
		wantHas     bool
		wantArrival int64
	}{
		{"empty courier, missing fields", `{"arrival_ms":77,"courier":""}`, MissingField, true, 77},
		{"bad timestamp", obj("timestamp_ms", "1.5", "arrival_ms", "78"), BadTimestamp, true, 78},
		{"only arrival", `{"arrival_ms":79}`, MissingField, true, 79},
		{"arrival with spaces", `{ "arrival_ms" : 80 }`, MissingField, true, 80},
		{"escaped arrival key", `{"arrival\u005fms":81}`, MissingField, true, 81},
		{"last arrival wins", `{"arrival_ms":1,"arrival_ms":82}`, MissingField, true, 82},
		{"last arrival not integer", `{"arrival_ms":1,"arrival_ms":"82"}`, MissingField, false, 0},
		{"arrival fraction", `{"arrival_ms":8.0}`, MissingField, false, 0},
		{"arrival exponent", `{"arrival_ms":8e1}`, MissingField, false, 0},
		{"arrival over int64", `{"arrival_ms":9223372036854775808}`, MissingField, false, 0},
		{"arrival null", `{"arrival_ms":null}`, MissingField, false, 0},
		{"malformed", `{"arrival_ms":83,}`, MalformedJSON, false, 0},
		{"not an object", `[{"arrival_ms":84}]`, MalformedJSON, false, 0},
		{"too large", `{"arrival_ms":85,"x":"` + strings.Repeat("x", MaxPayload) + `"}`, TooLarge, false, 0},
		{"nested arrival ignored", `{"x":{"arrival_ms":86}}`, MissingField, false, 0},
	}
	var d Decoder
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Position{HasArrival: true, Arrival: -99} // must be reset
			r := d.Decode([]byte(tt.in), &p)
			if r != tt.wantReason || p.HasArrival != tt.wantHas || p.Arrival != tt.wantArrival {
				t.Errorf("Decode(%.80q) = %v, HasArrival %v, Arrival %d; want %v, %v, %d",
					tt.in, r, p.HasArrival, p.Arrival, tt.wantReason, tt.wantHas, tt.wantArrival)
			}
		})
	}
}

// Courier aliases the decoder's scratch buffer for escaped ids; the next
// Decode may overwrite it, but decoding must not corrupt an unescaped id
// that aliases the payload.
func TestDecode_CourierAliasing(t *testing.T) {
	var d Decoder
	var p Position
	plain := []byte(obj("courier", `"plain-1"`))
	if r := d.Decode(plain, &p); r != OK || string(p.Courier) != "plain-1" {
		t.Fatalf("Decode plain = %v, %q; want ok, plain-1", r, p.Courier)
	}
	if &p.Courier[0] != &plain[bytes.Index(plain, []byte("plain-1"))] {
		t.Errorf("unescaped courier does not alias the payload")
	}
	if r := d.Decode([]byte(obj("courier", `"\u0065sc"`)), &p); r != OK || string(p.Courier) != "esc" {
		t.Fatalf("Decode escaped = %v, %q; want ok, esc", r, p.Courier)
	}
	if &p.Courier[0] != &d.courier[0] {
		t.Errorf("escaped courier does not alias the decoder's scratch")
	}
}

func TestReason_String(t *testing.T) {
	want := []string{"too_large", "malformed_json", "missing_field", "bad_courier",
		"bad_coordinates", "bad_timestamp", "courier_mismatch", "future_timestamp", "courier_limit"}
	if len(Reasons) != len(want) {
		t.Fatalf("len(Reasons) = %d, want %d", len(Reasons), len(want))
	}
	for i, r := range Reasons {
		if got := r.String(); got != want[i] {
			t.Errorf("Reasons[%d].String() = %q, want %q", i, got, want[i])
		}
		if i > 0 && r <= Reasons[i-1] {
			t.Errorf("Reasons[%d] = %d not after Reasons[%d] = %d: contract order must match value order", i, r, i-1, Reasons[i-1])
		}
	}
	if got := OK.String(); got != "ok" {
		t.Errorf("OK.String() = %q, want ok", got)
	}
	if got := Reason(200).String(); got != "reason(200)" {
		t.Errorf("Reason(200).String() = %q, want reason(200)", got)
	}
}

func TestValidCourier(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"van-3", true},
		{"a", true},
		{"", false},
		{strings.Repeat("z", 64), true},
		{strings.Repeat("z", 65), false},
		{"A.b_c:d-9", true},
		{"van 3", false},
		{"van/3", false},
		{"van#3", false},
		{"vané", false},
		{"van\x00", false},
	}
	for _, tt := range tests {
		if got := ValidCourier([]byte(tt.in)); got != tt.want {
			t.Errorf("ValidCourier(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestDecode_NoAllocs(t *testing.T) {
	var d Decoder
	var p Position
	for _, in := range []string{
		typical,
		`{"courier":"van-3","lat":41.9794,"lon":2.8214,"timestamp_ms":1726308298000,"accuracy_m":8.5,"arrival_ms":1726308298123}`,
		obj("courier", `"\u0076an-3"`, "x", `{"a":[1,2,{"b":null}]}`),
		`{"courier":7}`,
		`not json`,
	} {
		b := []byte(in)
		if n := testing.AllocsPerRun(100, func() { d.Decode(b, &p) }); n != 0 {
			t.Errorf("Decode(%q) allocates %v times per run, want 0", in, n)
		}
	}
}
