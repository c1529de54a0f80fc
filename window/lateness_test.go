package window

import (
	"math"
	"testing"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/wire"
)

// lateSpec is a one-minute tumbling window allowing two minutes of
// lateness.
func lateSpec() Spec {
	s := NewSpec(minute, minute)
	s.Lateness = 2 * minute
	return s
}

// insert inserts x the way the engine does: advanced to wm first, then
// the fix, then what it revises.
func insert(d *Distance, s Spec, wm int64, x geo.Fix) []Window {
	got := collect(d, s, wm)
	d.Insert(s, geo.Filter{}, x)
	d.Revise(s, x.TS, func(w Window) { got = append(got, w) })
	return got
}

type firing struct {
	start     int64
	positions int
	dist      float64
	revision  int
}

func checkFirings(t *testing.T, what string, got []Window, want []firing) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d firings %+v, want %d", what, len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Start != w.start || g.Positions != w.positions || math.Abs(g.DistanceM-w.dist) > 1e-6 || g.Revision != w.revision {
			t.Errorf("%s: firing %d: got start %d n %d dist %.3f rev %d, want %+v", what, i, g.Start, g.Positions, g.DistanceM, g.Revision, w)
		}
	}
}

func TestLateness_RevisesUntilEndPlusLateness(t *testing.T) {
	s := lateSpec()
	var d Distance
	d.Start(-1)
	insert(&d, s, -1, fixAt(10_000, 0))
	insert(&d, s, -1, fixAt(50_000, 100))
	checkFirings(t, "wm = end", collect(&d, s, minute), []firing{{0, 2, 100, 0}})
	// 30 s arrives after the window fired: 0 → 30 → 100 is still 100 m,
	// but the window now holds 3 positions.
	checkFirings(t, "late fix, wm = end", insert(&d, s, minute, fixAt(30_000, 30)), []firing{{0, 3, 100, 1}})
	// A fix that backtracks changes the distance.
	wm := int64(minute + 2*minute - 1) // end + L - 1: still retained
	if s.Late(20_000, wm) {
		t.Fatalf("wm = end + L - 1: want not late")
	}
	checkFirings(t, "wm = end + L - 1", insert(&d, s, wm, fixAt(20_000, 200)), []firing{{0, 4, 200 + 170 + 70, 2}})
	if !s.Late(40_000, wm+1) {
		t.Fatalf("wm = end + L: want late")
	}
	if got := collect(&d, s, wm+1); len(got) != 0 {
		t.Fatalf("dropping a retained window fires nothing: got %+v", got)
	}
	if !d.Idle() || len(d.kept) != 0 {
		t.Fatalf("at end + L: want nothing retained, got %d fixes %d kept", len(d.fixes), len(d.kept))
	}
}

func TestLateness_WindowCreatedAfterItsEndFiresAtOnce(t *testing.T) {
	s := lateSpec()
	var d Distance
	d.Start(3 * minute) // first seen at wm 3m: [1m,2m) and [2m,3m) have ended, within L
	checkFirings(t, "first fix of an ended window", insert(&d, s, 3*minute, fixAt(90_000, 0)), []firing{{minute, 1, 0, 0}})
	checkFirings(t, "second fix of it", insert(&d, s, 3*minute, fixAt(100_000, 50)), []firing{{minute, 2, 50, 1}})
	// [0,1m) ended at 1m, 1m + L <= 3m: never created.
	if !s.Late(30_000, 3*minute) {
		t.Fatalf("a fix of a window past end + L: want late")
	}
	if got := s.Missed(150_000, 3*minute); got != 0 {
		t.Fatalf("Missed within lateness: got %d, want 0", got)
	}
	if got := s.Missed(30_000, 3*minute+1); got != 1 {
		t.Fatalf("Missed past end + L: got %d, want 1", got)
	}
}

// A late fix changes the segment of the fix after it, which may be in a
// window that does not hold the late fix: that window is revised too, and
// a window whose values come out the same is not.
func TestLateness_RevisesTheSuccessorsWindow(t *testing.T) {
	s := lateSpec()
	s.Lateness = 5 * minute
	var d Distance
	d.Start(-1)
	insert(&d, s, -1, fixAt(50_000, 0))
	insert(&d, s, -1, fixAt(70_000, 100))
	insert(&d, s, -1, fixAt(130_000, 100))
	checkFirings(t, "all fired", collect(&d, s, 3*minute), []firing{{0, 1, 0, 0}, {minute, 1, 100, 0}, {2 * minute, 1, 0, 0}})
	// 55 s at 300 m north: [0,1m) gets 300, 70 s now comes from 300 (200 m).
	checkFirings(t, "detour", insert(&d, s, 3*minute, fixAt(55_000, 300)),
		[]firing{{0, 2, 300, 1}, {minute, 1, 200, 1}})
	// 135 s at the place of 130 s: [2m,3m) holds one more fix, nothing
	// after it changes.
	checkFirings(t, "same place", insert(&d, s, 3*minute, fixAt(135_000, 100)), []firing{{2 * minute, 2, 0, 1}})
	// 60 s, at the place of 55 s: [1m,2m) holds it; 70 s still comes from
	// 300 m north, so nothing else changes.
	checkFirings(t, "into the next", insert(&d, s, 3*minute, fixAt(60_000, 300)), []firing{{minute, 2, 200, 2}})
}

func TestLateness_RetainedWindowsSurviveACheckpoint(t *testing.T) {
	s := lateSpec()
	run := func(d *Distance, restoreAt int) []Window {
		var got []Window
		fixes := []struct {
			wm int64
			x  geo.Fix
		}{{-1, fixAt(10_000, 0)}, {-1, fixAt(50_000, 100)}, {minute, fixAt(30_000, 30)}, {2 * minute, fixAt(20_000, 200)}, {2 * minute, fixAt(70_000, 0)}, {3*minute - 1, fixAt(40_000, 10)}}
		d.Start(-1)
		for i, f := range fixes {
			if i == restoreAt {
				var back Distance
				if err := back.ReadState(s, wire.NewReader(d.AppendState(nil)), true); err != nil {
					t.Fatal(err)
				}
				*d = back
			}
			got = append(got, insert(d, s, f.wm, f.x)...)
		}
		return append(got, collect(d, s, 10*minute)...)
	}
	var plain Distance
	want := run(&plain, -1)
	if len(want) < 5 {
		t.Fatalf("the scenario is meant to revise: got %+v", want)
	}
	for at := 1; at < 6; at++ {
		var d Distance
		got := run(&d, at)
		if len(got) != len(want) {
			t.Fatalf("restored before fix %d: got %d firings, want %d", at, len(got), len(want))
		}
		for i := range want {
			if got[i].Start != want[i].Start || got[i].Revision != want[i].Revision || got[i].Positions != want[i].Positions || got[i].DistanceM != want[i].DistanceM {
				t.Errorf("restored before fix %d: firing %d: got %+v, want %+v", at, i, got[i], want[i])
			}
		}
	}
}
