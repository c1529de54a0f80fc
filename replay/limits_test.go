package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/km0/edgeproc/engine"
)

// boundaryCase is one input at a boundary of the contract and what must
// hold of its records.
type boundaryCase struct {
	name  string
	setup func(*engine.Config)
	lines []string
	check func(t *testing.T, recs []map[string]any, st engine.Stats)
}

// TestReplay_ContractBoundaries checks the rules of contract §2–§3 on
// effective timestamps, the timestamp range, tracking and forgetting, the
// courier limit and ties, each at its boundary, with expected values worked
// out from the contract. Every case is also compared with the reference
// and under 1 and 3 shards.
//
// cfg(): 1-minute windows sliding every minute, 60 s gap, wm = max_ts - 30 s.
func TestReplay_ContractBoundaries(t *testing.T) {
	limit := func(n int, ttl int64) func(*engine.Config) {
		return func(c *engine.Config) { c.MaxCouriers, c.RestoreTTL = n, ttl }
	}
	cases := []boundaryCase{
		{
			// a at the clock: wm = t0+120s-30s = t0+90s, so the probe at
			// t0+30s is late for sessions (t0+30s+gap <= wm).
			name: "position exactly at the clock moves wm to clock - delay",
			lines: []string{
				pos("a", t0+120_000, 0, t0+120_000),
				pos("p", t0+30_000, 0, t0+120_000),
			},
			check: func(t *testing.T, recs []map[string]any, _ engine.Stats) {
				wantLate(t, recs, "p", "session", t0+90_000)
				wantLate(t, recs, "p", "distance", t0+90_000)
			},
		},
		{
			// a 1 ms ahead of the clock counts as its arrival: wm = t0+89.999s,
			// the probe is not late for sessions; a keeps its own timestamp
			// for its window and session.
			name: "position 1 ms ahead of the clock counts at its arrival",
			lines: []string{
				pos("a", t0+120_000, 0, t0+119_999),
				pos("p", t0+30_000, 0, t0+119_999),
			},
			check: func(t *testing.T, recs []map[string]any, _ engine.Stats) {
				wantLate(t, recs, "p", "distance", t0+89_999)
				if r := find(recs, "late", "p", "operator", "session"); r != nil {
					t.Errorf("got %v, want p not late for sessions at wm t0+89.999s", r)
				}
				if r := find(recs, "distance", "a", "window_start_ms", t0+120_000); r == nil {
					t.Errorf("no distance window of a starting at its own timestamp's window in %v", recs)
				}
				if r := find(recs, "no_signal", "a", "last_seen_ms", t0+120_000); r == nil {
					t.Errorf("no session of a ending at its own timestamp in %v", recs)
				}
			},
		},
		{
			// A copy of a fast-clock position arrives later: it is a
			// duplicate and must not move the watermark to its later arrival.
			name: "duplicate of a fast-clock position does not move wm",
			lines: []string{
				pos("a", t0+120_000, 0, t0+100_000),
				pos("a", t0+120_000, 0, t0+110_000),
				pos("p", t0+30_000, 0, t0+110_000),
			},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				if st.Duplicates != 1 {
					t.Errorf("got %d duplicates, want 1", st.Duplicates)
				}
				wantLate(t, recs, "p", "distance", t0+70_000) // t0+100s - 30s, not t0+110s - 30s
			},
		},
		{
			// 2^63-2 once made a shard spin; 2^63-1 made window.fire panic.
			name:  "timestamp 253402300799999 is valid, 1 ms more is bad_timestamp",
			lines: []string{pos("a", 253402300799999, 0, -1), pos("b", 253402300800000, 0, -1), pos("c", math.MaxInt64-1, 0, -1), pos("d", math.MaxInt64, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, _ engine.Stats) {
				wantRejected(t, recs, 2, "bad_timestamp")
				wantRejected(t, recs, 3, "bad_timestamp")
				wantRejected(t, recs, 4, "bad_timestamp")
				if r := find(recs, "distance", "a", "window_end_ms", 253402300800000); r == nil {
					t.Errorf("no window of a at the end of 9999 in %v", recs)
				}
			},
		},
		{
			// The idle rule drives wm to about MaxInt64 - 30 s, everything fires;
			// later positions are late. Nothing may overflow, panic or spin.
			name: "extreme clock and timestamps",
			setup: func(c *engine.Config) {
				c.IdleTimeout = 10_000
				c.MaxFutureSkew = math.MaxInt64
			},
			lines: []string{
				pos("a", 253402300799999, 0, 1),
				pos("b", 253402300799990, 0, math.MaxInt64-1),
				pos("a", 253402300799999, 0.1, math.MaxInt64),
				pos("c", 1, 0, math.MaxInt64),
			},
			check: func(t *testing.T, recs []map[string]any, _ engine.Stats) {
				wantLate(t, recs, "c", "distance", math.MaxInt64-30_001) // 1 + (MaxInt64-1 - 1) - 30 s
				if r := find(recs, "no_signal", "a", "end_of_input", nil); r == nil {
					t.Errorf("no no_signal for a before the end of input in %v", recs)
				}
			},
		},
		{
			// a and b fill the table; c's wm t0-30s is before a's latest +
			// max(size, gap): refused, but it moves wm to t0+170s, which
			// closes a's and b's sessions before the end of input.
			name:  "limit reached: refused position still moves the watermark",
			setup: limit(2, 24*3600_000),
			lines: []string{pos("a", t0, 0, -1), pos("b", t0, 0, -1), pos("c", t0+200_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				wantRejected(t, recs, 3, "courier_limit")
				if st.Rejected["courier_limit"] != 1 || st.Evicted != 0 {
					t.Errorf("got %d courier_limit, %d evicted; want 1, 0", st.Rejected["courier_limit"], st.Evicted)
				}
				for _, c := range []string{"a", "b"} {
					if find(recs, "no_signal", c, "end_of_input", nil) == nil {
						t.Errorf("no no_signal of %s fired by the refused position's watermark in %v", c, recs)
					}
				}
			},
		},
		{
			// b moves wm to t0+60s = a's latest + max(size, gap): a is
			// evicted and c takes its place.
			name:  "evicted at exactly latest + max(size, gap)",
			setup: limit(2, 24*3600_000),
			lines: []string{pos("a", t0, 0, -1), pos("b", t0+90_000, 0, -1), pos("c", t0+95_000, 0, -1), pos("a", t0+96_000, 0.01, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				if st.Evicted != 1 || len(ofType(recs, "rejected")) != 1 {
					t.Errorf("got %d evicted and %v; want c in place of a, then a refused", st.Evicted, ofType(recs, "rejected"))
				}
				wantRejected(t, recs, 4, "courier_limit") // b, c tracked; b's latest + 60 s > wm
			},
		},
		{
			name:  "1 ms before latest + max(size, gap): refused",
			setup: limit(2, 24*3600_000),
			lines: []string{pos("a", t0, 0, -1), pos("b", t0+89_999, 0, -1), pos("c", t0+95_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				wantRejected(t, recs, 3, "courier_limit")
				if st.Evicted != 0 {
					t.Errorf("got %d evicted, want 0", st.Evicted)
				}
			},
		},
		{
			// restore_ttl 120 s: b moves wm to t0+120s = a's latest + ttl, a
			// is forgotten and c finds a free place (no eviction). a comes
			// back afresh: no signal_restored, no segment.
			name:  "place freed by forgetting at exactly latest + restore_ttl",
			setup: limit(2, 120_000),
			lines: []string{pos("a", t0, 0, -1), pos("b", t0+150_000, 0, -1), pos("c", t0+150_000, 0, -1), pos("b", t0+180_000, 0, -1), pos("a", t0+180_000, 0.01, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				if st.Evicted != 0 || len(ofType(recs, "rejected")) != 1 {
					t.Errorf("got %d evicted, rejected %v; want c in a free place, then a refused", st.Evicted, ofType(recs, "rejected"))
				}
				wantRejected(t, recs, 5, "courier_limit")
			},
		},
		{
			name:  "1 ms before latest + restore_ttl: still tracked, evicted instead",
			setup: limit(2, 120_000),
			lines: []string{pos("a", t0, 0, -1), pos("b", t0+149_999, 0, -1), pos("c", t0+150_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				if st.Evicted != 1 || len(ofType(recs, "rejected")) != 0 {
					t.Errorf("got %d evicted, rejected %v; want a evicted for c", st.Evicted, ofType(recs, "rejected"))
				}
			},
		},
		{
			name:  "forgotten courier starts afresh",
			setup: limit(10, 120_000),
			lines: []string{pos("a", t0, 0, -1), pos("b", t0+150_000, 0, -1), pos("a", t0+150_000, 0.01, -1)},
			check: func(t *testing.T, recs []map[string]any, _ engine.Stats) {
				if r := ofType(recs, "signal_restored"); len(r) != 0 {
					t.Errorf("got %v, want no signal_restored for a forgotten courier", r)
				}
				if r := find(recs, "distance", "a", "window_start_ms", t0+120_000); r == nil || num(t, r, "positions") != 1 || r["distance_m"].(fmt.Stringer).String() != "0" {
					t.Errorf("got %v, want a's window with one position and no segment", r)
				}
			},
		},
		{
			name:  "1 ms before restore_ttl: remembered",
			setup: limit(10, 120_000),
			lines: []string{pos("a", t0, 0, -1), pos("b", t0+149_999, 0, -1), pos("a", t0+150_000, 0.01, -1)},
			check: func(t *testing.T, recs []map[string]any, _ engine.Stats) {
				if r := ofType(recs, "signal_restored"); len(r) != 1 || r[0]["courier"] != "a" {
					t.Errorf("got %v, want a's signal_restored", r)
				}
			},
		},
		{
			// Late positions count for latest: a's position at t0+50s, late
			// for both operators, keeps it tracked until wm >= t0+170s.
			name:  "late positions count for latest",
			setup: limit(10, 120_000),
			lines: []string{pos("a", t0, 0, -1), pos("b", t0+140_000, 0, -1), pos("a", t0+50_000, 0, -1), pos("b", t0+199_999, 0, -1), pos("a", t0+200_000, 0.01, -1)},
			check: func(t *testing.T, recs []map[string]any, _ engine.Stats) {
				wantLate(t, recs, "a", "distance", t0+110_000)
				wantLate(t, recs, "a", "session", t0+110_000)
				if r := ofType(recs, "signal_restored"); len(r) != 1 || r[0]["courier"] != "a" {
					t.Errorf("got %v, want a remembered (latest t0+100s) and restored", r)
				}
			},
		},
		{
			// b and a tie on latest t0; c (refused) moves wm to t0+60s, so
			// both are evictable; d evicts a, the smaller id, though b
			// arrived first. b keeps its pending signal_restored; a comes
			// back to a full table and is refused.
			name:  "eviction tie: smallest courier id",
			setup: limit(2, 24*3600_000),
			lines: []string{pos("b", t0, 0, -1), pos("a", t0, 0, -1), pos("c", t0+90_000, 0, -1), pos("d", t0+90_000, 0, -1), pos("b", t0+95_000, 0, -1), pos("a", t0+95_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				wantRejected(t, recs, 3, "courier_limit")
				wantRejected(t, recs, 6, "courier_limit")
				if r := ofType(recs, "signal_restored"); len(r) != 1 || r[0]["courier"] != "b" {
					t.Errorf("got %v, want b's signal_restored (a was evicted)", r)
				}
				if st.Evicted != 1 {
					t.Errorf("got %d evicted, want 1", st.Evicted)
				}
			},
		},
		{
			// gap 2 min keeps a's session open when the window of t0 has
			// fired; the second position at t0 is then late for distance,
			// not a duplicate, and merges: the first stays the latest.
			name:  "session latest position tie: the one accepted first",
			setup: func(c *engine.Config) { c.Gap = 120_000 },
			lines: []string{pos("a", t0, 0, -1), pos("b", t0+90_000, 0, -1), pos("a", t0, 0.5, -1)},
			check: func(t *testing.T, recs []map[string]any, _ engine.Stats) {
				wantLate(t, recs, "a", "distance", t0+60_000)
				r := find(recs, "no_signal", "a", "last_seen_ms", t0)
				if r == nil || fmt.Sprint(r["last_lat"]) != "41" {
					t.Errorf("got %v, want a's no_signal at the first position (lat 41)", r)
				}
			},
		},
		{
			// 5-minute windows: wm t0+200s; a's position at t0+100s belongs
			// to the windows starting t0-180s..t0+60s, of which those
			// starting t0-180s and t0-120s had ended.
			name:  "missed memberships",
			setup: func(c *engine.Config) { c.Size = 300_000 },
			lines: []string{pos("b", t0+230_000, 0, -1), pos("a", t0+100_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				if st.MissedMemberships != 2 {
					t.Errorf("got %d missed memberships, want 2", st.MissedMemberships)
				}
			},
		},
	}
	cases = append(cases, latenessCases()...)
	cases = append(cases, deadZoneCases()...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg()
			if tc.setup != nil {
				tc.setup(&c)
			}
			input := []byte(strings.Join(tc.lines, "\n") + "\n")
			var out bytes.Buffer
			sum, err := Run(c, bytes.NewReader(input), &out)
			if err != nil {
				t.Fatal(err)
			}
			recs, _ := replayRecords(t, c, input)
			tc.check(t, recs, sum.Stats)
			compare(t, tc.name, c, input)
		})
	}
}

// latenessCases are TestReplay_ContractBoundaries's cases of contract §3,
// Allowed lateness: 1-minute windows, wm = max_ts - 30 s, and
// allowed_lateness 60 s unless the case says otherwise.
func latenessCases() []boundaryCase {
	allow := func(l int64) func(*engine.Config) {
		return func(c *engine.Config) { c.AllowedLateness = l }
	}
	revisions := func(recs []map[string]any, courier string) []map[string]any {
		var out []map[string]any
		for _, r := range ofType(recs, "distance") {
			if _, ok := r["revision"]; ok && r["courier"] == courier {
				out = append(out, r)
			}
		}
		return out
	}
	return []boundaryCase{
		{
			// b moves wm to t0+119.999s = end + L - 1 of a's window [t0,
			// t0+60s), which has fired: a's t0+20s still joins it, and it
			// fires again as revision 1, keyed …|t0|1.
			name:  "allowed lateness: wm = end + L - 1 revises",
			setup: allow(60_000),
			lines: []string{pos("a", t0+10_000, 0, -1), pos("b", t0+149_999, 0, -1), pos("a", t0+20_000, 0.001, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				rs := revisions(recs, "a")
				if len(rs) != 1 || num(t, rs[0], "revision") != 1 || num(t, rs[0], "positions") != 2 ||
					rs[0]["key"] != fmt.Sprintf("distance|m|a|%d|1", t0) {
					t.Errorf("got revisions %v, want one of a's window at t0 with 2 positions", rs)
				}
				if r := find(recs, "late", "a", "operator", "distance"); r != nil || st.Revisions != 1 || st.Recovered != 1 {
					t.Errorf("late %v, %d revisions, %d recovered: want not late, 1 and 1", r, st.Revisions, st.Recovered)
				}
			},
		},
		{
			name:  "allowed lateness: wm = end + L is late",
			setup: allow(60_000),
			lines: []string{pos("a", t0+10_000, 0, -1), pos("b", t0+150_000, 0, -1), pos("a", t0+20_000, 0.001, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				wantLate(t, recs, "a", "distance", t0+120_000)
				if rs := revisions(recs, "a"); len(rs) != 0 {
					t.Errorf("got revisions %v, want none", rs)
				}
			},
		},
		{
			// a's first position, at wm t0+90s: its window ended at t0+60s
			// but is within L, so it is created and fires at once, as a
			// first firing (no revision), and no membership is missed.
			name:  "allowed lateness: a window created after its end fires at once",
			setup: allow(60_000),
			lines: []string{pos("b", t0+120_000, 0, -1), pos("a", t0+10_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				if r := find(recs, "distance", "a", "window_start_ms", t0); r == nil || r["revision"] != nil || num(t, r, "positions") != 1 {
					t.Errorf("got %v, want a's window at t0 fired once with 1 position", r)
				}
				if st.MissedMemberships != 0 {
					t.Errorf("got %d missed memberships, want 0", st.MissedMemberships)
				}
				wantLate(t, recs, "a", "session", t0+90_000) // sessions have no allowed lateness
			},
		},
		{
			// a's t0+55s falls between t0+50s and t0+70s: it revises its own
			// window [t0, t0+60s) and [t0+60s, t0+120s), which it is not in,
			// because t0+70s's segment now starts at it (22 m, not 111 m).
			name:  "allowed lateness: a late position revises the window of the next one",
			setup: allow(120_000),
			lines: []string{pos("a", t0+50_000, 0, -1), pos("a", t0+70_000, 0.001, -1), pos("b", t0+160_000, 0, -1), pos("a", t0+55_000, 0.0008, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				first := find(recs, "distance", "a", "window_start_ms", t0+60_000)
				var rev map[string]any
				for _, r := range revisions(recs, "a") {
					if num(t, r, "window_start_ms") == t0+60_000 {
						rev = r
					}
				}
				if first == nil || rev == nil || num(t, rev, "positions") != 1 || metres(t, rev) >= metres(t, first)/4 {
					t.Errorf("window at t0+60s: first %v, revision %v; want a revision with the shorter segment", first, rev)
				}
				if st.Revisions != 2 {
					t.Errorf("got %d revisions, want 2", st.Revisions)
				}
			},
		},
		{
			name:  "allowed lateness: a copy within retention is a duplicate",
			setup: allow(60_000),
			lines: []string{pos("a", t0+10_000, 0, -1), pos("b", t0+149_999, 0, -1), pos("a", t0+10_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				if st.Duplicates != 1 || st.LateDistance != 0 || st.Revisions != 0 {
					t.Errorf("got %d duplicates, %d late, %d revisions; want 1, 0, 0", st.Duplicates, st.LateDistance, st.Revisions)
				}
			},
		},
		{
			name:  "allowed lateness: a copy past retention is late, not a duplicate",
			setup: allow(60_000),
			lines: []string{pos("a", t0+10_000, 0, -1), pos("b", t0+150_000, 0, -1), pos("a", t0+10_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				if st.Duplicates != 0 {
					t.Errorf("got %d duplicates, want 0", st.Duplicates)
				}
				wantLate(t, recs, "a", "distance", t0+120_000)
			},
		},
		{
			// 5-minute windows, L 10 s, wm t0+200s: a's t0+100s belongs to
			// the windows ending t0+120s..t0+360s; the two ended ones are
			// closed for good (end + L <= wm): missed, not recovered.
			name:  "allowed lateness: windows closed for good are missed, not recovered",
			setup: func(c *engine.Config) { c.Size, c.AllowedLateness = 300_000, 10_000 },
			lines: []string{pos("b", t0+230_000, 0, -1), pos("a", t0+100_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				if st.MissedMemberships != 2 || st.Recovered != 0 {
					t.Errorf("got %d missed memberships, %d recovered; want 2, 0", st.MissedMemberships, st.Recovered)
				}
			},
		},
		{
			// The same with L 60 s: the window ending t0+180s is retained,
			// a joins it (recovered), and misses only the one ending t0+120s.
			name:  "allowed lateness: a retained window recovers the position",
			setup: func(c *engine.Config) { c.Size, c.AllowedLateness = 300_000, 60_000 },
			lines: []string{pos("b", t0+230_000, 0, -1), pos("a", t0+100_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				if st.MissedMemberships != 1 || st.Recovered != 1 {
					t.Errorf("got %d missed memberships, %d recovered; want 1, 1", st.MissedMemberships, st.Recovered)
				}
			},
		},
		{
			// One place: a (latest t0) is evictable once wm >= t0 +
			// max(size + L, gap) = t0+120s. c's wm t0+119.999s is short of it
			// (refused); d's, t0+120s, is not.
			name: "allowed lateness: the courier limit waits for size + L",
			setup: func(c *engine.Config) {
				c.AllowedLateness, c.MaxCouriers = 60_000, 1
			},
			lines: []string{pos("a", t0, 0, -1), pos("b", t0+149_999, 0, -1), pos("c", t0+150_000, 0, -1), pos("d", t0+150_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				wantRejected(t, recs, 2, "courier_limit")
				wantRejected(t, recs, 3, "courier_limit")
				if st.Evicted != 1 || len(ofType(recs, "rejected")) != 2 {
					t.Errorf("got %d evicted, %d rejected; want d to evict a", st.Evicted, len(ofType(recs, "rejected")))
				}
			},
		},
		{
			// restore_ttl = size + L: a is forgotten as its last window
			// stops being retained, and comes back afresh.
			name: "allowed lateness: forgotten at restore_ttl = size + L",
			setup: func(c *engine.Config) {
				c.AllowedLateness, c.RestoreTTL = 60_000, 120_000
			},
			lines: []string{pos("a", t0+10_000, 0, -1), pos("b", t0+160_000, 0, -1), pos("a", t0+170_000, 0.001, -1)},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				if r := find(recs, "distance", "a", "window_start_ms", t0+120_000); r == nil || metres(t, r) != 0 {
					t.Errorf("got %v, want a's window at t0+120s without a segment from its forgotten past", r)
				}
			},
		},
	}
}

// metres is a distance record's distance_m.
func metres(t *testing.T, r map[string]any) float64 {
	t.Helper()
	f, err := r["distance_m"].(json.Number).Float64()
	if err != nil {
		t.Fatalf("distance_m of %v: %v", r, err)
	}
	return f
}

// find returns the first record of type typ and courier whose field k
// equals v (v nil: k absent or false).
func find(recs []map[string]any, typ, courier, k string, v any) map[string]any {
	for _, r := range recs {
		if r["type"] != typ || r["courier"] != courier {
			continue
		}
		got, ok := r[k]
		if v == nil && (!ok || got == false) || v != nil && fmt.Sprint(got) == fmt.Sprint(v) {
			return r
		}
	}
	return nil
}

func wantLate(t *testing.T, recs []map[string]any, courier, op string, wm int64) {
	t.Helper()
	r := find(recs, "late", courier, "operator", op)
	if r == nil || num(t, r, "watermark_ms") != wm {
		t.Errorf("got %v, want %s late for %s at watermark %d", r, courier, op, wm)
	}
}

func wantRejected(t *testing.T, recs []map[string]any, line int64, reason string) {
	t.Helper()
	for _, r := range ofType(recs, "rejected") {
		if num(t, r, "line") == line {
			if r["reason"] != reason {
				t.Errorf("line %d rejected as %v, want %s", line, r["reason"], reason)
			}
			return
		}
	}
	t.Errorf("line %d not rejected, want %s", line, reason)
}
