package window

import "github.com/km0/edgeproc/internal/tmath"

// Spec is the window geometry, in milliseconds.
type Spec struct {
	Size, Slide int64
	// Lateness is the allowed lateness: how long past its end a fired
	// window still takes late fixes (windows.allowed_lateness). 0: a
	// window is dropped as it fires.
	Lateness int64
	pane     int64
}

// NewSpec returns the geometry of windows of size ms sliding every slide ms
// (0 < slide <= size).
func NewSpec(size, slide int64) Spec {
	return Spec{Size: size, Slide: slide, pane: tmath.GCD(size, slide)}
}

// paneIdx returns the index of the pane holding ts (pane start = idx*pane).
func (s Spec) paneIdx(ts int64) int64 { return tmath.FloorDiv(ts, s.pane) }

// LastEnd returns the end of the latest window holding ts.
func (s Spec) LastEnd(ts int64) int64 {
	return tmath.Add(tmath.FloorDiv(ts, s.Slide)*s.Slide, s.Size)
}

// FirstEnd returns the end of the earliest window holding ts.
func (s Spec) FirstEnd(ts int64) int64 { return s.ceilEnd(tmath.Add(ts, 1)) }

// firstRetained returns the end of the earliest window that holds ts or a
// later fix and is still retained at wm (end + Lateness > wm); it has
// ended if it is <= wm.
func (s Spec) firstRetained(ts, wm int64) int64 {
	return max(s.FirstEnd(ts), s.FirstEnd(tmath.Add(wm, -s.Lateness)))
}

// Recovers reports whether a fix at ts that is not late at wm joins a
// window that has already ended: late data that allowed lateness puts to
// use (a window ended and closed for good, end + Lateness <= wm, it does
// not join: that is a missed membership).
func (s Spec) Recovers(ts, wm int64) bool {
	return s.Lateness > 0 && ts < wm && s.firstRetained(ts, wm) <= wm
}

// Late reports whether a position at ts is late for distance at watermark
// wm: every window that could hold it is closed for good (end + Lateness
// <= wm; with no lateness, every such window has fired).
func (s Spec) Late(ts, wm int64) bool { return wm >= tmath.Add(s.LastEnd(ts), s.Lateness) }

// Missed returns how many windows holding ts were closed for good at wm
// (end + Lateness <= wm): memberships a position that is not late cannot
// take, since such a window is never created.
func (s Spec) Missed(ts, wm int64) int64 {
	wm = tmath.Add(wm, -s.Lateness)
	first := tmath.FloorDiv(ts-s.Size, s.Slide) + 1          // index of the first window holding ts
	ended := tmath.FloorDiv(tmath.Add(wm, -s.Size), s.Slide) // index of the last window ended at wm
	last := tmath.FloorDiv(ts, s.Slide)                      // index of the last window holding ts
	if ended < first {
		return 0
	}
	return min(ended, last) - first + 1
}

// lowBound returns the smallest timestamp that is not late at wm.
func (s Spec) lowBound(wm int64) int64 {
	wm = tmath.Add(wm, -s.Lateness)
	if wm < tmath.Never+s.Size {
		return tmath.Never
	}
	return (tmath.FloorDiv(wm-s.Size, s.Slide) + 1) * s.Slide
}

// ceilEnd returns the smallest window end >= x.
func (s Spec) ceilEnd(x int64) int64 {
	k := -tmath.FloorDiv(s.Size-x, s.Slide) // ⌈(x-Size)/Slide⌉
	if k > (tmath.Forever-s.Size)/s.Slide {
		return tmath.Forever
	}
	return k*s.Slide + s.Size
}
