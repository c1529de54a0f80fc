package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/km0/edgeproc/engine"
)

const t0 = int64(1_700_000_040_000) // a multiple of one minute

// cfg is a small market: 1-minute windows sliding every minute, 30 s delay,
// 60 s gap, filters off, no idle advance, 1-minute future skew.
func cfg() engine.Config {
	return engine.Config{
		Market: "m", Size: 60_000, Slide: 60_000, Gap: 60_000, ToleratedDelay: 30_000,
		MaxFutureSkew: 60_000, RestoreTTL: 24 * 3600_000, H3Resolution: 9, Shards: 2,
	}
}

// pos is one replay line; arrival < 0 leaves arrival_ms out.
func pos(courier string, ts int64, north float64, arrival int64) string {
	s := fmt.Sprintf(`{"courier":%q,"lat":%.6f,"lon":2.8,"timestamp_ms":%d`, courier, 41+north, ts)
	if arrival >= 0 {
		s += fmt.Sprintf(`,"arrival_ms":%d`, arrival)
	}
	return s + "}"
}

func replayLines(t *testing.T, c engine.Config, lines ...string) []map[string]any {
	t.Helper()
	recs, _ := replayRecords(t, c, []byte(strings.Join(lines, "\n")+"\n"))
	return recs
}

// replayRecords replays input and returns the records, decoded with
// json.Number values, and the raw output.
func replayRecords(t *testing.T, c engine.Config, input []byte) ([]map[string]any, []byte) {
	t.Helper()
	var out bytes.Buffer
	if _, err := Run(c, bytes.NewReader(input), &out); err != nil {
		t.Fatalf("replay: %v", err)
	}
	raw := bytes.Clone(out.Bytes())
	var recs []map[string]any
	dec := json.NewDecoder(&out)
	dec.UseNumber()
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("output is not JSON lines: %v", err)
		}
		recs = append(recs, m)
	}
	return recs, raw
}

func ofType(recs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["type"] == typ {
			out = append(out, r)
		}
	}
	return out
}

func num(t *testing.T, r map[string]any, k string) int64 {
	t.Helper()
	n, err := r[k].(json.Number).Int64()
	if err != nil {
		t.Fatalf("field %s of %v: %v", k, r, err)
	}
	return n
}

func TestReplay_SilenceBoundary(t *testing.T) {
	cases := []struct {
		name      string
		silence   int64
		noSignals int
	}{
		{"exactly gap is one session", 60_000, 1},
		{"gap + 1 ms splits", 60_001, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			recs := replayLines(t, cfg(), pos("a", t0, 0, -1), pos("a", t0+c.silence, 0, -1))
			if got := len(ofType(recs, "no_signal")); got != c.noSignals {
				t.Fatalf("got %d no_signal, want %d", got, c.noSignals)
			}
			if c.noSignals == 2 {
				r := ofType(recs, "signal_restored")
				if len(r) != 1 || num(t, r[0], "gap_ms") != c.silence {
					t.Fatalf("got %v, want one signal_restored with gap_ms %d", r, c.silence)
				}
			}
		})
	}
}

func TestReplay_WindowFiresWhenWatermarkReachesEnd(t *testing.T) {
	// Window [t0, t0+60s). wm = max_ts - 30s reaches t0+60s at max_ts =
	// t0+90s. The emission time tells which input fired it: b's line, or the
	// end of input after c's line.
	const bArr, cArr = t0 + 500_000, t0 + 600_000
	for _, c := range []struct {
		name    string
		maxTS   int64
		emitted int64
	}{{"wm one before end", t0 + 89_999, cArr}, {"wm at end", t0 + 90_000, bArr}} {
		t.Run(c.name, func(t *testing.T) {
			recs := replayLines(t, cfg(),
				pos("a", t0+1_000, 0, t0+1_000),
				pos("b", c.maxTS, 0, bArr),
				pos("c", c.maxTS-1, 0, cArr))
			for _, r := range ofType(recs, "distance") {
				if r["courier"] == "a" {
					if got := num(t, r, "emitted_at_ms"); got != c.emitted {
						t.Fatalf("a's window emitted at %d, want %d", got, c.emitted)
					}
					return
				}
			}
			t.Fatalf("no distance record for a in %v", recs)
		})
	}
}

func TestReplay_LatenessPerOperator(t *testing.T) {
	// wm = t0+200s-30s = t0+170s after b. a's position at t0+100s: its only
	// window [t0+60s, t0+120s) has ended (late for distance), and with no
	// open session and wm >= ts+gap it is late for sessions too. At t0+150s
	// it is late for sessions only if wm >= t0+210s, so not late for either.
	cases := []struct {
		name     string
		ts       int64
		distance bool
		session  bool
	}{
		{"late for both", t0 + 100_000, true, true},
		{"late for distance only", t0 + 115_000, true, false},
		{"late for neither", t0 + 150_000, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := []string{pos("b", t0+200_000, 0, -1), pos("a", c.ts, 0, -1)}
			if c.name == "late for distance only" {
				// [t0+115s, t0+175s) touches the session a@t0+175s opened
				// (not late: it closes at wm t0+235s), so it merges.
				lines = []string{pos("b", t0+200_000, 0, -1), pos("a", t0+175_000, 0, -1), pos("a", c.ts, 0, -1)}
			}
			recs := replayLines(t, cfg(), lines...)
			var gotD, gotS bool
			for _, r := range ofType(recs, "late") {
				if num(t, r, "timestamp_ms") != c.ts {
					continue
				}
				if num(t, r, "watermark_ms") != t0+170_000 || num(t, r, "lateness_ms") != t0+170_000-c.ts {
					t.Fatalf("late record %v: want watermark t0+170s", r)
				}
				gotD = gotD || r["operator"] == "distance"
				gotS = gotS || r["operator"] == "session"
			}
			if gotD != c.distance || gotS != c.session {
				t.Fatalf("late distance %v session %v, want %v %v", gotD, gotS, c.distance, c.session)
			}
		})
	}
}

func TestReplay_MergeThenCheck(t *testing.T) {
	// a's session holds t0+100s..t0+150s. wm after b = t0+170s. A position
	// at t0+95s: wm >= ts+gap, but it touches the open session: not late,
	// and the session now starts at t0+95s.
	recs := replayLines(t, cfg(),
		pos("a", t0+100_000, 0, -1), pos("a", t0+150_000, 0, -1),
		pos("b", t0+200_000, 0, -1), pos("a", t0+95_000, 0, -1))
	for _, r := range ofType(recs, "late") {
		if r["operator"] == "session" {
			t.Fatalf("got %v, want no late record for sessions", r)
		}
	}
	for _, r := range ofType(recs, "no_signal") {
		if r["courier"] == "a" && num(t, r, "session_start_ms") != t0+95_000 {
			t.Fatalf("got %v, want a's session to start at t0+95s", r)
		}
	}
}

func TestReplay_SignalRestoredBothPaths(t *testing.T) {
	t.Run("next session already has positions", func(t *testing.T) {
		// a@t0 and a@t0+200s arrive before wm passes t0+60s: both sessions
		// open; when the first closes the restore follows at once.
		recs := replayLines(t, cfg(), pos("a", t0, 0, -1), pos("a", t0+200_000, 0, -1))
		ns, rs := ofType(recs, "no_signal"), ofType(recs, "signal_restored")
		if len(ns) != 2 || len(rs) != 1 {
			t.Fatalf("got %d no_signal %d signal_restored, want 2 and 1", len(ns), len(rs))
		}
		if num(t, rs[0], "silent_from_ms") != t0 || num(t, rs[0], "restored_at_ms") != t0+200_000 {
			t.Fatalf("got %v", rs[0])
		}
	})
	t.Run("restored when the next position arrives", func(t *testing.T) {
		recs := replayLines(t, cfg(), pos("a", t0, 0, t0), pos("b", t0+100_000, 0, t0+100_000), pos("a", t0+120_000, 0, t0+120_000))
		rs := ofType(recs, "signal_restored")
		if len(rs) != 1 || num(t, rs[0], "restored_at_ms") != t0+120_000 || num(t, rs[0], "emitted_at_ms") != t0+120_000 {
			t.Fatalf("got %v, want one restore at t0+120s emitted with a's line", rs)
		}
	})
}

func TestReplay_EndOfInputMarksLatestSessionOnly(t *testing.T) {
	recs := replayLines(t, cfg(), pos("a", t0, 0, -1), pos("a", t0+200_000, 0, -1), pos("b", t0, 0, -1))
	for _, r := range ofType(recs, "no_signal") {
		latest := num(t, r, "session_start_ms") == t0+200_000 || r["courier"] == "b"
		if got := r["end_of_input"] == true; got != latest {
			t.Fatalf("%v: end_of_input %v, want %v", r, got, latest)
		}
	}
}

func TestReplay_IdleAdvanceForSilentFleet(t *testing.T) {
	c := cfg()
	c.IdleTimeout = 30_000
	// The whole fleet stops at t0+10s (arriving on time). A rejected line
	// 10 minutes later in processing time advances the watermark by idleness
	// first: a's session closes and its window fires, emitted at that line.
	later := t0 + 10_000 + 600_000
	recs := replayLines(t, c, pos("a", t0+10_000, 0, t0+10_000), `{"arrival_ms":`+fmt.Sprint(later)+`}`)
	ns := ofType(recs, "no_signal")
	if len(ns) != 1 || ns[0]["end_of_input"] == true || num(t, ns[0], "emitted_at_ms") != later {
		t.Fatalf("got %v, want a no_signal fired by idleness at %d", ns, later)
	}
	if rj := ofType(recs, "rejected"); len(rj) != 1 || rj[0]["reason"] != "missing_field" {
		t.Fatalf("got %v, want the arrival-only line rejected as missing_field", rj)
	}
}

func TestReplay_FutureSkew(t *testing.T) {
	recs := replayLines(t, cfg(),
		pos("a", t0+60_000, 0, t0), // exactly the skew ahead: accepted
		pos("b", t0+60_001, 0, t0)) // 1 ms more: rejected
	rj := ofType(recs, "rejected")
	if len(rj) != 1 || rj[0]["reason"] != "future_timestamp" || num(t, rj[0], "line") != 2 {
		t.Fatalf("got %v, want line 2 rejected as future_timestamp", rj)
	}
}

func TestReplay_Duplicates(t *testing.T) {
	// The copy arriving while its window is unfired is a duplicate; the one
	// arriving after the window fired is processed and late for distance.
	var out bytes.Buffer
	lines := []string{
		pos("a", t0+1_000, 0, -1),
		pos("a", t0+1_000, 0.5, -1), // duplicate: same courier and timestamp
		pos("b", t0+90_000, 0, -1),  // wm = t0+60s: a's window fires
		pos("a", t0+1_000, 0, -1),   // after: late for distance, merges into a's open session
	}
	sum, err := Run(cfg(), strings.NewReader(strings.Join(lines, "\n")), &out)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Stats.Duplicates != 1 {
		t.Fatalf("got %d duplicates, want 1", sum.Stats.Duplicates)
	}
	recs := replayLines(t, cfg(), lines...)
	d := ofType(recs, "distance")
	if len(d) < 1 || d[0]["courier"] != "a" || num(t, d[0], "positions") != 1 || d[0]["distance_m"].(json.Number).String() != "0" {
		t.Fatalf("got %v, want a's window with its one original position", d)
	}
	late := ofType(recs, "late")
	if len(late) != 1 || late[0]["operator"] != "distance" {
		t.Fatalf("got %v, want one late record for distance", late)
	}
}

func TestReplay_PositionBeforeWatermarkInOpenWindow(t *testing.T) {
	// 5-minute windows sliding every minute. wm = t0+200s after b; a's
	// position at t0+100s is behind the watermark, but its newest window
	// [t0+60s, t0+360s) is still open: it is accepted into the open windows
	// only, and is not late for distance.
	c := cfg()
	c.Size = 300_000
	recs := replayLines(t, c, pos("b", t0+230_000, 0, -1), pos("a", t0+100_000, 0, -1))
	for _, r := range ofType(recs, "late") {
		if r["operator"] == "distance" {
			t.Fatalf("got %v, want not late for distance", r)
		}
	}
	var starts []int64
	for _, r := range ofType(recs, "distance") {
		if r["courier"] == "a" {
			starts = append(starts, num(t, r, "window_start_ms"))
		}
	}
	// Windows holding t0+100s start at t0-180s..t0+60s; those ending at or
	// before wm = t0+200s (starts t0-180s..t0-100s... ends <= t0+200s) were
	// never created.
	want := []int64{t0 - 60_000, t0, t0 + 60_000}
	if fmt.Sprint(starts) != fmt.Sprint(want) {
		t.Fatalf("got window starts %v, want %v", starts, want)
	}
}

func TestReplay_RejectedLineNeverStopsTheReplay(t *testing.T) {
	recs := replayLines(t, cfg(), `not json`, ``, pos("a", t0, 0, -1), `{"courier":"a b","lat":1,"lon":1,"timestamp_ms":5}`)
	rj := ofType(recs, "rejected")
	if len(rj) != 2 || rj[0]["reason"] != "malformed_json" || rj[1]["reason"] != "bad_courier" || num(t, rj[1], "line") != 4 {
		t.Fatalf("got %v, want malformed_json (line 1) and bad_courier (line 4)", rj)
	}
	if len(ofType(recs, "distance")) != 1 {
		t.Fatalf("the valid line must still be processed")
	}
}

// TestReplay_WorkedExample replays the seed's worked example
// (testdata/worked.jsonl: 1-minute windows, 2-minute delay, 60 s gap) and
// checks it against values worked out by hand: positions lie on the
// meridian 2.8214°E, so each segment is R·Δlat in radians.
func TestReplay_WorkedExample(t *testing.T) {
	in, err := os.ReadFile("../testdata/worked.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	c := cfg()
	c.Size, c.Slide, c.Gap, c.ToleratedDelay = 60_000, 60_000, 60_000, 120_000
	c.Market = "girona"
	recs, _ := replayRecords(t, c, in)
	m := func(dLat float64) float64 { return 6371008.8 * dLat * math.Pi / 180 }
	const base = 1726315200000 // 12:00:00
	// 12:00 holds 12:00:10 (41.9794), 12:00:30 (41.9796, late arrival) and
	// 12:00:55 (41.9799); 12:01 holds 12:01:05 (41.9804); 12:02 holds
	// 12:02:10 (41.9814) and 12:02:40 (41.9819).
	want := []struct {
		start int64
		n     int64
		dist  float64
	}{
		{base, 3, m(0.0002) + m(0.0003)},
		{base + 60_000, 1, m(0.0005)},
		{base + 120_000, 2, m(0.0010) + m(0.0005)},
	}
	d := ofType(recs, "distance")
	if len(d) != len(want) {
		t.Fatalf("got %d windows, want %d", len(d), len(want))
	}
	for i, w := range want {
		got, _ := d[i]["distance_m"].(json.Number).Float64()
		if num(t, d[i], "window_start_ms") != w.start || num(t, d[i], "positions") != w.n || math.Abs(got-w.dist) > 0.01 {
			t.Errorf("window %d: got %v, want start %d, %d positions, %.3f m", i, d[i], w.start, w.n, w.dist)
		}
	}
	ns := ofType(recs, "no_signal")
	if len(ns) != 2 || num(t, ns[0], "last_seen_ms") != base+65_000 || ns[0]["end_of_input"] == true ||
		num(t, ns[1], "session_start_ms") != base+130_000 || ns[1]["end_of_input"] != true {
		t.Fatalf("got %v, want sessions 12:00:10–12:01:05 and 12:02:10–12:02:40 (end of input)", ns)
	}
	rs := ofType(recs, "signal_restored")
	if len(rs) != 1 || num(t, rs[0], "gap_ms") != 65_000 {
		t.Fatalf("got %v, want one signal_restored after a 65 s silence", rs)
	}
}
