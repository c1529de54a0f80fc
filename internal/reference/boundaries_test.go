package reference

import (
	"fmt"
	"testing"
)

type boundaryCase struct {
	name   string
	params func() Params
	lines  []string
	types  []string // record types compared; others are ignored
	want   []map[string]any
}

func runBoundaryCases(t *testing.T, cases []boundaryCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ofTypes(runLines(tc.params(), tc.lines...), tc.types...)
			compareRecords(t, got, tc.want)
		})
	}
}

func TestRun_SessionGap(t *testing.T) {
	runBoundaryCases(t, []boundaryCase{
		{
			// 660000 <= last + gap = 660000: touches, merges.
			name:   "silence of exactly gap is one session",
			params: baseParams,
			lines:  []string{posAt("c", 600000, ptA, 1000), posAt("c", 660000, ptA, 2000)},
			types:  []string{"no_signal", "signal_restored"},
			want:   []map[string]any{noSigRec("c", 600000, 660000, ptA, 2000, true)},
		},
		{
			// 660001 > 660000: a new session; its watermark 660001 >= 660000
			// closes the first, and the new one is already open.
			name:   "silence of gap+1 ms splits",
			params: baseParams,
			lines:  []string{posAt("c", 600000, ptA, 600000), posAt("c", 660001, ptB, 660001), tick(670000)},
			types:  []string{"no_signal", "signal_restored"},
			want: []map[string]any{
				noSigRec("c", 600000, 600000, ptA, 660001, false),
				restoredRec("c", 600000, 660001, 660001),
				noSigRec("c", 660001, 660001, ptB, 670000, true),
			},
		},
	})
}

func TestRun_WindowFiring(t *testing.T) {
	runBoundaryCases(t, []boundaryCase{
		{
			// wm 659999 after line 2 (< end 660000), 660000 after line 3.
			name:   "window fires exactly when wm reaches its end",
			params: baseParams,
			lines: []string{
				posAt("c", 600000, ptA, 600100), posAt("c", 659999, ptB, 660200),
				posAt("c", 660000, ptC, 660300), tick(660400),
			},
			types: []string{"distance"},
			want: []map[string]any{
				distRec("c", 600000, 660000, testHaversine(ptA, ptB), 2, ptB, 660300),
				distRec("c", 660000, 720000, testHaversine(ptB, ptC), 1, ptC, 660400),
			},
		},
		{
			// size 5 min, slide 1 min. Line 1 (wm -inf) joins starts
			// 360000..600000. Line 2 (wm 600000) joins 540000..780000; its
			// watermark 800000 fires the windows ending 660000, 720000, 780000.
			// Line 3 (ts 700000, wm 800000) joins 540000, 600000, 660000.
			name: "sliding windows hold what joined them",
			params: func() Params {
				p := baseParams()
				p.SizeMs = 300000
				return p
			},
			lines: []string{pos("c", 600000, ptA), pos("c", 800000, ptA), pos("c", 700000, ptA)},
			types: []string{"distance", "late"},
			want: []map[string]any{
				distRec("c", 360000, 660000, 0, 1, ptA, 0),
				distRec("c", 420000, 720000, 0, 1, ptA, 0),
				distRec("c", 480000, 780000, 0, 1, ptA, 0),
				distRec("c", 540000, 840000, 0, 3, ptA, 0),
				distRec("c", 600000, 900000, 0, 3, ptA, 0),
				distRec("c", 660000, 960000, 0, 2, ptA, 0),
				distRec("c", 720000, 1020000, 0, 1, ptA, 0),
				distRec("c", 780000, 1080000, 0, 1, ptA, 0),
				// 700000 + gap <= 800000 and the open session [800000] is
				// not touched: late for sessions only.
				lateRec("c", 700000, "session", 800000, 0),
			},
		},
	})
}

func TestRun_Lateness(t *testing.T) {
	runBoundaryCases(t, []boundaryCase{
		{
			// Session chain 600000..740000 stays open (wm 740000 < 800000).
			// 610000: wm >= 610000 + gap, but it touches the open session,
			// so it merges; its window [600000, 660000) has fired: late for
			// distance. The fired window keeps its 2 positions.
			name:   "merge-then-check: old position inside an open session",
			params: baseParams,
			lines: []string{
				pos("c", 600000, ptA), pos("c", 650000, ptB), pos("c", 700000, ptC),
				pos("c", 740000, ptD), pos("c", 610000, ptE),
			},
			types: []string{"late", "no_signal"},
			want: []map[string]any{
				lateRec("c", 610000, "distance", 740000, 0),
				noSigRec("c", 600000, 740000, ptD, 0, true),
			},
		},
		{
			name:   "fired window keeps its positions when a late one arrives",
			params: baseParams,
			lines: []string{
				pos("c", 600000, ptA), pos("c", 650000, ptB), pos("c", 700000, ptC),
				pos("c", 740000, ptD), pos("c", 610000, ptE),
			},
			types: []string{"distance"},
			want: []map[string]any{
				distRec("c", 600000, 660000, testHaversine(ptA, ptB), 2, ptB, 0),
				distRec("c", 660000, 720000, testHaversine(ptB, ptC), 1, ptC, 0),
				distRec("c", 720000, 780000, testHaversine(ptC, ptD), 1, ptD, 0),
			},
		},
		{
			// wm 800000; 600001 touches neither window (ends 660000) nor the
			// open session [800000, 860000).
			name:   "late for both operators",
			params: baseParams,
			lines:  []string{pos("c", 600000, ptA), pos("c", 800000, ptA), posAt("c", 600001, ptA, 5)},
			types:  []string{"late"},
			want: []map[string]any{
				lateRec("c", 600001, "distance", 800000, 5),
				lateRec("c", 600001, "session", 800000, 5),
			},
		},
	})
}

func TestRun_SignalRestored(t *testing.T) {
	runBoundaryCases(t, []boundaryCase{
		{
			// Delay 1000 s keeps both sessions of c open until d's position
			// (wm 700000) closes the first (end 660000) but not the second
			// (end 760000): restored at once.
			name: "next session already has positions",
			params: func() Params {
				p := baseParams()
				p.DelayMs = 1_000_000
				return p
			},
			lines: []string{
				posAt("c", 600000, ptA, 1_000_000), posAt("c", 700000, ptB, 1_100_000),
				posAt("d", 1_700_000, ptC, 1_700_000), tick(1_800_000),
			},
			types: []string{"no_signal", "signal_restored"},
			want: []map[string]any{
				noSigRec("c", 600000, 600000, ptA, 1_700_000, false),
				restoredRec("c", 600000, 700000, 1_700_000),
				noSigRec("c", 700000, 700000, ptB, 1_800_000, true),
				noSigRec("d", 1_700_000, 1_700_000, ptC, 1_800_000, true),
			},
		},
		{
			// d moves wm to 700000: c's session closes with nothing after it;
			// c's next position (not late: 710000 + gap > 700000) restores.
			name:   "restored when the next session's first position arrives",
			params: baseParams,
			lines: []string{
				posAt("c", 600000, ptA, 600000), posAt("d", 700000, ptC, 700000),
				posAt("c", 710000, ptB, 710000), tick(720000),
			},
			types: []string{"no_signal", "signal_restored"},
			want: []map[string]any{
				noSigRec("c", 600000, 600000, ptA, 700000, false),
				restoredRec("c", 600000, 710000, 710000),
				noSigRec("c", 710000, 710000, ptB, 720000, true),
				noSigRec("d", 700000, 700000, ptC, 720000, true),
			},
		},
	})
}

// TestRun_Forgetting: c is silent from 600000; d moves wm to 1000000. c is
// forgotten when 1000000 >= 600000 + RestoreTTLMs; then its position at
// 1010000 is a first position (no segment) and restores nothing.
func TestRun_Forgetting(t *testing.T) {
	withTTL := func(ttl int64) func() Params {
		return func() Params {
			p := baseParams()
			p.RestoreTTLMs = ttl
			return p
		}
	}
	lines := []string{pos("c", 600000, ptA), pos("d", 1_000_000, ptA), pos("c", 1_010_000, ptB)}
	common := []map[string]any{
		distRec("c", 600000, 660000, 0, 1, ptA, 0),
		distRec("d", 960000, 1_020_000, 0, 1, ptA, 0),
	}
	forgotten := append([]map[string]any{distRec("c", 960000, 1_020_000, 0, 1, ptB, 0)}, common...)
	remembered := append([]map[string]any{
		distRec("c", 960000, 1_020_000, testHaversine(ptA, ptB), 1, ptB, 0),
		restoredRec("c", 600000, 1_010_000, 0),
	}, common...)
	runBoundaryCases(t, []boundaryCase{
		{name: "ttl 300 s: forgotten", params: withTTL(300_000), lines: lines,
			types: []string{"distance", "signal_restored"}, want: forgotten},
		{name: "ttl exactly reached: forgotten", params: withTTL(400_000), lines: lines,
			types: []string{"distance", "signal_restored"}, want: forgotten},
		{name: "ttl 1 ms short: remembered", params: withTTL(400_001), lines: lines,
			types: []string{"distance", "signal_restored"}, want: remembered},
	})
}

func TestRun_IdleAdvance(t *testing.T) {
	fleetParams := func(idle int64) func() Params {
		return func() Params {
			p := baseParams()
			p.SizeMs, p.SlideMs, p.GapMs, p.DelayMs = 300000, 60000, 180000, 45000
			p.IdleTimeoutMs = idle
			return p
		}
	}
	// c1 at 600000 (arrived 600000), c2 at 610000 (arrived 610000), then only
	// clock ticks. Idle wm = 610000 + (tau - 610000) - 45000 = tau - 45000.
	// tick 830000: 830000 >= 610000 + 30000, wm 785000 >= 780000 closes c1
	// (c2 needs 790000). tick 835000: < 830000 + 30000, no advance.
	// tick 865000: exactly 835000 + 30000, wm 820000 closes c2.
	silentFleet := []string{
		posAt("c1", 600000, ptA, 600000), posAt("c2", 610000, ptB, 610000),
		tick(830000), tick(835000), tick(865000),
	}
	runBoundaryCases(t, []boundaryCase{
		{
			name: "silent fleet gets its warnings", params: fleetParams(30000), lines: silentFleet,
			types: []string{"no_signal"},
			want: []map[string]any{
				noSigRec("c1", 600000, 600000, ptA, 830000, false),
				noSigRec("c2", 610000, 610000, ptB, 865000, false),
			},
		},
		{
			// Windows ending at or before 785000 fire at 830000; the tick at
			// 835000 moves nothing, so the rest fire at the end, at 835000.
			name: "idle advance fires windows", params: fleetParams(30000),
			lines: silentFleet[:4],
			types: []string{"distance"},
			want: []map[string]any{
				distRec("c1", 360000, 660000, 0, 1, ptA, 830000),
				distRec("c1", 420000, 720000, 0, 1, ptA, 830000),
				distRec("c1", 480000, 780000, 0, 1, ptA, 830000),
				distRec("c2", 360000, 660000, 0, 1, ptB, 830000),
				distRec("c2", 420000, 720000, 0, 1, ptB, 830000),
				distRec("c2", 480000, 780000, 0, 1, ptB, 830000),
				distRec("c1", 540000, 840000, 0, 1, ptA, 835000),
				distRec("c1", 600000, 900000, 0, 1, ptA, 835000),
				distRec("c2", 540000, 840000, 0, 1, ptB, 835000),
				distRec("c2", 600000, 900000, 0, 1, ptB, 835000),
			},
		},
		{
			// Gap 1000 s. The tick at 1000000 idles wm to 1000000. d at 700000
			// is then late for distance but becomes max_ts, arriving 1000001.
			// Tick 1900000: wm = 700000 + 899999 = 1599999, below c's session
			// end 1600000. (Had max_ts stayed 600000/600000, wm would be
			// 1900000 and both sessions would close there.) Tick 1900001 is
			// too soon for another advance; both close at the end.
			name: "a late position still becomes max_ts with its arrival",
			params: func() Params {
				p := baseParams()
				p.GapMs, p.IdleTimeoutMs = 1_000_000, 10_000
				return p
			},
			lines: []string{
				posAt("c", 600000, ptA, 600000), tick(1_000_000), posAt("d", 700000, ptB, 1_000_001),
				tick(1_900_000), tick(1_900_001),
			},
			types: []string{"no_signal", "late"},
			want: []map[string]any{
				lateRec("d", 700000, "distance", 1_000_000, 1_000_001),
				noSigRec("c", 600000, 600000, ptA, 1_900_001, true),
				noSigRec("d", 700000, 700000, ptB, 1_900_001, true),
			},
		},
		{
			name: "idle rule off", params: fleetParams(0), lines: silentFleet,
			types: []string{"no_signal"},
			want: []map[string]any{
				noSigRec("c1", 600000, 600000, ptA, 865000, true),
				noSigRec("c2", 610000, 610000, ptB, 865000, true),
			},
		},
		{
			// The newest position had no clock: arrival_of(max_ts) unknown.
			name: "no idle advance without the newest position's arrival", params: fleetParams(30000),
			lines: []string{pos("c1", 600000, ptA), tick(10_000_000), tick(20_000_000)},
			types: []string{"no_signal"},
			want:  []map[string]any{noSigRec("c1", 600000, 600000, ptA, 20_000_000, true)},
		},
	})
}

func TestRun_FutureSkew(t *testing.T) {
	skew := func() Params {
		p := baseParams()
		p.FutureSkewMs = 60000
		return p
	}
	runBoundaryCases(t, []boundaryCase{
		{
			name: "exactly skew ahead is accepted", params: skew,
			lines: []string{posAt("c", 1_060_000, ptA, 1_000_000)},
			types: []string{"rejected", "no_signal"},
			want:  []map[string]any{noSigRec("c", 1_060_000, 1_060_000, ptA, 1_000_000, true)},
		},
		{
			name: "1 ms more is rejected", params: skew,
			lines: []string{posAt("c", 1_060_001, ptA, 1_000_000)},
			types: []string{"rejected", "no_signal"},
			want:  []map[string]any{rejRec(1, "future_timestamp", posAt("c", 1_060_001, ptA, 1_000_000), 1_000_000)},
		},
		{
			name: "a line without arrival_ms uses the current clock", params: skew,
			lines: []string{tick(1_000_000), pos("c", 1_060_001, ptA)},
			types: []string{"rejected"},
			want: []map[string]any{
				missRec(1, "courier", tick(1_000_000), 1_000_000),
				rejRec(2, "future_timestamp", pos("c", 1_060_001, ptA), 1_000_000),
			},
		},
		{
			name: "the clock is read from a line rejected for another reason", params: skew,
			lines: []string{
				`{"arrival_ms":1000000,"courier":"bad courier","lat":0,"lon":0,"timestamp_ms":1}`,
				pos("c", 1_060_001, ptA),
			},
			types: []string{"rejected"},
			want: []map[string]any{
				rejRec(1, "bad_courier", `{"arrival_ms":1000000,"courier":"bad courier","lat":0,"lon":0,"timestamp_ms":1}`, 1_000_000),
				rejRec(2, "future_timestamp", pos("c", 1_060_001, ptA), 1_000_000),
			},
		},
		{
			name: "the clock may go backwards", params: skew,
			lines: []string{tick(5_000_000), posAt("c", 1_060_001, ptA, 1_000_000)},
			types: []string{"rejected"},
			want: []map[string]any{
				missRec(1, "courier", tick(5_000_000), 5_000_000),
				rejRec(2, "future_timestamp", posAt("c", 1_060_001, ptA, 1_000_000), 1_000_000),
			},
		},
		{
			name: "no future check before any clock", params: skew,
			lines: []string{pos("c", 253402300799999, ptA)},
			types: []string{"rejected", "no_signal"},
			want:  []map[string]any{noSigRec("c", 253402300799999, 253402300799999, ptA, 0, true)},
		},
		{
			// arrival_ms 1.5 is not an integer literal: the clock stays.
			name: "a non-integer arrival_ms is not read", params: skew,
			lines: []string{tick(1_000_000), `{"courier":"c","lat":0,"lon":0,"timestamp_ms":1060001,"arrival_ms":1.5}`},
			types: []string{"rejected"},
			want: []map[string]any{
				missRec(1, "courier", tick(1_000_000), 1_000_000),
				rejRec(2, "future_timestamp", `{"courier":"c","lat":0,"lon":0,"timestamp_ms":1060001,"arrival_ms":1.5}`, 1_000_000),
			},
		},
	})
}

func TestRun_Duplicates(t *testing.T) {
	runBoundaryCases(t, []boundaryCase{
		{
			name: "copy while its window is unfired is ignored", params: baseParams,
			lines: []string{pos("c", 600000, ptA), pos("c", 600000, ptB)},
			types: []string{"distance", "late", "no_signal"},
			want: []map[string]any{
				distRec("c", 600000, 660000, 0, 1, ptA, 0),
				noSigRec("c", 600000, 600000, ptA, 0, true),
			},
		},
		{
			// wm 659999 < 660000: still a duplicate.
			name: "copy 1 ms before the window fires is ignored", params: baseParams,
			lines: []string{pos("c", 600000, ptA), pos("c", 659999, ptB), pos("c", 600000, ptC)},
			types: []string{"distance", "late", "no_signal"},
			want: []map[string]any{
				distRec("c", 600000, 660000, testHaversine(ptA, ptB), 2, ptB, 0),
				noSigRec("c", 600000, 659999, ptB, 0, true),
			},
		},
		{
			// wm 660000: not a duplicate; late for distance; it merges into
			// the open session, whose latest position stays 660000.
			name: "copy after its window fired is late for distance", params: baseParams,
			lines: []string{pos("c", 600000, ptA), pos("c", 660000, ptB), pos("c", 600000, ptC)},
			types: []string{"distance", "late", "no_signal"},
			want: []map[string]any{
				distRec("c", 600000, 660000, 0, 1, ptA, 0),
				distRec("c", 660000, 720000, testHaversine(ptA, ptB), 1, ptB, 0),
				lateRec("c", 600000, "distance", 660000, 0),
				noSigRec("c", 600000, 660000, ptB, 0, true),
			},
		},
		{
			name: "same timestamp of another courier is not a duplicate", params: baseParams,
			lines: []string{pos("c", 600000, ptA), pos("d", 600000, ptB)},
			types: []string{"distance"},
			want: []map[string]any{
				distRec("c", 600000, 660000, 0, 1, ptA, 0),
				distRec("d", 600000, 660000, 0, 1, ptB, 0),
			},
		},
		{
			// A rejected copy is not valid, so it does not make the next
			// identical position a duplicate.
			name: "an earlier rejected line is not an original", params: baseParams,
			lines: []string{`{"courier":"c","lat":91,"lon":0,"timestamp_ms":600000}`, pos("c", 600000, ptA)},
			types: []string{"distance"},
			want:  []map[string]any{distRec("c", 600000, 660000, 0, 1, ptA, 0)},
		},
	})
}

func TestRun_DistanceFilters(t *testing.T) {
	// A, a point ~20 m north and one ~40 m north, 20 s apart: ~3.6 km/h.
	north := [2]float64{ptA[0] + 0.00018, ptA[1]}
	north2 := [2]float64{ptA[0] + 0.00036, ptA[1]}
	east := [2]float64{ptA[0], ptA[1] + 0.0012} // ~100 m east: a spike
	d1, d2 := testHaversine(ptA, north), testHaversine(north, north2)
	if d1 < 15 || d1 > 25 || d2 < 15 || d2 > 25 {
		t.Fatalf("test setup: got %v and %v m, want about 20", d1, d2)
	}
	line := func(ts int64, p [2]float64, acc string) string {
		if acc == "" {
			return pos("c", ts, p)
		}
		return fmt.Sprintf(`{"courier":"c","lat":%v,"lon":%v,"timestamp_ms":%d,"accuracy_m":%s}`, p[0], p[1], ts, acc)
	}
	cases := []struct {
		name              string
		minMove, maxSpeed float64
		mid               [2]float64 // the second fix; north when zero
		acc               string     // the second fix's accuracy_m
		want              float64
	}{
		{name: "filters off", want: d1 + d2},
		{name: "filters off: a spike counts", mid: east, want: testHaversine(ptA, east) + testHaversine(east, north2)},
		{name: "a move out of min_move counts once the next fix confirms it", minMove: 10, want: d1},
		{name: "a move within min_move is jitter", minMove: 25, want: 0},
		{name: "a move within the fix's accuracy is jitter", minMove: 10, acc: "30", want: 0},
		{name: "string accuracy ignored", minMove: 10, acc: `"30"`, want: d1},
		{name: "negative accuracy ignored", minMove: 10, acc: "-30", want: d1},
		{name: "accuracy ignored with min_move off", acc: "30", want: d1 + d2},
		{name: "a spike is dropped", minMove: 10, mid: east, want: 0},
		{name: "speed above max is an outlier", maxSpeed: 3, want: 0},
		{name: "speed below max counts", maxSpeed: 4, want: d1 + d2},
		{name: "a confirmed move above max speed is a jump", minMove: 10, maxSpeed: 3, want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := baseParams()
			p.MinMoveM, p.MaxSpeedKmh = tc.minMove, tc.maxSpeed
			mid := tc.mid
			if mid == ([2]float64{}) {
				mid = north
			}
			got := ofTypes(runLines(p, line(600000, ptA, ""), line(620000, mid, tc.acc), line(640000, north2, "")), "distance")
			compareRecords(t, got, []map[string]any{distRec("c", 600000, 660000, tc.want, 3, north2, 0)})
		})
	}
}

// TestRun_DistanceEvidence: with a filter on, a window whose fixes span
// less than half of it does not claim stopped; with the filters off,
// stopped is the contract's distance_m < stopped_below_m.
func TestRun_DistanceEvidence(t *testing.T) {
	for _, tc := range []struct {
		name     string
		minMove  float64
		last     int64 // the second fix's timestamp
		evidence bool
	}{
		{"filters off, one end of the window", 0, 610000, true},
		{"filter on, half the window", 10, 630000, true},
		{"filter on, less than half", 10, 629999, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := baseParams()
			p.MinMoveM = tc.minMove
			got := ofTypes(runLines(p, pos("c", 600000, ptA), pos("c", tc.last, ptA)), "distance")
			want := distRec("c", 600000, 660000, 0, 2, ptA, 0)
			if !tc.evidence {
				want["stopped"] = false
				want["insufficient_evidence"] = true
			}
			compareRecords(t, got, []map[string]any{want})
		})
	}
}
