package demo

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Times are around 2026-01-05T12:00:00Z, shown in UTC.
const (
	t1155 = 1767614100000 // 11:55:00
	t1159 = 1767614340000 // 11:59:00
	t1200 = 1767614400000 // 12:00:00
)

func distance(courier string, start int64, positions int, metres float64, stopped bool) string {
	return `{"type":"distance","market":"demo","courier":"` + courier + `","window_start_ms":` + itoa(start) +
		`,"window_end_ms":` + itoa(start+20000) + `,"distance_m":` + ftoa(metres) + `,"positions":` + itoa(int64(positions)) +
		`,"stopped":` + btoa(stopped) + `,"emitted_at_ms":` + itoa(start+23000) + `}`
}

func TestFeed_PrintsEventsNotWindows(t *testing.T) {
	var out bytes.Buffer
	f := newFeed(&out, false, time.UTC)
	for _, m := range []string{
		distance("demo-c0001", t1159, 5, 413, false),
		`{"type":"late","courier":"demo-c0004","operator":"distance","timestamp_ms":1,"watermark_ms":2,"lateness_ms":1,"emitted_at_ms":1}`,
		`{"type":"no_signal","courier":"demo-c0003","session_start_ms":1767614340000,"last_seen_ms":1767614382000,"last_lat":41.9,"last_lon":2.8,"emitted_at_ms":1767614400000}`,
		`{"type":"signal_restored","courier":"demo-c0003","silent_from_ms":1767614382000,"restored_at_ms":1767614406100,"gap_ms":24100,"emitted_at_ms":1767614407000}`,
		`{"type":"rejected","market":"demo","key":"k","reason":"bad_coordinates","raw":"{\"courier\":\"demo-c0031\",\"lat\":-94.348001,\"lon\":2.794999,\"timestamp_ms\":1}","line":7,"emitted_at_ms":1767614400000}`,
		`{"type":"left_area","courier":"demo-c0005","timestamp_ms":1767614390000,"lat":41.95,"lon":2.82,"emitted_at_ms":1767614401000}`,
		`{"type":"dead_zone","market":"demo","key":"k2","window_start_ms":1767614340000,"window_end_ms":1767614370000,"cell":"883945cadbfffff","warnings":2,"couriers":2,"restored":1,"open":1,"silence_ms":24100,"longest_silence_ms":24100,"emitted_at_ms":1767614402000}`,
		`{"type":"something_new","emitted_at_ms":1}`,
		`not json`,
	} {
		f.handle([]byte(m))
	}
	want := strings.Join([]string{
		"12:00:00 no_signal       demo-c0003   silent since 11:59:42 (session from 11:59:00)",
		"12:00:07 signal_restored demo-c0003   back after 24.1s of silence",
		// The rejected line names the courier its payload named.
		`12:00:00 rejected        demo-c0031   bad_coordinates  "{\"courier\":\"demo-c0031\",\"lat\":-94.348001,\"lon\":2.794999,\"tim…"`,
		"12:00:01 left_area       demo-c0005   at 11:59:50, 41.95000,2.82000",
		"12:00:02 dead_zone       -            cell 883945cadbfffff  2 no_signal of 2 couriers, 1 back after 24.1s in all  window 11:59:00-11:59:30",
	}, "\n") + "\n"
	if got := out.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	var counts [len(types)]uint64
	for _, typ := range []string{"distance", "late", "no_signal", "signal_restored", "rejected", "left_area", "dead_zone"} {
		counts[typeIndex(typ)] = 1
	}
	if got, want := f.totals(), counts; got != want {
		t.Errorf("got counts %v, want %v", got, want)
	}
	if f.other != 2 {
		t.Errorf("got %d unknown messages, want 2", f.other)
	}
}

func TestFeed_Board(t *testing.T) {
	var out bytes.Buffer
	f := newFeed(&out, false, time.UTC)
	f.board(time.UnixMilli(t1155), "") // the first board: counts, not rates
	for _, m := range []string{
		distance("a-moving", t1159, 5, 400, false),
		distance("b-stopped", t1155, 4, 3, true), // stopped since 11:55:00
		distance("b-stopped", t1159, 4, 2, true), // still: since stays 11:55:00
		distance("c-one", t1159, 1, 0, true),     // one position: not stopped
		distance("d-silent", t1159, 3, 200, false),
		`{"type":"no_signal","courier":"d-silent","session_start_ms":1767614300000,"last_seen_ms":1767614382000,"emitted_at_ms":1767614400000}`,
		distance("e-back", t1159, 3, 200, false),
		`{"type":"no_signal","courier":"e-back","session_start_ms":1767614300000,"last_seen_ms":1767614300000,"emitted_at_ms":1767614400000}`,
		`{"type":"signal_restored","courier":"e-back","silent_from_ms":1767614300000,"restored_at_ms":1767614390000,"gap_ms":90000,"emitted_at_ms":1767614400000}`,
		`{"type":"rejected","reason":"bad_json","raw":"{nope","emitted_at_ms":1767614400000}`,
		`{"type":"late","courier":"a-moving","operator":"session","emitted_at_ms":1}`,
		`{"type":"late","courier":"a-moving","operator":"session","emitted_at_ms":1}`,
	} {
		f.handle([]byte(m))
	}
	out.Reset()
	f.board(time.UnixMilli(t1200+10000), "broker dropped 1 in-flight, 0 messages") // 12:00:10, 310 s after the first
	want := strings.Join([]string{
		"12:00:10 ── 5 couriers: 2 moving, 1 stopped, 1 one position, 1 silent ── late 0.0/s, rejected 0.0/s ── broker dropped 1 in-flight, 0 messages",
		"  silent now: d-silent 28s",
		"  stopped:    b-stopped 5m10s",
		"  rejected:   ? bad_json (latest)",
	}, "\n") + "\n"
	if got := out.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// Rates are per second since the previous board.
	out.Reset()
	for _, m := range []string{
		`{"type":"late","courier":"a-moving","operator":"session","emitted_at_ms":1}`,
		`{"type":"rejected","reason":"bad_json","raw":"{nope","emitted_at_ms":1767614410000}`,
		`{"type":"rejected","reason":"bad_json","raw":"{nope","emitted_at_ms":1767614410000}`,
		`{"type":"rejected","reason":"bad_json","raw":"{nope","emitted_at_ms":1767614410000}`,
		`{"type":"left_area","courier":"a-moving","timestamp_ms":1767614405000,"lat":41.95,"lon":2.82,"emitted_at_ms":1767614410000}`,
		`{"type":"entered_area","courier":"a-moving","timestamp_ms":1767614406000,"lat":41.95,"lon":2.82,"emitted_at_ms":1767614410000}`,
	} {
		f.handle([]byte(m))
	}
	f.board(time.UnixMilli(t1200+20000), "")
	if got := out.String(); !strings.Contains(got, "late 0.1/s, rejected 0.3/s\n") {
		t.Errorf("got %q, want late 0.1/s and rejected 0.3/s (1 and 3 in 10 s)", got)
	}
}

func TestFeed_BoardNamesAtMostAFew(t *testing.T) {
	var out bytes.Buffer
	f := newFeed(&out, false, time.UTC)
	for i := range 12 {
		f.handle([]byte(distance("s"+itoa(int64(i+10)), t1159, 4, 1, true)))
	}
	f.board(time.UnixMilli(t1200), "")
	if got := out.String(); !strings.Contains(got, "s17 1m0s, +4 more\n") {
		t.Errorf("got\n%s\nwant 8 stopped couriers named, then +4 more", got)
	}
}

func TestFeed_Colour(t *testing.T) {
	var out bytes.Buffer
	f := newFeed(&out, true, time.UTC)
	f.handle([]byte(`{"type":"no_signal","courier":"a","last_seen_ms":1,"emitted_at_ms":1}`))
	if !strings.Contains(out.String(), "\x1b[31mno_signal") {
		t.Errorf("got %q, want no_signal in red", out.String())
	}
}

func itoa(v int64) string   { return strconv.FormatInt(v, 10) }
func ftoa(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
func btoa(v bool) string    { return strconv.FormatBool(v) }
