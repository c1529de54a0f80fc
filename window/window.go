// Package window holds one courier's sliding event-time distance windows
// (contract §3): windows [start, start+Size) with start a multiple of Slide,
// fired when the watermark reaches their end, and then, under allowed
// lateness, retained until the watermark reaches end + Lateness and fired
// again (a revision) whenever a late fix changes them.
//
// State is kept in panes of gcd(Size, Slide) milliseconds, the way Flink
// slices sliding windows: a position updates one pane, and a window is the
// sum of its panes when it fires, so the work per position does not grow
// with Size/Slide. The fixes themselves are kept only while they can still
// change an unfired window — an out-of-order fix changes the distance
// filter's path after it — plus the filter's state after the fixes dropped.
package window

import (
	"math"
	"slices"
	"sort"
	"unsafe"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/tmath"
)

// Window is a fired window of one courier.
type Window struct {
	Start, End int64
	DistanceM  float64
	Positions  int
	First      int64   // the timestamp of the window's earliest fix
	Last       geo.Fix // the window's fix with the largest timestamp
	// Revision is 0 for the window's first firing and n for its n-th
	// re-firing (allowed lateness).
	Revision int
	// Memo, under allowed lateness, is the caller's note kept with the
	// window while it is retained, from one firing to the next; nil
	// without lateness. Valid during the call only.
	Memo *Memo
}

// Memo is what a caller keeps with a retained window between its firings:
// the engine keeps the H3 cell of the window's last fix there (Value),
// with that fix's timestamp (TS), so that a revision that did not change
// the window's last fix does not look the cell up again. A cache: a
// checkpoint does not keep it.
type Memo struct {
	TS    int64
	Value uint64
}

// retainedWindow is a fired window that late fixes can still change (its
// end + Lateness is after the watermark), as it last fired.
type retainedWindow struct {
	end  int64
	dist float64
	n    int32
	rev  int32
	memo Memo
}

// Sparse reports whether the window's fixes span less than half of it: too
// little evidence to say the courier stood still (a single fix, or fixes
// at one end of the window).
func (w Window) Sparse() bool { return 2*(w.Last.TS-w.First) < w.End-w.Start }

type pane struct {
	idx int64   // pane start = idx * Spec.pane
	sum float64 // segments of the pane's fixes
	n   int32
	end geo.Track // the filter's state after the pane's last fix
}

// A mark is the filter's state and its pane's running sum after one of the
// pane's fixes, kept every markEvery to 2*markEvery fixes of a pane, so that
// an out-of-order fix replays the filter from the mark before it rather than
// from its pane's start: a courier sending many fixes a second has
// thousands in a pane, and replaying them all for each late arrival made
// its cost quadratic. The sum continues the same additions in the same
// order, so the result is bit for bit what a replay from the pane's start
// gives. The marks after the fix are where the replay can stop (see
// replay). Marks are a cache: checkpoints do not keep them (see rebuild).
//
// A mark stays at its fix (an insert before it adds one to its k) rather
// than moving to every markEvery-th fix: its old state is what a replay
// compares its new one with at that fix, and once they are the same, the
// marks after it keep their states too.
type mark struct {
	ts  int64 // the fix's timestamp
	k   int32 // the pane's fixes up to and including it
	sum float64
	st  geo.Track
}

// markEvery bounds how many fixes a replay steps through before it reaches
// the fix it replays for, and after it before it can stop at a mark. 16
// rather than 32 takes 15 % off a hot courier's arrivals (BenchmarkInsertHot)
// for 3 to 6 bytes a fix (a mark is 96); 8 gains 2 % more. A pane with
// fewer fixes (a courier sending every 5 s has 12 with the default
// one-minute slide) has no marks.
const markEvery = 16

// Distance is one courier's distance state. Its zero value is not ready:
// call Start first.
//
// The filter (geo.Filter.Step) is stateful: a fix's segment depends on the
// fixes before it. Each pane keeps the filter's state after its last fix,
// and base is the state after the fixes already dropped, so an in-order fix
// costs one step from the newest pane's state, and an out-of-order fix
// replays the filter from its pane's predecessor onwards: every pane it can
// change holds a fix of an unfired window (see evict).
type Distance struct {
	fixes []fix // by timestamp; fixes that can still change an unfired or retained window
	// segs[i] is the segment fixes[i] adds. A slice of its own rather than
	// a field of each fix: a replay whose filter state has converged only
	// re-adds segments, and reads 8 bytes a fix instead of 40. It is only
	// read from a mark on (see resum), so it is kept, like the marks, only
	// for a dense courier: one with a pane of markEvery fixes or more
	// (rebuild makes it so). A sparse one (a fix every few seconds) has
	// neither: 8 bytes a fix, a fifth of its retained memory. Both are a
	// cache: a checkpoint keeps neither.
	segs  []float64
	dense bool             // segs and marks are kept
	base  geo.Track        // the filter's state after the fixes dropped from fixes
	panes []pane           // by idx; one per pane holding a retained fix
	marks []mark           // by ts; in panes of markEvery fixes or more
	fired int64            // every window ending at or before fired has been handled
	kept  []retainedWindow // by end; only with Spec.Lateness > 0
	since since            // what changed since the last checkpoint (AppendDelta)
}

// since is how a Distance differs from itself at its last checkpoint, so
// that a checkpoint writes a courier's new fixes rather than all of them
// (AppendDelta). fixes[:from] are that checkpoint's fixes from dropped
// on, unchanged, and so are the panes before fixes[from]'s; the rest is
// new. from 0 is the whole state (a courier new since, or one whose
// unchanged fixes were all dropped).
type since struct {
	dropped, from int32
}

// Start readies d for a courier first seen at watermark wm: windows that
// ended at or before wm are never created.
func (d *Distance) Start(wm int64) { *d = Distance{fired: wm} }

// Has reports whether a retained fix has timestamp ts. Every accepted fix
// that is not late is retained, so this is the duplicate check of contract §2.
func (d *Distance) Has(ts int64) bool {
	i := d.search(ts)
	return i < len(d.fixes) && d.fixes[i].ts() == ts
}

// After appends to dst the timestamps of the retained fixes above ts.
func (d *Distance) After(ts int64, dst []int64) []int64 {
	for i := d.search(tmath.Add(ts, 1)); i < len(d.fixes); i++ {
		dst = append(dst, d.fixes[i].ts())
	}
	return dst
}

// search returns the index of the first retained fix with TS >= ts.
func (d *Distance) search(ts int64) int {
	n := len(d.fixes)
	if n == 0 || d.fixes[n-1].ts() < ts { // in-order arrival: the common case
		return n
	}
	return sort.Search(n, func(i int) bool { return d.fixes[i].ts() >= ts })
}

// Idle reports whether no window holding a fix of this courier is unfired
// or retained.
func (d *Distance) Idle() bool { return len(d.panes) == 0 }

// Insert adds a fix that is not late and not a duplicate (see Has).
// The caller has advanced d to the current watermark first. x.TS + Size
// must fit in an int64, so that every window holding it has a real end,
// and x.TS be in the contract's range (after 1970, before year 10000),
// which a kept fix has 48 bits for.
func (d *Distance) Insert(s Spec, f geo.Filter, x geo.Fix) {
	i := d.search(x.TS)
	n := len(d.fixes)
	if n == cap(d.fixes) {
		// Double while small, then grow by one size class of the
		// allocator: these slices are most of a courier's retained memory,
		// and their length is steady once the courier is. Past the small
		// size classes (32 KB, a courier sending many times a second) a
		// class is a page, and growing by one would copy the whole slice
		// every few hundred fixes: grow by an eighth.
		c := max(8, 2*n)
		if n >= 64 {
			c = n + 1
		}
		if n >= bigFixes {
			c = n + n/8
		}
		d.fixes = grow(d.fixes, c)
		if d.dense {
			d.segs = grow(d.segs, cap(d.fixes))
		}
	}
	d.fixes = d.fixes[:n+1]
	if i < n { // an empty copy still calls memmove
		copy(d.fixes[i+1:], d.fixes[i:n])
	}
	if d.dense {
		d.segs = d.segs[:n+1]
		if i < n {
			copy(d.segs[i+1:], d.segs[i:n]) // segs[i] is x's: the replay sets it
		}
	}
	d.fixes[i] = pack(x)
	d.since.from = min(d.since.from, int32(i))
	p := d.paneOf(s.paneIdx(x.TS))
	d.panes[p].n++
	if i == n { // in order: one step from the state after the fix before x
		pn := &d.panes[p]
		if pn.n == 1 {
			pn.end = d.stateBefore(p)
		}
		seg := f.Step(&pn.end, x)
		pn.sum += seg
		switch {
		case !d.dense:
			if pn.n >= markEvery {
				d.rebuild(f)
			}
		default:
			d.segs[n] = seg
			if pn.n-d.lastMark(s, pn.idx) >= markEvery {
				d.marks = append(d.marks, mark{ts: x.TS, k: pn.n, sum: pn.sum, st: pn.end})
			}
		}
		return
	}
	d.replay(s, f, p, x.TS)
	if !d.dense && d.panes[p].n >= markEvery {
		d.rebuild(f)
	}
}

// rebuild makes d dense: it computes the segments and the marks (which a
// checkpoint does not keep, and a sparse courier has not), stepping each
// pane from the state before it: the same steps that gave the panes'
// sums.
func (d *Distance) rebuild(f geo.Filter) {
	d.dense = true
	d.segs = make([]float64, len(d.fixes), cap(d.fixes))
	d.marks = nil
	sp := f.Stepper()
	i := 0
	for p := range d.panes {
		st, sum := d.stateBefore(p), 0.0
		for k := int32(1); k <= d.panes[p].n; k++ {
			seg := sp.Step(&st, d.fixes[i].unpack())
			d.segs[i] = seg
			sum += seg
			if k%markEvery == 0 {
				d.marks = append(d.marks, mark{ts: d.fixes[i].ts(), k: k, sum: sum, st: st})
			}
			i++
		}
	}
}

// lastMark returns k of the last mark, if it is in pane idx, else 0.
func (d *Distance) lastMark(s Spec, idx int64) int32 {
	if n := len(d.marks); n > 0 && s.paneIdx(d.marks[n-1].ts) == idx {
		return d.marks[n-1].k
	}
	return 0
}

// stateBefore returns the filter's state before the first fix of pane p.
func (d *Distance) stateBefore(p int) geo.Track {
	if p == 0 {
		return d.base
	}
	return d.panes[p-1].end
}

// replay recomputes the segments of every fix after ts's predecessor, in
// timestamp order, as an in-order arrival would have: the sums come out bit
// for bit the same whatever order the fixes arrived in. It starts from the
// last mark before ts in ts's pane p (or the pane's start), and stops where
// the filter's state comes out as before: at a mark whose state it is, or
// at the end of a pane whose final state it is. From a mark on, the fixes
// and the state they start from are as before, so are their segments:
// the rest of the pane only re-adds them (the running sums change, and
// float addition is not associative), and the panes after it start from
// the same state with the same fixes.
func (d *Distance) replay(s Spec, f geo.Filter, p int, ts int64) {
	pidx := d.panes[p].idx
	// marks[w:] are stale up to where the replay stops. The ones in pane p
	// count one fix fewer than there are, the fix at ts: shift.
	w := sort.Search(len(d.marks), func(i int) bool { return d.marks[i].ts >= ts })
	st, sum, k, i := d.stateBefore(p), 0.0, int32(0), d.search(pidx*s.pane)
	if w > 0 && s.paneIdx(d.marks[w-1].ts) == pidx {
		m := &d.marks[w-1]
		st, sum, k, i = m.st, m.sum, m.k, d.search(m.ts+1)
	}
	lastK, shift := k, int32(1)
	next := d.nextMark(s, w, pidx, shift) // k at the fix of marks[w]
	sp := f.Stepper()
	q := p
	for ; i < len(d.fixes); i++ {
		x := d.fixes[i].unpack()
		for s.paneIdx(x.TS) != d.panes[q].idx {
			same := d.panes[q].end.Same(&st)
			d.panes[q].sum, d.panes[q].end = sum, st
			if same {
				return
			}
			q++
			sum, k, lastK, shift = 0, 0, 0, 0
			next = d.nextMark(s, w, d.panes[q].idx, shift)
		}
		seg := sp.Step(&st, x)
		if d.dense {
			d.segs[i] = seg
		}
		sum += seg
		k++
		switch {
		case k == next:
			if d.marks[w].st.Same(&st) {
				d.resum(s, q, i, w, k, shift, sum)
				return
			}
			d.marks[w] = mark{ts: x.TS, k: k, sum: sum, st: st}
			w++
			lastK = k
			next = d.nextMark(s, w, d.panes[q].idx, shift)
		case d.dense && k-lastK >= markEvery && next-lastK > 2*markEvery:
			// Inserts have widened the gap to the next mark, or after the
			// pane's last one, past 2*markEvery: split it where both parts
			// keep at least markEvery.
			d.marks = slices.Insert(d.marks, w, mark{ts: x.TS, k: k, sum: sum, st: st})
			w++
			lastK = k
		}
	}
	d.panes[q].sum, d.panes[q].end = sum, st
}

// nextMark returns the k marks[w] is at, shift included, if it is in pane
// idx, else more than any pane's k.
func (d *Distance) nextMark(s Spec, w int, idx int64, shift int32) int32 {
	if w < len(d.marks) && s.paneIdx(d.marks[w].ts) == idx {
		return d.marks[w].k + shift
	}
	return math.MaxInt32
}

// resum finishes pane q for replay, whose filter state after fixes[i], the
// pane's k-th fix, came out as the stale mark w holds it: the segments from
// there on are as stored, the running sums are not.
func (d *Distance) resum(s Spec, q, i, w int, k, shift int32, sum float64) {
	first := i + 1 - int(k) // the pane's first fix
	for ; w < len(d.marks) && s.paneIdx(d.marks[w].ts) == d.panes[q].idx; w++ {
		m := &d.marks[w]
		m.k += shift
		for _, g := range d.segs[i+1 : first+int(m.k)] {
			sum += g
		}
		i = first + int(m.k) - 1
		m.sum = sum
	}
	for _, g := range d.segs[i+1 : first+int(d.panes[q].n)] {
		sum += g
	}
	d.panes[q].sum = sum
}

// paneOf returns the index in d.panes of pane idx, adding it if needed.
func (d *Distance) paneOf(idx int64) int {
	n := len(d.panes)
	if n > 0 && d.panes[n-1].idx == idx {
		return n - 1
	}
	j := n
	if n > 0 && d.panes[n-1].idx > idx {
		j = sort.Search(n, func(k int) bool { return d.panes[k].idx >= idx })
		if d.panes[j].idx == idx {
			return j
		}
	}
	if n == cap(d.panes) {
		// Grow by one size class, not double: a courier's panes number
		// about (size + allowed lateness) / pane, steady once it is, and
		// a pane is 96 bytes.
		d.panes = grow(d.panes, n+1)
	}
	d.panes = append(d.panes, pane{})
	copy(d.panes[j+1:], d.panes[j:n])
	d.panes[j] = pane{idx: idx}
	return j
}

// NextEnd returns the watermark at which d next has something to do, if
// any: the end of the next window that will fire or, under allowed
// lateness, the moment its oldest fix can be dropped.
func (d *Distance) NextEnd(s Spec) (int64, bool) {
	if len(d.panes) == 0 {
		return 0, false
	}
	next := d.firstEnd(s)
	if s.Lateness > 0 {
		if next > s.LastEnd(d.fixes[len(d.fixes)-1].ts()) {
			next = tmath.Forever // every window holding a fix has fired
		}
		next = min(next, tmath.Add(s.LastEnd(d.fixes[0].ts()), s.Lateness))
	}
	return next, true
}

func (d *Distance) firstEnd(s Spec) int64 {
	from := max(d.fired, d.panes[0].idx*s.pane)
	if from == tmath.Forever {
		return tmath.Forever
	}
	return s.ceilEnd(from + 1)
}

// Advance fires, in order of end, every window holding a fix whose end is
// in (previous watermark, wm], then forgets what no unfired or retained
// window needs.
func (d *Distance) Advance(s Spec, wm int64, fire func(Window)) {
	if wm <= d.fired {
		return
	}
	if len(d.panes) > 0 && d.firstEnd(s) <= wm {
		d.fire(s, wm, fire)
	}
	d.fired = wm
	if len(d.kept) > 0 {
		k := 0
		for k < len(d.kept) && tmath.Add(d.kept[k].end, s.Lateness) <= wm {
			k++
		}
		d.kept = d.kept[:copy(d.kept, d.kept[k:])]
	}
	d.evict(s, s.lowBound(wm))
}

func (d *Distance) fire(s Spec, wm int64, fire func(Window)) {
	lo := 0
	for e := d.firstEnd(s); e <= wm; {
		start := e - s.Size
		for lo < len(d.panes) && d.panes[lo].idx*s.pane < start {
			lo++
		}
		if lo == len(d.panes) {
			return
		}
		if first := d.panes[lo].idx * s.pane; first >= e {
			e = s.ceilEnd(first + 1) // skip windows holding nothing
			continue
		}
		w := d.window(s, lo, e)
		if s.Lateness > 0 {
			if len(d.kept) == cap(d.kept) { // as panes: steady in number
				d.kept = grow(d.kept, len(d.kept)+1)
			}
			d.kept = append(d.kept, retainedWindow{end: e, dist: w.DistanceM, n: int32(w.Positions)})
			w.Memo = &d.kept[len(d.kept)-1].memo
		}
		fire(w)
		if e > tmath.Forever-s.Slide {
			return
		}
		e += s.Slide
	}
}

// window sums the window ending at e whose first pane holding a fix is
// d.panes[lo].
func (d *Distance) window(s Spec, lo int, e int64) Window {
	start := e - s.Size
	w := Window{Start: start, End: e}
	for j := lo; j < len(d.panes) && d.panes[j].idx*s.pane < e; j++ {
		w.DistanceM += d.panes[j].sum
		w.Positions += int(d.panes[j].n)
	}
	w.First = d.fixes[d.search(start)].ts()
	w.Last = d.fixes[d.search(e)-1].unpack()
	return w
}

// Revise fires, after the Insert of a fix at ts, what that fix changed
// among the windows that have ended (contract §3, Allowed lateness): every
// fired, retained window whose positions or distance now differ from its
// last firing fires again as its next revision, and an ended window that
// held nothing until this fix fires for the first time. Only windows
// ending after ts can have changed: the others hold fixes before ts, whose
// segments a later fix does not touch. Without lateness nothing that has
// ended is kept, so there is nothing to revise.
func (d *Distance) Revise(s Spec, ts int64, fire func(Window)) {
	if s.Lateness == 0 || ts >= d.fired || d.fired == tmath.Forever || len(d.panes) == 0 {
		return
	}
	e := s.firstRetained(ts, d.fired)
	lo, k := 0, 0
	for e <= d.fired {
		start := e - s.Size
		for lo < len(d.panes) && d.panes[lo].idx*s.pane < start {
			lo++
		}
		if lo == len(d.panes) {
			return
		}
		if d.panes[lo].idx*s.pane < e { // it holds a fix
			w := d.window(s, lo, e)
			for k < len(d.kept) && d.kept[k].end < e {
				k++
			}
			switch {
			case k == len(d.kept) || d.kept[k].end != e:
				d.kept = slices.Insert(d.kept, k, retainedWindow{end: e, dist: w.DistanceM, n: int32(w.Positions)})
				w.Memo = &d.kept[k].memo
				fire(w)
			case d.kept[k].dist != w.DistanceM || int(d.kept[k].n) != w.Positions:
				r := &d.kept[k]
				r.rev++
				r.dist, r.n = w.DistanceM, int32(w.Positions)
				w.Revision, w.Memo = int(r.rev), &r.memo
				fire(w)
			}
		}
		if e > tmath.Forever-s.Slide {
			return
		}
		e += s.Slide
	}
}

// evict drops the fixes before lb (they can no longer be accepted, and every
// window holding them has fired), keeping the filter's state after them.
// lb is a multiple of the pane length, so panes are dropped whole.
func (d *Distance) evict(s Spec, lb int64) {
	k := 0
	for k < len(d.fixes) && d.fixes[k].ts() < lb {
		k++
	}
	if k == 0 {
		return
	}
	j := 0
	for j < len(d.panes) && d.panes[j].idx*s.pane < lb {
		j++
	}
	d.base = d.panes[j-1].end
	if int32(k) < d.since.from {
		d.since.dropped += int32(k)
		d.since.from -= int32(k)
	} else {
		d.since = since{} // nothing unchanged is left: the whole state is new
	}
	if k == len(d.fixes) {
		// An idle courier keeps only the filter's state.
		d.fixes, d.segs, d.panes, d.marks, d.kept, d.dense = nil, nil, nil, nil, nil, false
		return
	}
	d.fixes = d.fixes[:copy(d.fixes, d.fixes[k:])]
	if d.dense {
		d.segs = d.segs[:copy(d.segs, d.segs[k:])]
	}
	d.panes = d.panes[:copy(d.panes, d.panes[j:])]
	m := 0
	for m < len(d.marks) && d.marks[m].ts < lb {
		m++
	}
	d.marks = d.marks[:copy(d.marks, d.marks[m:])]
}

// bigFixes is where a fix slice passes the allocator's small size classes
// (32 KB).
const bigFixes = 32 << 10 / int(unsafe.Sizeof(fix{}))
