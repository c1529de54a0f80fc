package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFeed_Format(t *testing.T) {
	// Times are around 2026-01-05T12:00:00Z, shown in UTC.
	tests := []struct {
		name string
		json string
		want string
	}{
		{"distance moving",
			`{"type":"distance","market":"demo","courier":"demo-c0001","key":"k","window_start_ms":1767614380000,"window_end_ms":1767614400000,"distance_m":412.7,"positions":5,"stopped":false,"cell":"89","emitted_at_ms":1767614403000}`,
			"12:00:03 distance        demo-c0001       413 m   5 pos  window 11:59:40-12:00:00"},
		{"distance stopped",
			`{"type":"distance","courier":"demo-c0002","window_start_ms":1767614380000,"window_end_ms":1767614400000,"distance_m":3,"positions":1,"stopped":true,"emitted_at_ms":1767614403000}`,
			"12:00:03 distance        demo-c0002         3 m   1 pos  window 11:59:40-12:00:00  stopped"},
		{"no_signal",
			`{"type":"no_signal","courier":"demo-c0003","session_start_ms":1767614340000,"last_seen_ms":1767614382000,"last_lat":41.9,"last_lon":2.8,"emitted_at_ms":1767614400000}`,
			"12:00:00 no_signal       demo-c0003   silent since 11:59:42 (session from 11:59:00)"},
		{"signal_restored",
			`{"type":"signal_restored","courier":"demo-c0003","silent_from_ms":1767614382000,"restored_at_ms":1767614406100,"gap_ms":24100,"emitted_at_ms":1767614407000}`,
			"12:00:07 signal_restored demo-c0003   back after 24.1s of silence"},
		{"late",
			`{"type":"late","courier":"demo-c0004","operator":"distance","timestamp_ms":1767614370000,"watermark_ms":1767614398200,"lateness_ms":28200,"emitted_at_ms":1767614401000}`,
			"12:00:01 late            demo-c0004   28.2s late for distance"},
		{"rejected with long raw",
			`{"type":"rejected","market":"demo","key":"k","reason":"bad_coordinates","raw":"{\"courier\":\"demo-c0031\",\"lat\":-94.348001,\"lon\":2.794999,\"timestamp_ms\":1}","line":7,"emitted_at_ms":1767614400000}`,
			`12:00:00 rejected        -            bad_coordinates  "{\"courier\":\"demo-c0031\",\"lat\":-94.348001,\"lon\":2.794999,\"tim…"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			f := newFeed(&out, false, time.UTC)
			f.handle([]byte(tt.json))
			if got := strings.TrimSuffix(out.String(), "\n"); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestFeed_CountsAndColour(t *testing.T) {
	var out bytes.Buffer
	f := newFeed(&out, true, time.UTC)
	for _, m := range []string{
		`{"type":"distance","courier":"a","emitted_at_ms":1}`,
		`{"type":"distance","courier":"b","emitted_at_ms":1}`,
		`{"type":"late","courier":"a","operator":"session","emitted_at_ms":1}`,
		`{"type":"something_new","emitted_at_ms":1}`,
		`not json`,
	} {
		f.handle([]byte(m))
	}
	if got, want := f.totals(), [len(types)]uint64{2, 0, 0, 1, 0}; got != want {
		t.Errorf("got counts %v, want %v", got, want)
	}
	if got := f.other.Load(); got != 2 {
		t.Errorf("got %d unknown messages, want 2", got)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3 (unknown messages are not printed):\n%s", len(lines), out.String())
	}
	if !strings.Contains(lines[0], ansiGreen+"distance") || !strings.Contains(lines[2], ansiMagenta+"late") {
		t.Errorf("got lines %q, want the type coloured green / magenta", lines)
	}

	out.Reset()
	now := time.Date(2026, 1, 5, 12, 0, 10, 0, time.UTC)
	f.tally(now, "")
	f.handle([]byte(`{"type":"distance","courier":"c","emitted_at_ms":1}`))
	f.tally(now, "broker dropped 1 in-flight, 0 messages")
	got := out.String()
	for _, want := range []string{
		"12:00:10 -- tally: distance 2 (+2) no_signal 0 (+0) signal_restored 0 (+0) late 1 (+1) rejected 0 (+0)",
		"12:00:10 -- tally: distance 3 (+1) no_signal 0 (+0) signal_restored 0 (+0) late 1 (+0) rejected 0 (+0) | broker dropped 1 in-flight, 0 messages",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("tallies lack %q; got:\n%s", want, got)
		}
	}
}
