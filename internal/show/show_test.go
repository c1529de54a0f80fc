package show

import (
	"testing"
	"time"

	"github.com/km0/edgeproc/bridge"
)

func TestDecodeAndLine(t *testing.T) {
	// Times around 2026-01-05T12:00:00Z, shown in UTC.
	tests := []struct {
		name, json, want string
	}{
		{"distance moving",
			`{"type":"distance","market":"demo","courier":"demo-c0001","key":"k","window_start_ms":1767614380000,"window_end_ms":1767614400000,"distance_m":412.7,"positions":5,"stopped":false,"cell":"89","emitted_at_ms":1767614403000}`,
			"12:00:03 distance        demo-c0001       413 m   5 pos  window 11:59:40-12:00:00"},
		{"distance revised",
			`{"type":"distance","market":"demo","courier":"demo-c0001","key":"k|2","window_start_ms":1767614380000,"window_end_ms":1767614400000,"distance_m":530.2,"positions":7,"stopped":false,"cell":"89","revision":2,"emitted_at_ms":1767614463000}`,
			"12:01:03 distance        demo-c0001       530 m   7 pos  window 11:59:40-12:00:00  revision 2"},
		{"distance stopped",
			`{"type":"distance","courier":"demo-c0002","window_start_ms":1767614380000,"window_end_ms":1767614400000,"distance_m":3,"positions":4,"stopped":true,"emitted_at_ms":1767614403000}`,
			"12:00:03 distance        demo-c0002         3 m   4 pos  window 11:59:40-12:00:00  stopped"},
		{"one position is not stopped",
			`{"type":"distance","courier":"demo-c0002","window_start_ms":1767614380000,"window_end_ms":1767614400000,"distance_m":0,"positions":1,"stopped":true,"emitted_at_ms":1767614403000}`,
			"12:00:03 distance        demo-c0002         0 m   1 pos  window 11:59:40-12:00:00  one position"},
		{"no_signal at end of input",
			`{"type":"no_signal","courier":"van-3","session_start_ms":1767614340000,"last_seen_ms":1767614382000,"end_of_input":true,"emitted_at_ms":1767614400000}`,
			"12:00:00 no_signal       van-3        silent since 11:59:42 (session from 11:59:00)  end of input"},
		{"late",
			`{"type":"late","courier":"demo-c0004","operator":"distance","timestamp_ms":1767614370000,"watermark_ms":1767614398200,"lateness_ms":28200,"emitted_at_ms":1767614401000}`,
			"12:00:01 late            demo-c0004   28.2s late for distance"},
		{"late in seconds gets a hint",
			`{"type":"late","courier":"van-3","operator":"session","timestamp_ms":1767614370,"watermark_ms":1767614398200,"lateness_ms":1765846783830,"emitted_at_ms":1767614401000}`,
			"12:00:01 late            van-3        490512h59m43.8s late for session  (timestamp_ms looks like seconds, not milliseconds)"},
		{"missing_field names the field",
			`{"type":"rejected","reason":"missing_field","field":"lat","raw":"{\"courier\":\"van-3\",\"lon\":2.8}","emitted_at_ms":1767614400000}`,
			`12:00:00 rejected        van-3        missing_field lat  "{\"courier\":\"van-3\",\"lon\":2.8}"`},
		{"rejected names the payload's courier",
			`{"type":"rejected","reason":"bad_coordinates","raw":"{\"courier\":\"demo-c0031\",\"lat\":-94.3}","emitted_at_ms":1767614400000}`,
			`12:00:00 rejected        demo-c0031   bad_coordinates  "{\"courier\":\"demo-c0031\",\"lat\":-94.3}"`},
		{"rejected cut payload still names it",
			`{"type":"rejected","reason":"too_large","raw":"{\"courier\":\"demo-c0004\",\"lat\":42.0,\"pad\":\"xxxx","emitted_at_ms":1767614400000}`,
			`12:00:00 rejected        demo-c0004   too_large  "{\"courier\":\"demo-c0004\",\"lat\":42.0,\"pad\":\"xxxx"`},
		{"rejected without a courier",
			`{"type":"rejected","reason":"malformed_json","raw":"nope","emitted_at_ms":1767614400000}`,
			`12:00:00 rejected        -            malformed_json  "nope"`},
	}
	p := Printer{Loc: time.UTC}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Decode([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Line(r); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestDecode_Errors(t *testing.T) {
	for _, in := range []string{`not json`, `{"courier":"a"}`, `[]`} {
		if _, err := Decode([]byte(in)); err == nil {
			t.Errorf("Decode(%s): got nil error", in)
		}
	}
}

func TestPrinter_MarketAndColour(t *testing.T) {
	r, _ := Decode([]byte(`{"type":"no_signal","market":"girona","courier":"a","last_seen_ms":0,"session_start_ms":0,"emitted_at_ms":0}`))
	if got, want := (Printer{Loc: time.UTC, ShowMarket: true}).Line(r), "00:00:00 no_signal       a            silent since 00:00:00 (session from 00:00:00)  [girona]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (Printer{Loc: time.UTC, Color: true}).Line(r); got[:9+len(ansiRed)] != "00:00:00 "+ansiRed {
		t.Errorf("got %q, want the type in red", got)
	}
	c := bridge.CourierState{Courier: "van-3", Lat: 41.9819, Lon: 2.8214, TS: 1767614400000, Cell: "893945c1e4bffff", Status: "online"}
	if got, want := (Printer{Loc: time.UTC}).CourierLine("girona", c), "12:00:00 courier         van-3        online    at 41.98190,2.82140 cell 893945c1e4bffff"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
