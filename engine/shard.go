package engine

import (
	"sync/atomic"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/tmath"
	"github.com/km0/edgeproc/position"
	"github.com/km0/edgeproc/result"
	"github.com/km0/edgeproc/sessions"
	"github.com/km0/edgeproc/window"
	"github.com/uber/h3-go/v4"
)

// courier is one courier's state. Only its shard's goroutine touches it.
type courier struct {
	name   string
	dist   window.Distance
	sess   sessions.State
	area   *geo.Presence // its side of the service area; nil without one (most markets: 8 bytes, not 48)
	latest int64         // largest timestamp of its valid positions (the tracker's, for checkpoints)
	timer  int64         // when its live timer entry fires
	timed  bool          // it has a live timer entry
	gone   bool          // forgotten: its heap entries are stale
	// sideTold: its side of the service area was given to OnSide or in a
	// move's result since this engine holds it (not checkpointed: a
	// restored engine tells it again).
	sideTold bool
	epoch    uint32 // the shard's snapshot epoch it was last saved in (or born after)
	due      uint32 // the epoch of the next snapshot it must be in: changed since the last

	// The last H3 cell computed and its point: a parked courier's windows
	// end on the same fix, and a cell costs ~1.5 µs.
	cellLat, cellLon float64
	cell             h3.Cell
}

func (c *courier) cellOf(lat, lon float64, res int) h3.Cell {
	if c.cell == 0 || lat != c.cellLat || lon != c.cellLon {
		c.cell, c.cellLat, c.cellLon = geo.Cell(lat, lon, res), lat, lon
	}
	return c.cell
}

// shard owns a subset of the couriers.
type shard struct {
	id int
	p  *params
	// couriers is the shard's courier table, indexed by the slot the
	// tracker gave each (nil: free); count is how many are in it.
	couriers []*courier
	count    int
	timers   timerHeap
	wm       int64
	in       chan *chunk
	done     chan struct{}

	c   *chunk // being processed
	out []result.Record

	// firing is the courier whose timers run; onWindow and onSession are
	// the method values handed to its state, made once to keep the
	// per-position path free of allocations.
	firing    *courier
	onWindow  func(window.Window)
	onSession func(sessions.Event)
	// revising is the event whose fix revises its courier's ended windows
	// (onRevised's), set during the call.
	revising  *event
	onRevised func(window.Window)

	// A snapshot in progress (see checkpoint.go).
	snap     *shardSnap
	epoch    uint32
	lastSnap int // bytes of the previous snapshot part
	// changed lists the couriers changed since the last snapshot's
	// barrier (each once: due), forgotten the names forgotten since: what
	// an incremental snapshot writes. Both are emptied at every barrier,
	// so they hold at most one interval's couriers.
	changed   []*courier
	forgotten []string

	// next is the earliest timer as of the last chunk (tmath.Forever when
	// none), for Engine.TickDue.
	next atomic.Int64

	stats struct {
		duplicates, lateDistance, lateSession, missed, couriers, watermark atomic.Int64
		revisions, recovered, secondsLate                                  atomic.Int64
		results                                                            [result.Rejected]atomic.Int64
	}
}

func newShard(id int, p *params) *shard {
	s := &shard{
		id: id, p: p, wm: tmath.Never,
		in: make(chan *chunk, inFlight), done: make(chan struct{}, inFlight),
	}
	s.stats.watermark.Store(tmath.Never)
	s.next.Store(tmath.Forever)
	s.onWindow, s.onSession, s.onRevised = s.windowFired, s.sessionFired, s.windowRevised
	return s
}

func (s *shard) run() {
	for {
		var c *chunk
		if s.snap != nil {
			// Save couriers while no chunk is waiting; process chunks first.
			select {
			case c = <-s.in:
			default:
				s.snapStep(snapBatch)
				continue
			}
		} else {
			c = <-s.in
		}
		if c == nil { // closed
			s.snapStep(-1)
			return
		}
		s.c, s.out = c, c.out[s.id]
		for i := range c.events[s.id] {
			s.apply(&c.events[s.id][i])
		}
		s.advance(c.wm)
		if c.ckpt != nil {
			s.beginSnap(c.ckpt)
		}
		if c.endOfInput {
			s.advance(tmath.Forever)
		}
		sortRecords(s.out) // here, in parallel: the merger only merges
		c.out[s.id] = s.out
		s.c, s.out = nil, nil
		s.stats.couriers.Store(int64(s.count))
		s.stats.watermark.Store(s.wm)
		if len(s.timers) > 0 {
			s.next.Store(s.timers[0].at)
		} else {
			s.next.Store(tmath.Forever)
		}
		s.done <- struct{}{}
		if s.snap != nil {
			s.snapStep(snapBatch) // progress under a steady load too
		}
	}
}

// put places c in the table at slot.
func (s *shard) put(slot int32, c *courier) {
	if n := int(slot) + 1; n > len(s.couriers) {
		s.couriers = append(s.couriers, make([]*courier, n-len(s.couriers))...)
	}
	s.couriers[slot] = c
	s.count++
}

// apply processes one event with the watermark that preceded it.
func (s *shard) apply(ev *event) {
	s.advance(ev.wm)
	p := s.p
	name := s.c.names[ev.off : ev.off+uint32(ev.n)]
	var c *courier
	if int(ev.slot) < len(s.couriers) {
		c = s.couriers[ev.slot]
	}
	if ev.forget {
		// Nothing of it is open (the sequencer forgets a courier only at
		// latest + max(size, gap) or later): its LAG predecessor and any
		// pending signal_restored go with it.
		if c != nil {
			s.save(c)
			c.gone = true
			s.couriers[ev.slot] = nil
			s.count--
			if s.epoch != 0 { // see changedNow
				s.forgotten = append(s.forgotten, c.name)
			}
		}
		return
	}
	if c == nil {
		c = &courier{name: string(name), latest: ev.ts, epoch: s.epoch}
		c.dist.Start(ev.wm)
		s.put(ev.slot, c)
		s.changedNow(c)
	} else {
		s.save(c)
		c.latest = max(c.latest, ev.ts)
	}
	s.firing = c
	c.dist.Advance(p.spec, ev.wm, s.onWindow) // nothing is due: it only forgets
	lateD := p.spec.Late(ev.ts, ev.wm)
	if !lateD && c.dist.Has(ev.ts) {
		s.stats.duplicates.Add(1)
		return
	}
	lateS := c.sess.Late(ev.ts, ev.wm, p.gap)
	if p.rows {
		s.keepRow(c.name, ev, lateD, lateS)
	}
	if (lateD || lateS) && ev.ts < position.SecondsBefore {
		s.secondsHint(c.name, ev)
	}
	if lateD {
		s.late(c.name, ev, result.OpDistance)
	} else {
		if ev.wm > ev.ts { // else no window holding ts has ended
			if n := p.spec.Missed(ev.ts, ev.wm); n > 0 {
				s.stats.missed.Add(n)
			}
		}
		c.dist.Insert(p.spec, p.filter, geo.Fix{TS: ev.ts, Lat: ev.lat, Lon: ev.lon, Acc: ev.acc})
		if p.spec.Lateness > 0 && ev.ts < ev.wm {
			if p.spec.Recovers(ev.ts, ev.wm) {
				s.stats.recovered.Add(1)
			}
			s.revising = ev
			c.dist.Revise(p.spec, ev.ts, s.onRevised)
			s.revising = nil
		}
	}
	if lateS {
		s.late(c.name, ev, result.OpSession)
	} else if r, ok := c.sess.Add(ev.ts, ev.lat, ev.lon, p.gap); ok {
		s.emit(result.Record{
			Type: result.SignalRestored, Courier: c.name, EmittedAt: ev.clock,
			Order:      result.Order{Seq: ev.seq, Rank: 2},
			SilentFrom: r.SilentFrom, RestoredAt: r.RestoredAt,
		})
	}
	if p.area != nil {
		s.stepArea(c, ev)
	}
	s.schedule(c)
}

// keepRow keeps an accepted position for Config.OnRows.
func (s *shard) keepRow(courier string, ev *event, lateD, lateS bool) {
	s.c.rows[s.id] = append(s.c.rows[s.id], Row{
		Line: ev.line, Courier: courier, TS: ev.ts, Arrival: ev.clock, Lat: ev.lat, Lon: ev.lon,
		Accuracy: ev.rawAcc, LateDistance: lateD, LateSession: lateS, seq: ev.seq,
	})
}

// stepArea follows c's side of the service area with ev: a move out or
// in is a left_area or entered_area result.
func (s *shard) stepArea(c *courier, ev *event) {
	if c.area == nil {
		c.area = &geo.Presence{}
	}
	if left, at, ok := c.area.Step(s.p.area, geo.Fix{TS: ev.ts, Lat: ev.lat, Lon: ev.lon}); ok {
		typ := result.EnteredArea
		if left == geo.Inside {
			typ = result.LeftArea
		}
		s.emit(result.Record{
			Type: typ, Courier: c.name, EmittedAt: ev.clock,
			Order: result.Order{Seq: ev.seq, Rank: 4},
			TS:    at.TS, Lat: at.Lat, Lon: at.Lon, Cell: geo.Cell(at.Lat, at.Lon, s.p.res),
		})
		c.sideTold = true
	} else if !c.sideTold && c.area.Side != 0 {
		// The first side is no result (docs/semantics.md), but the board
		// and the bucket show it: once per courier and engine.
		c.sideTold = true
		if s.p.onSide != nil {
			s.p.onSide(c.name, ev.ts, c.area.Side == geo.Outside)
		}
	}
}

// secondsHint counts a late position whose timestamp_ms reads as seconds
// and says so in the log, at most once per hintEvery: a phone sending
// seconds is a configuration error nothing else points at.
func (s *shard) secondsHint(name string, ev *event) {
	s.stats.secondsLate.Add(1)
	if s.p.log == nil {
		return
	}
	if ok, n := s.p.hint.Allow(); ok {
		s.p.log.Warn("late position: timestamp_ms looks like seconds, not milliseconds",
			"market", s.p.market, "courier", name, "timestamp_ms", ev.ts, "watermark_ms", ev.wm, "suppressed", n)
	}
}

func (s *shard) late(name string, ev *event, op result.Operator) {
	if op == result.OpDistance {
		s.stats.lateDistance.Add(1)
	} else {
		s.stats.lateSession.Add(1)
	}
	s.emit(result.Record{
		Type: result.Late, Courier: name, EmittedAt: ev.clock,
		Order:    result.Order{Seq: ev.seq, Rank: uint8(op)},
		Operator: op, TS: ev.ts, Watermark: ev.wm,
	})
}

func (s *shard) emit(r result.Record) {
	r.Market = s.p.market
	s.stats.results[r.Type].Add(1)
	s.out = append(s.out, r)
}

// advance moves the shard's watermark to wm, firing every due timer.
func (s *shard) advance(wm int64) {
	if wm <= s.wm {
		return
	}
	for len(s.timers) > 0 && s.timers[0].at <= wm {
		t := s.timers.pop()
		c := t.c
		if c.gone || !c.timed || c.timer != t.at {
			continue // superseded by an earlier entry
		}
		c.timed = false
		s.fire(c, wm)
	}
	s.wm = wm
}

// fire runs everything of c that is due at wm.
func (s *shard) fire(c *courier, wm int64) {
	p := s.p
	s.save(c)
	s.firing = c
	c.dist.Advance(p.spec, wm, s.onWindow)
	c.sess.Close(wm, p.gap, s.c.endOfInput && wm == tmath.Forever, s.onSession)
	s.schedule(c)
}

func (s *shard) windowFired(w window.Window) {
	st := s.c.stepAt(w.End)
	s.emit(s.distance(w, st.clock, result.Order{Seq: st.seq, Phase: 1, At: w.End}))
}

// distance is the record of a firing of w, the firing courier's.
func (s *shard) distance(w window.Window, clock int64, o result.Order) result.Record {
	sparse := s.p.filter.On() && w.Sparse() // only the filter makes a claim of evidence
	return result.Record{
		Type: result.Distance, Courier: s.firing.name, EmittedAt: clock, Order: o,
		Start: w.Start, End: w.End, DistanceM: w.DistanceM, Positions: w.Positions,
		Stopped: w.DistanceM < s.p.stopped && !sparse, InsufficientEvidence: sparse,
		Cell:     s.cellOf(&w),
		Revision: w.Revision,
	}
}

// cellOf is the H3 cell of w's last fix. A retained window remembers the
// one of its previous firing: a late position revises a courier's windows
// in turn, each ending on another fix, which the courier's one-cell cache
// would miss every time (it was a fifth of the engine's CPU on a fleet
// with 10 % of its positions minutes late).
func (s *shard) cellOf(w *window.Window) h3.Cell {
	if m := w.Memo; m != nil && m.Value != 0 && m.TS == w.Last.TS {
		return h3.Cell(m.Value)
	}
	c := s.firing.cellOf(w.Last.Lat, w.Last.Lon, s.p.res)
	if m := w.Memo; m != nil {
		m.TS, m.Value = w.Last.TS, uint64(c)
	}
	return c
}

// windowRevised emits a firing caused by a fix rather than by the
// watermark (allowed lateness): a revision of a fired window, or the first
// firing of an ended one the fix created. It comes with the fix's other
// records, after them.
func (s *shard) windowRevised(w window.Window) {
	ev := s.revising
	if w.Revision > 0 {
		s.stats.revisions.Add(1)
	}
	s.emit(s.distance(w, ev.clock, result.Order{Seq: ev.seq, Rank: 3}))
}

func (s *shard) sessionFired(ev sessions.Event) {
	st := s.c.stepAt(ev.At)
	r := result.Record{Courier: s.firing.name, EmittedAt: st.clock, Order: result.Order{Seq: st.seq, Phase: 1, At: ev.At}}
	if ev.Kind == sessions.NoSignal {
		r.Type, r.Order.Rank = result.NoSignal, 1
		r.Start, r.End, r.Lat, r.Lon = ev.Session.Start, ev.Session.Last, ev.Session.Lat, ev.Session.Lon
		r.Cell = s.firing.cellOf(r.Lat, r.Lon, s.p.res)
		r.EndOfInput = ev.EndOfInput
	} else {
		r.Type, r.Order.Rank = result.SignalRestored, 2
		r.SilentFrom, r.RestoredAt = ev.SilentFrom, ev.RestoredAt
	}
	s.emit(r)
}

// schedule makes sure c has a timer entry no later than its next firing.
func (s *shard) schedule(c *courier) {
	next, ok := c.dist.NextEnd(s.p.spec)
	if t, has := c.sess.NextClose(s.p.gap); has && (!ok || t < next) {
		next, ok = t, true
	}
	if !ok { // nothing open: the sequencer decides when it is forgotten
		return
	}
	if c.timed && c.timer <= next {
		return
	}
	c.timer, c.timed = next, true
	s.timers.push(timer{at: next, c: c})
}

type timer struct {
	at int64
	c  *courier
}

// timerHeap is a min-heap of timers by time, typed to keep the per-position
// path free of allocations. Entries are invalidated lazily: a courier's
// newer, earlier entry supersedes its older one.
type timerHeap []timer

func (h *timerHeap) push(t timer) {
	*h = append(*h, t)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].at <= a[i].at {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *timerHeap) pop() timer {
	a := *h
	t := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a[n] = timer{}
	a = a[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && a[l].at < a[m].at {
			m = l
		}
		if r := l + 1; r < n && a[r].at < a[m].at {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return t
}
