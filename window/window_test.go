package window

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/wire"
)

const minute = 60_000

// fixAt places fixes on a meridian so that distances are easy to reason
// about: metres north of 41°N.
func fixAt(ts int64, north float64) geo.Fix {
	return geo.Fix{TS: ts, Lat: 41 + north/(geo.EarthRadiusM*math.Pi/180), Lon: 2}
}

func collect(d *Distance, s Spec, wm int64) []Window {
	var got []Window
	d.Advance(s, wm, func(w Window) { got = append(got, w) })
	return got
}

func TestDistance_FiresAtWatermark(t *testing.T) {
	s := NewSpec(minute, minute)
	var d Distance
	d.Start(-1)
	d.Insert(s, geo.Filter{}, fixAt(10_000, 0))
	d.Insert(s, geo.Filter{}, fixAt(50_000, 100))
	if got := collect(&d, s, minute-1); len(got) != 0 {
		t.Fatalf("wm = end-1: got %d windows, want 0", len(got))
	}
	got := collect(&d, s, minute)
	if len(got) != 1 {
		t.Fatalf("wm = end: got %d windows, want 1", len(got))
	}
	w := got[0]
	if w.Start != 0 || w.End != minute || w.Positions != 2 || math.Abs(w.DistanceM-100) > 1e-6 || w.Last.TS != 50_000 {
		t.Fatalf("got %+v, want [0,60000) 2 positions 100 m last 50000", w)
	}
	if got := collect(&d, s, 10*minute); len(got) != 0 {
		t.Fatalf("a window fires once: got %d more", len(got))
	}
	if !d.Idle() {
		t.Fatalf("all windows fired: want idle")
	}
}

func TestDistance_SlidingCountsEachPositionInEveryWindow(t *testing.T) {
	s := NewSpec(3*minute, minute)
	var d Distance
	d.Start(-1)
	d.Insert(s, geo.Filter{}, fixAt(30_000, 0))   // pane 0
	d.Insert(s, geo.Filter{}, fixAt(90_000, 10))  // pane 1, +10
	d.Insert(s, geo.Filter{}, fixAt(150_000, 30)) // pane 2, +20
	got := collect(&d, s, 1_000*minute)
	// Windows ending at 1..5 minutes: [-2,1) [-1,2) [0,3) [1,4) [2,5).
	want := []struct {
		start int64
		n     int
		dist  float64
	}{{-2 * minute, 1, 0}, {-minute, 2, 10}, {0, 3, 30}, {minute, 2, 30}, {2 * minute, 1, 20}}
	if len(got) != len(want) {
		t.Fatalf("got %d windows, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Start != w.start || got[i].Positions != w.n || math.Abs(got[i].DistanceM-w.dist) > 1e-6 {
			t.Errorf("window %d: got start %d n %d dist %.3f, want %d %d %.3f", i, got[i].Start, got[i].Positions, got[i].DistanceM, w.start, w.n, w.dist)
		}
	}
}

func TestDistance_OutOfOrderChangesSuccessorSegment(t *testing.T) {
	s := NewSpec(minute, minute)
	var d Distance
	d.Start(-1)
	d.Insert(s, geo.Filter{}, fixAt(10_000, 0))
	d.Insert(s, geo.Filter{}, fixAt(70_000, 100)) // next pane: segment 100
	// Arrives late, between them, 300 m north: segments become 300 and 200.
	d.Insert(s, geo.Filter{}, fixAt(40_000, 300))
	got := collect(&d, s, 2*minute)
	if len(got) != 2 || math.Abs(got[0].DistanceM-300) > 1e-6 || math.Abs(got[1].DistanceM-200) > 1e-6 {
		t.Fatalf("got %+v, want windows of 300 m and 200 m", got)
	}
}

func TestDistance_NeverCreatedWindow(t *testing.T) {
	// A fix whose earlier windows have already ended joins only the open ones.
	s := NewSpec(2*minute, minute)
	var d Distance
	d.Start(2 * minute)                         // windows ending at or before 2m are gone
	d.Insert(s, geo.Filter{}, fixAt(90_000, 0)) // windows [0,2m) (ended) and [1m,3m)
	got := collect(&d, s, 10*minute)
	if len(got) != 1 || got[0].Start != minute {
		t.Fatalf("got %+v, want only the window starting at 1m", got)
	}
}

func TestDistance_PredecessorSurvivesEviction(t *testing.T) {
	s := NewSpec(minute, minute)
	var d Distance
	d.Start(-1)
	d.Insert(s, geo.Filter{}, fixAt(10_000, 0))
	collect(&d, s, 5*minute) // fires and evicts everything
	d.Insert(s, geo.Filter{}, fixAt(5*minute+1, 50))
	got := collect(&d, s, 6*minute)
	if len(got) != 1 || math.Abs(got[0].DistanceM-50) > 1e-6 {
		t.Fatalf("got %+v, want 50 m from the evicted predecessor", got)
	}
}

func TestSpec_Late(t *testing.T) {
	s := NewSpec(5*minute, minute)
	// The latest window holding 12:00:30 (in minutes: 0.5) ends at 5m.
	if s.Late(30_000, 5*minute-1) {
		t.Errorf("wm one before the last end: want not late")
	}
	if !s.Late(30_000, 5*minute) {
		t.Errorf("wm at the last end: want late")
	}
}

// TestDistance_MatchesNaive inserts random out-of-order fixes and compares
// every fired window with a from-scratch LAG-then-sum computation.
func TestSpec_Missed(t *testing.T) {
	s := NewSpec(5*minute, minute) // a position at 10m joins the windows starting 6m..10m
	ts := int64(10 * minute)
	for _, tt := range []struct {
		wm, want int64
	}{
		{math.MinInt64, 0},
		{ts, 0},
		{11*minute - 1, 0}, // the window [6m, 11m) is still open
		{11 * minute, 1},   // ... now it has ended
		{14 * minute, 4},   // only [10m, 15m) is open
		{15*minute - 1, 4},
		{math.MaxInt64, 5}, // all of them (a late position: the caller does not ask)
	} {
		if got := s.Missed(ts, tt.wm); got != tt.want {
			t.Errorf("Missed(10m, %d) = %d, want %d", tt.wm, got, tt.want)
		}
	}
	// Size 3m, slide 2m: 4.5m is in [2m, 5m) and [4m, 7m).
	if got := NewSpec(3*minute, 2*minute).Missed(9*minute/2, 5*minute); got != 1 {
		t.Errorf("size 3m slide 2m: Missed(4.5m, 5m) = %d, want 1", got)
	}
}

func TestDistance_After(t *testing.T) {
	s := NewSpec(minute, minute)
	var d Distance
	d.Start(math.MinInt64)
	for _, ts := range []int64{10, 30, 20} {
		d.Insert(s, geo.Filter{}, fixAt(ts, 0))
	}
	if got := d.After(10, nil); len(got) != 2 || got[0] != 20 || got[1] != 30 {
		t.Errorf("After(10) = %v, want [20 30]", got)
	}
	if got := d.After(30, nil); got != nil {
		t.Errorf("After(30) = %v, want none", got)
	}
}

func TestDistance_MatchesNaive(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		size := int64(1+r.IntN(5)) * 10_000
		slide := size / int64(1+r.IntN(3))
		if r.IntN(4) == 0 {
			slide = 7_000 // not a divisor of size
			if slide > size {
				slide = size
			}
		}
		s := NewSpec(size, slide)
		f := geo.Filter{}
		if r.IntN(2) == 0 {
			f = geo.Filter{MinMoveM: 20, MaxSpeedKmh: 100}
		}
		// Fixes within ~50 m of each other exercise the filter's anchor,
		// settling and spike rules; ~1 km apart, its moves and jumps.
		spread := 0.01
		if r.IntN(2) == 0 {
			spread = 0.0005
		}
		var d Distance
		d.Start(-1 << 40)
		wm := int64(-1 << 40)
		var accepted []geo.Fix
		type win struct {
			start, end int64
			joined     map[int64]bool
		}
		open := map[int64]*win{}
		var got, want []Window
		for i := 0; i < 300; i++ {
			ts := int64(1_000 + r.IntN(200_000))
			if s.Late(ts, wm) || d.Has(ts) {
				continue
			}
			x := geo.Fix{TS: ts, Lat: 41 + r.Float64()*spread, Lon: 2 + r.Float64()*spread, Acc: float64(r.IntN(30))}
			d.Advance(s, wm, func(w Window) { got = append(got, w) })
			d.Insert(s, f, x)
			accepted = append(accepted, x)
			for st := (ts / slide) * slide; st > ts-size; st -= slide {
				if st+size > wm {
					if open[st] == nil {
						open[st] = &win{start: st, end: st + size, joined: map[int64]bool{}}
					}
					open[st].joined[ts] = true
				}
			}
			if r.IntN(3) == 0 {
				wm += int64(r.IntN(20_000))
				d.Advance(s, wm, func(w Window) { got = append(got, w) })
				// naive firing
				var starts []int64
				for st, w := range open {
					if w.end <= wm {
						starts = append(starts, st)
					}
				}
				sort.Slice(starts, func(a, b int) bool { return starts[a] < starts[b] })
				sorted := append([]geo.Fix(nil), accepted...)
				sort.Slice(sorted, func(a, b int) bool { return sorted[a].TS < sorted[b].TS })
				segs := make([]float64, len(sorted))
				var tr geo.Track
				for k, p := range sorted {
					segs[k] = f.Step(&tr, p)
				}
				for _, st := range starts {
					w := open[st]
					delete(open, st)
					nw := Window{Start: w.start, End: w.end}
					for k, p := range sorted {
						if !w.joined[p.TS] {
							continue
						}
						nw.DistanceM += segs[k]
						if nw.Positions == 0 {
							nw.First = p.TS
						}
						nw.Positions++
						nw.Last = p
					}
					want = append(want, nw)
				}
			}
		}
		if len(got) != len(want) {
			t.Fatalf("seed %d: got %d windows, want %d", seed, len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Start != w.Start || g.End != w.End || g.Positions != w.Positions || g.First != w.First || g.Last != w.Last || math.Abs(g.DistanceM-w.DistanceM) > 1e-6 {
				t.Fatalf("seed %d window %d: got %+v, want %+v", seed, i, g, w)
			}
		}
	}
}

// TestDistance_DensePanesBitExact feeds couriers sending several fixes a
// second, far out of order, so that panes hold hundreds of fixes and
// replays start from marks and stop where the filter's state converges, at
// a mark or at a pane's end; a checkpoint round trip now and then drops
// the segments and marks. Every fired window must equal, bit for bit, the
// reference: the filter stepped over all the accepted fixes in timestamp
// order, each pane's segments added in order, the window's panes added in
// order. With the filter off the state converges one fix after the late
// one and every segment is a distance, so a replay that re-adds a wrong
// segment after converging shows in the windows, not only in the marks.
func TestDistance_DensePanesBitExact(t *testing.T) {
	for seed := uint64(0); seed < 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		s := NewSpec(30_000, 10_000)
		f := geo.Filter{MinMoveM: 15, MaxSpeedKmh: 150}
		if seed%3 == 2 {
			f = geo.Filter{}
		}
		spread := 0.0002 // ~20 m: parked, settled, spikes
		if seed%2 == 1 {
			spread = 0.002 // ~200 m: moves and jumps
		}
		var d Distance
		d.Start(0)
		var accepted []geo.Fix
		var got, want []Window
		newest, wm := int64(0), int64(0)
		advance := func(to int64) {
			if to <= wm {
				return
			}
			d.Advance(s, to, func(w Window) { got = append(got, w) })
			// Reference: windows ending in (wm, to] that hold a fix.
			sorted := slices.Clone(accepted)
			slices.SortFunc(sorted, func(a, b geo.Fix) int { return cmp.Compare(a.TS, b.TS) })
			paneSum := map[int64]float64{}
			var tr geo.Track
			for _, x := range sorted {
				paneSum[s.paneIdx(x.TS)] += f.Step(&tr, x)
			}
			for end := (wm/s.Slide + 1) * s.Slide; end <= to; end += s.Slide {
				w := Window{Start: end - s.Size, End: end}
				for idx := w.Start / s.pane; idx < end/s.pane; idx++ {
					if sum, ok := paneSum[idx]; ok {
						w.DistanceM += sum
					}
				}
				for _, x := range sorted {
					if x.TS >= w.Start && x.TS < end {
						if w.Positions == 0 {
							w.First = x.TS
						}
						w.Positions++
						w.Last = x
					}
				}
				if w.Positions > 0 {
					want = append(want, w)
				}
			}
			wm = to
		}
		for i := 0; i < 3000; i++ {
			ts := int64(i)*20 - int64(r.ExpFloat64()*1500) // 50 a second, ~1.5 s late on average
			newest = max(newest, ts)
			if !s.Late(ts, wm) && !d.Has(ts) && ts >= 0 {
				x := geo.Fix{TS: ts, Lat: 41 + float64(i)*spread/300 + r.NormFloat64()*spread, Lon: 2 + r.NormFloat64()*spread, Acc: float64(r.IntN(20))}
				d.Insert(s, f, x)
				accepted = append(accepted, x)
			}
			if i%50 == 0 {
				advance(newest - 5_000)
				// Marks are kept for retained fixes only, at most one per
				// markEvery of a pane's fixes.
				if limit := len(d.fixes)/markEvery + len(d.panes); len(d.marks) > limit {
					t.Fatalf("seed %d: %d marks for %d fixes in %d panes", seed, len(d.marks), len(d.fixes), len(d.panes))
				}
				if len(d.marks) > 0 && d.marks[0].ts < d.fixes[0].ts() {
					t.Fatalf("seed %d: a mark at %d before the first retained fix %d", seed, d.marks[0].ts, d.fixes[0].ts())
				}
				checkCaches(t, &d, s, f)
			}
			if i%700 == 0 {
				var back Distance
				if err := back.ReadState(s, wire.NewReader(d.AppendState(nil)), true); err != nil {
					t.Fatal(err)
				}
				d = back
			}
		}
		if len(got) != len(want) || len(want) == 0 {
			t.Fatalf("seed %d: got %d windows, want %d", seed, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("seed %d window %d: got %+v, want %+v (bit for bit)", seed, i, got[i], want[i])
			}
		}
	}
}

// TestDistance_ReplayStopsWhereStateConverges parks a courier sending 50
// fixes a second: once it has settled, a late fix at its spot leaves the
// filter's state as it was, and the replay must stop at the first mark
// after it and re-add the stored segments from there, not step the filter
// to the pane's end. A poisoned segment after that mark tells which.
func TestDistance_ReplayStopsWhereStateConverges(t *testing.T) {
	s := NewSpec(minute, minute)
	f := geo.Filter{MinMoveM: 15, MaxSpeedKmh: 150}
	var d Distance
	d.Start(0)
	for i := range 1000 {
		d.Insert(s, f, fixAt(int64(i)*20, 0))
	}
	last := len(d.segs) - 1
	d.segs[last] = 1 // stepped, it is 0
	d.Insert(s, f, fixAt(10_010, 0))
	if d.panes[0].sum != 1 {
		t.Fatalf("pane sum %v, want 1: the replay stepped past the mark where the state converged", d.panes[0].sum)
	}
	d.segs[last+1] = 0 // the late fix moved the poisoned one on
	checkCaches(t, &d, s, f)
}

// checkCaches requires every segment and every mark to be what a replay
// from its pane's start gives at its fix, bit for bit, and the marks to be
// in timestamp order. A sparse courier has neither.
func checkCaches(t *testing.T, d *Distance, s Spec, f geo.Filter) {
	t.Helper()
	if !d.dense && (d.segs != nil || len(d.marks) > 0) {
		t.Fatalf("sparse, with %d segments and %d marks", len(d.segs), len(d.marks))
	}
	if d.dense {
		if len(d.segs) != len(d.fixes) {
			t.Fatalf("%d segments for %d fixes", len(d.segs), len(d.fixes))
		}
		i := 0
		for p := range d.panes {
			st := d.stateBefore(p)
			for range d.panes[p].n {
				if seg := f.Step(&st, d.fixes[i].unpack()); math.Float64bits(seg) != math.Float64bits(d.segs[i]) {
					t.Fatalf("segment of the fix at %d: got %v, want %v", d.fixes[i].ts(), d.segs[i], seg)
				}
				i++
			}
		}
	}
	for p, i := 0, 0; d.segs != nil && p < len(d.panes); p++ {
		// Gaps of markEvery to 2*markEvery fixes, and fewer after the last
		// mark: a replay steps through at most one gap before it reaches its
		// fix and one after it before it can stop.
		k := int32(0)
		for ; i < len(d.marks) && s.paneIdx(d.marks[i].ts) == d.panes[p].idx; i++ {
			if gap := d.marks[i].k - k; gap < markEvery || gap > 2*markEvery {
				t.Fatalf("mark at %d: %d fixes after the one before", d.marks[i].ts, gap)
			}
			k = d.marks[i].k
		}
		if d.panes[p].n-k >= markEvery {
			t.Fatalf("pane %d: %d fixes after its last mark", d.panes[p].idx, d.panes[p].n-k)
		}
	}
	for i, m := range d.marks {
		if i > 0 && m.ts <= d.marks[i-1].ts {
			t.Fatalf("marks out of order: %d after %d", m.ts, d.marks[i-1].ts)
		}
		p := slices.IndexFunc(d.panes, func(pn pane) bool { return pn.idx == s.paneIdx(m.ts) })
		if p < 0 || !d.Has(m.ts) {
			t.Fatalf("mark at %d: no such retained fix", m.ts)
		}
		st, sum, k := d.stateBefore(p), 0.0, int32(0)
		for _, x := range d.fixes[d.search(d.panes[p].idx*s.pane):d.search(m.ts+1)] {
			sum += f.Step(&st, x.unpack())
			k++
		}
		if k != m.k || sum != m.sum || !st.Same(&m.st) {
			t.Fatalf("mark at %d: got k %d sum %v, want k %d sum %v (or its state differs)", m.ts, m.k, m.sum, k, sum)
		}
	}
}
