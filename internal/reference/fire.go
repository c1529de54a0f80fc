package reference

import (
	"fmt"
	"math/big"
	"sort"

	"github.com/km0/edgeproc/geo"
	"github.com/uber/h3-go/v4"
)

// firing is one window or session whose time has come.
type firing struct {
	at      *big.Int // window end, or session last_ts + gap
	courier string
	kind    int // 0 distance window, 1 session: distance fires first (decision 9)
	w       *window
	s       *session
	c       *courierState
}

// advance raises the watermark to cand if that is higher, fires what it
// crosses (stamped emittedAt) and then forgets idle couriers.
func (pr *processor) advance(cand *big.Int, emittedAt int64) {
	if cmp(cand, pr.wm) <= 0 {
		return
	}
	pr.wm = cand
	pr.fire(emittedAt, nil)
	pr.drop()
	pr.forget()
	pr.fireZones(emittedAt)
}

// flush is the end of input: the watermark goes to +infinity and everything
// open fires, stamped with the last clock value.
func (pr *processor) flush() {
	pr.wm = posInfinity()
	// The latest open session of each courier is the one whose no_signal says
	// end_of_input.
	latest := map[*session]bool{}
	for _, c := range pr.couriers {
		var best *session
		for _, s := range c.sessions {
			if s.open && (best == nil || s.start > best.start) {
				best = s
			}
		}
		if best != nil {
			latest[best] = true
		}
	}
	pr.fire(pr.now(), latest)
	pr.fireZones(pr.now())
}

// fire emits, in order of firing time, courier, then kind, every window and
// session the current watermark has reached. endOfInput marks the sessions
// whose no_signal carries "end_of_input": true.
func (pr *processor) fire(emittedAt int64, endOfInput map[*session]bool) {
	var due []firing
	for _, c := range pr.sortedCouriers() {
		for _, w := range c.windows {
			if !w.fired && cmp(pr.wm, w.end) >= 0 {
				due = append(due, firing{at: w.end, courier: c.name, kind: 0, w: w, c: c})
			}
		}
		for _, s := range c.sessions {
			if s.open && cmp(pr.wm, pr.sessionEnd(s)) >= 0 {
				due = append(due, firing{at: pr.sessionEnd(s), courier: c.name, kind: 1, s: s, c: c})
			}
		}
	}
	sort.SliceStable(due, func(i, j int) bool {
		a, b := due[i], due[j]
		if r := cmp(a.at, b.at); r != 0 {
			return r < 0
		}
		if a.courier != b.courier {
			return a.courier < b.courier
		}
		return a.kind < b.kind
	})
	for _, f := range due {
		if f.w != nil {
			f.w.fired = true
			f.w.last = pr.emitDistance(f.c, f.w, emittedAt)
			continue
		}
		f.s.open = false
		pr.emitNoSignal(f.c, f.s, endOfInput[f.s], emittedAt)
		pr.afterClose(f.c, f.s, emittedAt)
	}
}

// drop forgets the fired windows no late position can join any more
// (wm >= end + AllowedLatenessMs).
func (pr *processor) drop() {
	for _, c := range pr.couriers {
		for start, w := range c.windows {
			if w.fired && cmp(pr.wm, plus(start, pr.p.SizeMs+pr.p.AllowedLatenessMs)) >= 0 {
				delete(c.windows, start)
			}
		}
	}
}

// revise runs right after the distance operator accepted a position of c:
// every ended window of c (end <= wm) that is still retained fires, for
// the first time if it never did (the position created it after its end),
// and again as its next revision if its values differ from its last
// firing. All of them are recomputed from scratch; in order of start.
func (pr *processor) revise(c *courierState, emittedAt int64) {
	var ended []*window
	for _, w := range c.windows {
		if cmp(pr.wm, w.end) >= 0 {
			ended = append(ended, w)
		}
	}
	sort.Slice(ended, func(i, j int) bool { return ended[i].start < ended[j].start })
	for _, w := range ended {
		if !w.fired {
			w.fired = true
			w.last = pr.emitDistance(c, w, emittedAt)
			continue
		}
		v := pr.distanceOf(c, w)
		if v.values() == w.last {
			continue
		}
		w.revision++
		w.last = pr.emitRecord(c, w, v, emittedAt)
	}
}

// afterClose restores the courier at once if it already has a next session,
// otherwise remembers that it is silent (decision 7).
func (pr *processor) afterClose(c *courierState, closed *session, emittedAt int64) {
	var next *session
	for _, s := range c.sessions {
		if s.open && (next == nil || s.start < next.start) {
			next = s
		}
	}
	if next != nil {
		pr.emitRestored(c, closed.last.ts, next.start, emittedAt)
		return
	}
	silent := closed.last.ts
	c.silentFrom = &silent
}

// forget forgets every tracked courier with wm >= latest + RestoreTTLMs
// (§3 Tracking and forgetting). RestoreTTLMs >= max(SizeMs, GapMs), so
// fire has already closed everything it had open.
func (pr *processor) forget() {
	for name, latest := range pr.tracked {
		if cmp(pr.wm, plus(latest, pr.p.RestoreTTLMs)) >= 0 {
			pr.forgetCourier(name)
		}
	}
}

// forgetCourier drops everything known of a courier: its next position is
// a first one (no predecessor, no pending signal_restored).
func (pr *processor) forgetCourier(name string) {
	if c := pr.couriers[name]; c != nil && (len(c.windows) > 0 || hasOpenSession(c)) {
		panic("reference: forgetting courier " + name + " with something open")
	}
	delete(pr.tracked, name)
	delete(pr.couriers, name)
}

func hasOpenSession(c *courierState) bool {
	for _, s := range c.sessions {
		if s.open {
			return true
		}
	}
	return false
}

// predecessor is the courier's accepted position with the largest ts below
// p.ts since it was last forgotten, or nil when p is the first.
func predecessor(c *courierState, p *position) *position {
	var pred *position
	for _, q := range c.distPositions {
		if q.ts < p.ts && (pred == nil || q.ts > pred.ts) {
			pred = q
		}
	}
	return pred
}

// computed is a window's firing as computed from scratch.
type computed struct {
	dist   float64
	ps     []*position // by timestamp
	sparse bool
}

func (v computed) values() distanceValues { return distanceValues{v.dist, len(v.ps)} }

// emitDistance emits w's firing and returns its values.
func (pr *processor) emitDistance(c *courierState, w *window, emittedAt int64) distanceValues {
	return pr.emitRecord(c, w, pr.distanceOf(c, w), emittedAt)
}

// distanceOf computes w from its positions and the courier's LAG chain.
func (pr *processor) distanceOf(c *courierState, w *window) computed {
	ps := append([]*position(nil), w.positions...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].ts < ps[j].ts })
	var filtered map[*position]float64
	if pr.p.MinMoveM > 0 {
		filtered = pr.filtered(c, ps[len(ps)-1])
	}
	// Summed in timestamp order, so float rounding is reproducible.
	dist := 0.0
	for _, p := range ps {
		if filtered != nil {
			dist += filtered[p]
		} else if pred := predecessor(c, p); pred != nil {
			dist += segment(pred, p, pr.p)
		}
	}
	newest := ps[len(ps)-1]
	// With a filter on, stopped needs fixes over at least half the window.
	sparse := (pr.p.MinMoveM > 0 || pr.p.MaxSpeedKmh > 0) && 2*(newest.ts-ps[0].ts) < pr.p.SizeMs
	return computed{dist: dist, ps: ps, sparse: sparse}
}

// emitRecord emits w's firing with values v (a revision when w.revision >
// 0) and returns them.
func (pr *processor) emitRecord(c *courierState, w *window, v computed, emittedAt int64) distanceValues {
	dist, ps, sparse := v.dist, v.ps, v.sparse
	newest := ps[len(ps)-1]
	key := fmt.Sprintf("distance|%s|%s|%d", pr.p.Market, c.name, w.start)
	if w.revision > 0 {
		key += fmt.Sprintf("|%d", w.revision)
	}
	rec := map[string]any{
		"type":            "distance",
		"courier":         c.name,
		"key":             key,
		"emitted_at_ms":   emittedAt,
		"window_start_ms": w.start,
		"window_end_ms":   saturate(w.end),
		"distance_m":      dist,
		"positions":       int64(len(ps)),
		"stopped":         dist < pr.p.StoppedBelowM && !sparse,
		"cell":            pr.cell(newest.lat, newest.lon),
	}
	if sparse {
		rec["insufficient_evidence"] = true
	}
	if w.revision > 0 {
		rec["revision"] = w.revision
	}
	pr.emit(rec)
	return v.values()
}

// filtered returns, with MinMoveM > 0, the segment of every position of
// the courier's LAG chain up to last (decision 5): the anchor filter of
// geo.Filter run over the whole chain in timestamp order from its first
// position. What the engine computes incrementally, with its replays of
// out-of-order fixes, is checked against this from-scratch run; a segment
// depends only on the positions before it.
func (pr *processor) filtered(c *courierState, last *position) map[*position]float64 {
	chain := lagChain(c, last)
	segs := make(map[*position]float64, len(chain))
	f := geo.Filter{MinMoveM: pr.p.MinMoveM, MaxSpeedKmh: pr.p.MaxSpeedKmh}
	var t geo.Track
	for _, q := range chain {
		segs[q] = f.Step(&t, geo.Fix{TS: q.ts, Lat: q.lat, Lon: q.lon, Acc: q.acc})
	}
	return segs
}

func (pr *processor) emitNoSignal(c *courierState, s *session, endOfInput bool, emittedAt int64) {
	rec := map[string]any{
		"type":             "no_signal",
		"courier":          c.name,
		"key":              fmt.Sprintf("no_signal|%s|%s|%d", pr.p.Market, c.name, s.start),
		"emitted_at_ms":    emittedAt,
		"session_start_ms": s.start,
		"last_seen_ms":     s.last.ts,
		"last_lat":         s.last.lat,
		"last_lon":         s.last.lon,
		"cell":             pr.cell(s.last.lat, s.last.lon),
	}
	if endOfInput {
		rec["end_of_input"] = true
	} else {
		pr.zoneWarn(c.name, s.last)
	}
	pr.emit(rec)
}

func (pr *processor) emitRestored(c *courierState, silentFrom, restoredAt, emittedAt int64) {
	pr.zoneRestore(c.name, silentFrom, restoredAt)
	pr.emit(map[string]any{
		"type":           "signal_restored",
		"courier":        c.name,
		"key":            fmt.Sprintf("signal_restored|%s|%s|%d", pr.p.Market, c.name, silentFrom),
		"emitted_at_ms":  emittedAt,
		"silent_from_ms": silentFrom,
		"restored_at_ms": restoredAt,
		"gap_ms":         restoredAt - silentFrom,
	})
}

func (pr *processor) cell(lat, lon float64) string {
	return h3.LatLngToCell(h3.NewLatLng(lat, lon), pr.p.H3Resolution).String()
}
