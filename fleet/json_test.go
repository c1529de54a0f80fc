package fleet

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type decoded struct {
	Courier   *string  `json:"courier"`
	Lat       *float64 `json:"lat"`
	Lon       *float64 `json:"lon"`
	TS        *int64   `json:"timestamp_ms"`
	Accuracy  *float64 `json:"accuracy_m"`
	ArrivalMs *int64   `json:"arrival_ms"`
}

func mustDecode(tb testing.TB, b []byte) decoded {
	tb.Helper()
	var d decoded
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		tb.Fatalf("decode %s: %v", b, err)
	}
	if d.Courier == nil || d.Lat == nil || d.Lon == nil || d.TS == nil || d.Accuracy == nil {
		tb.Fatalf("decode %s: a member is missing", b)
	}
	return d
}

func TestAppendJSON_RoundTrip(t *testing.T) {
	base := Event{Courier: "c0001", Lat: 41.9794, Lon: 2.8214, TS: 1767614400000, Accuracy: 7.5, Arrival: 1767614401200}
	tests := []struct {
		name        string
		mod         func(e *Event)
		withArrival bool
		want        string // exact text, when not ""
	}{
		{"plain", func(*Event) {}, false,
			`{"courier":"c0001","lat":41.9794,"lon":2.8214,"timestamp_ms":1767614400000,"accuracy_m":7.5}`},
		{"with arrival", func(*Event) {}, true,
			`{"courier":"c0001","lat":41.9794,"lon":2.8214,"timestamp_ms":1767614400000,"accuracy_m":7.5,"arrival_ms":1767614401200}`},
		{"negative and extreme", func(e *Event) { e.Lat, e.Lon, e.Accuracy = -90, -180, 0 }, true, ""},
		{"many digits", func(e *Event) { e.Lat, e.Lon = 41.123456789012345, 2.000000000001 }, false, ""},
		{"escaped courier", func(e *Event) { e.Courier = "a\"b\\c\n\t\x01é€" }, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := base
			tt.mod(&e)
			got := AppendJSON([]byte("prefix"), e, tt.withArrival)
			if !strings.HasPrefix(string(got), "prefix") {
				t.Fatalf("AppendJSON dropped dst: %s", got)
			}
			got = got[len("prefix"):]
			if tt.want != "" && string(got) != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			d := mustDecode(t, got)
			if *d.Courier != e.Courier || *d.Lat != e.Lat || *d.Lon != e.Lon || *d.TS != e.TS || *d.Accuracy != e.Accuracy {
				t.Errorf("decoded %q %v %v %v %v, want %q %v %v %v %v", *d.Courier, *d.Lat, *d.Lon, *d.TS, *d.Accuracy,
					e.Courier, e.Lat, e.Lon, e.TS, e.Accuracy)
			}
			if tt.withArrival != (d.ArrivalMs != nil) || tt.withArrival && *d.ArrivalMs != e.Arrival {
				t.Errorf("arrival_ms = %v, want %v (withArrival %v)", d.ArrivalMs, e.Arrival, tt.withArrival)
			}
		})
	}
}

// TestAppendJSON_Generated round-trips every event of a small fleet.
func TestAppendJSON_Generated(t *testing.T) {
	var buf []byte
	for _, e := range mustCollect(t, Config{Couriers: 20, Duration: 10 * time.Minute, Seed: 4}) {
		buf = AppendJSON(buf[:0], e, true)
		d := mustDecode(t, buf)
		if *d.Courier != e.Courier || *d.Lat != e.Lat || *d.Lon != e.Lon || *d.TS != e.TS ||
			*d.Accuracy != e.Accuracy || *d.ArrivalMs != e.Arrival {
			t.Fatalf("%s decodes to other values than %+v", buf, e)
		}
	}
}

func TestAppendJSON_Raw(t *testing.T) {
	tests := []struct {
		raw         string
		withArrival bool
		want        string
	}{
		{`{"courier":"c1","lat":NaN}`, false, `{"courier":"c1","lat":NaN}`},
		{`{"courier":"c1","lat":NaN}`, true, `{"courier":"c1","lat":NaN,"arrival_ms":5}`},
		{`{"courier":"c1" } `, true, `{"courier":"c1" ,"arrival_ms":5}`},
		{`{ }`, true, `{ "arrival_ms":5}`},
		{`{"courier":"c1","la`, true, `{"courier":"c1","la`},
		{`[1,2]`, true, `[1,2]`},
	}
	for _, tt := range tests {
		got := string(AppendJSON(nil, Event{Raw: []byte(tt.raw), Arrival: 5}, tt.withArrival))
		if got != tt.want {
			t.Errorf("AppendJSON(Raw %s, %v) = %s, want %s", tt.raw, tt.withArrival, got, tt.want)
		}
	}
}
