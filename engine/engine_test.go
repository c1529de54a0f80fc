package engine

import (
	"fmt"
	"sync"
	"testing"

	"github.com/km0/edgeproc/result"
)

const t0 = int64(1_700_000_040_000)

type collector struct {
	mu   sync.Mutex
	recs []result.Record
}

func (c *collector) sink(rs []result.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, rs...)
}

func (c *collector) ofType(t result.Type) []result.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []result.Record
	for _, r := range c.recs {
		if r.Type == t {
			out = append(out, r)
		}
	}
	return out
}

func liveConfig() Config {
	return Config{
		Market: "m", Size: 60_000, Slide: 60_000, Gap: 60_000, ToleratedDelay: 10_000,
		IdleTimeout: 30_000, MaxFutureSkew: 60_000, RestoreTTL: 3600_000, H3Resolution: 9,
		Topic: "km0/m/positions/+", Shards: 2,
	}
}

func input(courier string, ts, arrival int64) *Input {
	return &Input{
		Payload: []byte(fmt.Sprintf(`{"courier":%q,"lat":41,"lon":2,"timestamp_ms":%d}`, courier, ts)),
		Topic:   "km0/m/positions/" + courier, Arrival: arrival, HasArrival: true,
	}
}

func TestEngine_StopKeepsWindowsOpen(t *testing.T) {
	var c collector
	e := New(liveConfig(), c.sink)
	e.Push(input("a", t0, t0))
	e.Stop()
	if len(c.recs) != 0 {
		t.Fatalf("got %d records after Stop, want none: Stop is not the end of input", len(c.recs))
	}
}

func TestEngine_OnForget(t *testing.T) {
	var forgotten []string
	cfg := liveConfig()
	cfg.MaxCouriers, cfg.RestoreTTL, cfg.IdleTimeout = 2, 120_000, 0
	cfg.OnForget = func(c string) { forgotten = append(forgotten, c) }
	e := New(cfg, func([]result.Record) {})
	e.Push(input("a", t0, t0))
	e.Push(input("b", t0+70_000, t0+70_000))   // wm t0+60s = a's latest + max(size, gap)
	e.Push(input("c", t0+70_000, t0+70_000))   // full: a evicted
	e.Push(input("d", t0+200_000, t0+200_000)) // full, nobody idle: refused; wm t0+190s forgets b and c
	e.EndOfInput()
	if fmt.Sprint(forgotten) != "[a b c]" {
		t.Fatalf("forgotten %v, want [a b c]", forgotten)
	}
	if st := e.Stats(); st.Evicted != 1 || st.Rejected["courier_limit"] != 1 || st.Couriers != 0 {
		t.Fatalf("got %+v, want 1 evicted, 1 courier_limit, no courier left", st)
	}
}

func TestEngine_EndsOnce(t *testing.T) {
	var c collector
	e := New(liveConfig(), c.sink)
	e.Push(input("a", t0, t0))
	e.Stop()
	e.EndOfInput() // after Stop: nothing more happens, no panic
	e.Stop()
	if len(c.recs) != 0 {
		t.Fatalf("got %d records, want none: the engine had stopped before EndOfInput", len(c.recs))
	}
	e = New(liveConfig(), c.sink)
	e.Push(input("a", t0, t0))
	e.EndOfInput()
	e.EndOfInput()
	e.Stop()
	if n := len(c.ofType(result.NoSignal)); n != 1 {
		t.Fatalf("got %d no_signal, want 1 from the single end of input", n)
	}
}

func TestEngine_TickAdvancesIdleWatermark(t *testing.T) {
	var c collector
	e := New(liveConfig(), c.sink)
	e.Push(input("a", t0, t0))
	e.Sync()
	// wm = max_ts + (τ - arrival) - delay reaches t0+gap at τ = t0+gap+delay.
	e.Tick(t0 + 69_999)
	e.Sync()
	if n := len(c.ofType(result.NoSignal)); n != 0 {
		t.Fatalf("got %d no_signal 1 ms early, want 0", n)
	}
	e.Tick(t0 + 70_000)
	e.Sync()
	ns := c.ofType(result.NoSignal)
	if len(ns) != 1 || ns[0].EmittedAt != t0+70_000 || ns[0].EndOfInput {
		t.Fatalf("got %+v, want one no_signal emitted at the tick", ns)
	}
	e.Stop()
}

func TestEngine_TopicCourierMismatch(t *testing.T) {
	var c collector
	e := New(liveConfig(), c.sink)
	in := input("a", t0, t0)
	in.Topic = "km0/m/positions/b"
	e.Push(in)
	e.Sync()
	rj := c.ofType(result.Rejected)
	if len(rj) != 1 || rj[0].Reason != "courier_mismatch" {
		t.Fatalf("got %+v, want one courier_mismatch", rj)
	}
	e.Stop()
}

func TestEngine_OnPositionSeesValidPositionsOnly(t *testing.T) {
	var seen []string
	cfg := liveConfig()
	cfg.OnPosition = func(courier []byte, ts int64, lat, lon float64) { seen = append(seen, string(courier)) }
	e := New(cfg, func([]result.Record) {})
	e.Push(input("a", t0, t0))
	e.Push(&Input{Payload: []byte(`{"courier":"b"}`), Topic: "km0/m/positions/b", Arrival: t0, HasArrival: true})
	e.Push(input("c", t0, t0))
	e.Stop()
	if fmt.Sprint(seen) != "[a c]" {
		t.Fatalf("got %v, want [a c]", seen)
	}
}

func TestEngine_StatsCount(t *testing.T) {
	e := New(liveConfig(), func([]result.Record) {})
	e.Push(input("a", t0, t0))
	e.Push(input("a", t0, t0)) // duplicate
	e.Push(&Input{Payload: []byte(`nope`), Arrival: t0, HasArrival: true})
	e.Stop()
	st := e.Stats()
	if st.Received != 3 || st.Accepted != 2 || st.Duplicates != 1 || st.Rejected["malformed_json"] != 1 {
		t.Fatalf("got %+v", st)
	}
}

// TestEngine_TickDueOnlyWhenATickFiresSomething guards the silent market's
// quiet: a tick is due only once the idle rule would reach the earliest
// timer (a window end, then a session close), never before.
func TestEngine_TickDueOnlyWhenATickFiresSomething(t *testing.T) {
	cfg := liveConfig() // window 60 s, gap 60 s, delay 10 s, idle 30 s
	var c collector
	e := New(cfg, c.sink)
	defer e.Stop()
	ts := t0 + 1_000 // its window [t0, t0+60 s); its session closes at ts+60 s
	e.Push(input("a", ts, ts))
	e.Sync()
	windowEnd, sessionClose := t0+60_000, ts+60_000
	// The idle rule at now gives ts + (now - ts) - 10 s = now - 10 s.
	for _, tt := range []struct {
		now  int64
		want bool
	}{
		{ts + 29_999, false},            // not idle yet
		{ts + 30_000, false},            // idle, but wm = ts+20 s fires nothing
		{windowEnd + 10_000 - 1, false}, // wm one ms before the window's end
		{windowEnd + 10_000, true},      // wm reaches the window's end
	} {
		if got := e.TickDue(tt.now); got != tt.want {
			t.Errorf("TickDue(ts+%d ms) = %v, want %v", tt.now-ts, got, tt.want)
		}
	}
	e.Tick(windowEnd + 10_000)
	e.Sync()
	if n := len(c.ofType(result.Distance)); n != 1 {
		t.Fatalf("the due tick fired %d distance windows, want 1", n)
	}
	if e.TickDue(sessionClose + 10_000 - 1) {
		t.Errorf("due one ms before the session closes")
	}
	if !e.TickDue(sessionClose + 10_000) {
		t.Errorf("not due when the session closes")
	}
	e.Listen(sessionClose + 10_000) // deaf until now: the idle clock restarts
	if e.TickDue(sessionClose + 10_000 + 29_999) {
		t.Errorf("due 29.999 s after a listen, want the idle timeout to count from the listen")
	}
	if !e.TickDue(sessionClose + 10_000 + 30_000) {
		t.Errorf("not due an idle timeout after the listen")
	}
}

// TestEngine_DeafGapIsNotSilence guards the partitioned source's rule: a
// step of the processing clock longer than DeafGap restarts the idle
// clock, so a gap in the stream (nobody could write) is never applied as
// silence, while steps up to DeafGap count as heard time.
func TestEngine_DeafGapIsNotSilence(t *testing.T) {
	const gap = 5_000
	ts := t0 + 1_000 // its session closes once wm >= ts + 60 s
	for _, tt := range []struct {
		name     string
		ticks    []int64 // processing times of the ticks after the position
		noSignal bool
	}{
		// Heard all along (ticks 5 s apart): the idle rule advances to
		// now - 10 s, past the session's close at 80 s.
		{"ticks at the gap", []int64{ts + 5_000, ts + 10_000, ts + 15_000, ts + 20_000, ts + 25_000, ts + 30_000,
			ts + 35_000, ts + 40_000, ts + 45_000, ts + 50_000, ts + 55_000, ts + 60_000, ts + 65_000, ts + 70_000}, true},
		// One step over the gap (ts + 5 s to ts + 60 s): deaf until then,
		// so the idle timeout counts from there and for 29 s more the
		// idle rule does not apply (without the gap rule it would, at
		// ts + 85 s: wm = ts + 75 s, past the session's close).
		{"a step over the gap", []int64{ts + 5_000, ts + 60_000, ts + 65_000, ts + 70_000, ts + 75_000, ts + 80_000,
			ts + 85_000, ts + 89_000}, false},
		// Silent after the step for the idle timeout: the idle rule applies
		// again from the newest event (wm = now - 10 s), so a courier who
		// stays silent still gets its warning.
		{"silent after the step", []int64{ts + 5_000, ts + 60_000, ts + 65_000, ts + 70_000, ts + 75_000, ts + 80_000,
			ts + 85_000, ts + 90_000}, true},
		// The step alone, however long, fires nothing.
		{"one long step", []int64{ts + 3_600_000}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := liveConfig() // window 60 s, gap 60 s, delay 10 s, idle 30 s
			cfg.DeafGap = gap
			var c collector
			e := New(cfg, c.sink)
			e.Push(input("a", ts, ts))
			for _, now := range tt.ticks {
				e.Tick(now)
			}
			e.Stop()
			if got := len(c.ofType(result.NoSignal)) > 0; got != tt.noSignal {
				t.Errorf("no_signal: %v, want %v", got, tt.noSignal)
			}
		})
	}
}
