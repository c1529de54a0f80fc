// Package fleet simulates a fleet of couriers' GPS positions, with a
// realistic arrival-delay profile.
//
// Couriers drive trips of two straight legs ("streets") at 10–35 km/h
// between destinations around a centre, and stop 1–8 min at each (parked:
// positions scatter 5–30 m around the parking point, accuracy_m 5–20). Each
// emits a position every Interval ± 20 %, starting at its own phase, so no
// courier ever repeats a timestamp. Tunnel-prone couriers now and then go
// silent, by default for 3.5–6 min (Config.TunnelMin, TunnelMax). Every position gets an arrival time (processing
// time) from the measured delay profile (see DelayQuantile), and Next hands
// events out in arrival order, so event time is out of order as it is in
// production. Duplicates (QoS 1 redelivery) and malformed payloads can be
// mixed in for the dedup and rejection paths.
//
// The fleet is deterministic: the same Config (Seed included) gives the
// same events, byte for byte. It is cheap (a few hundred ns per event, no
// allocation per event) and holds only the events whose arrival is still
// pending, never the whole run.
package fleet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// Event is one message as it reaches the processor.
type Event struct {
	// Courier is the courier id (the last level of its MQTT topic).
	Courier string
	// Lat and Lon are the reported position in degrees, rounded to 1e-6.
	Lat, Lon float64
	// TS is the event time (the phone's timestamp_ms), ms since the epoch.
	TS int64
	// Accuracy is the reported GPS accuracy (accuracy_m), metres, rounded
	// to 0.1.
	Accuracy float64
	// Arrival is the processing time at which the message arrives, ms since
	// the epoch; always at least TS + 100 ms.
	Arrival int64
	// Raw is non-nil only for BadRate payloads: send these bytes instead of
	// encoding the position. Its TS is the position it was derived from.
	Raw []byte
	// Reject is, for a Raw event, the contract reason it must be rejected
	// with (one of the Reason constants); "" otherwise.
	Reject string
	// Duplicate marks a redelivered copy of an earlier event (same courier,
	// position and TS, later Arrival).
	Duplicate bool
}

// Fleet generates events. It is not safe for concurrent use.
type Fleet struct {
	cfg      Config
	rnd      *rand.Rand
	proj     projection
	end      int64 // positions have TS < end; math.MaxInt64 when unbounded
	couriers []courier

	byTS   []int32 // min-heap of courier indices by (nextTS, index)
	byArr  []item  // min-heap of pending events by (Arrival, seq)
	slots  []Event // storage of pending events; byArr points into it
	free   []int32 // unused slots
	seq    uint64
	jitter int64 // ms: each interval is Interval ± jitter
	tunnel float64
	// tunnelMin and tunnelMax bound a tunnel's silence, ms.
	tunnelMin, tunnelMax int64
	reconnect            *rand.Rand // TunnelBuffered's and LateRate's delivery delays

	// observe, when set (tests only), sees each generated position with the
	// true state of its courier.
	observe func(c *courier, e Event)
}

type item struct {
	arrival int64
	seq     uint64 // generation order: ties in arrival keep it
	slot    int32
}

// New returns a fleet for cfg, with defaults filled in (see Config).
func New(cfg Config) *Fleet {
	cfg = cfg.withDefaults()
	seed := uint64(cfg.Seed)
	f := &Fleet{
		cfg:       cfg,
		rnd:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		reconnect: rand.New(rand.NewPCG(seed^0x5851f42d4c957f2d, seed)),
		proj:      newProjection(cfg.CenterLat, cfg.CenterLon),
		end:       math.MaxInt64,
		couriers:  make([]courier, cfg.Couriers),
		byTS:      make([]int32, 0, cfg.Couriers),
	}
	if cfg.Duration > 0 && cfg.Start <= math.MaxInt64-cfg.Duration.Milliseconds() {
		f.end = cfg.Start + cfg.Duration.Milliseconds()
	}
	interval := cfg.Interval.Milliseconds()
	f.jitter = interval / 5
	f.tunnel = cfg.TunnelRate * float64(interval) / 3_600_000
	f.tunnelMin, f.tunnelMax = cfg.TunnelMin.Milliseconds(), cfg.TunnelMax.Milliseconds()

	width := max(4, len(strconv.Itoa(cfg.Couriers)))
	prefix := "c"
	if cfg.Market != "" {
		prefix = cfg.Market + "-c"
	}
	r := f.rnd
	for i := range f.couriers {
		c := &f.couriers[i]
		c.id = fmt.Sprintf("%s%0*d", prefix, width, i+1)
		c.nextTS = cfg.Start + r.Int64N(interval)
		c.lastTS = c.nextTS
		c.x, c.y = inDisk(r, cfg.Radius)
		if r.Float64() < startParked {
			c.park(r, uniform(r, 0, maxStopS))
		} else {
			c.startTrip(r, cfg.Radius)
		}
		if !c.parked {
			// Start somewhere along the first leg, not at its beginning.
			c.advance(int64(r.Float64()*c.legLeftM/c.speedMS*1000), r, cfg.Radius)
		}
	}
	// Ceil with a little slack so that 0.1 × 140 is 14, not 15.
	prone := int(math.Ceil(cfg.TunnelFraction*float64(cfg.Couriers) - 1e-9))
	if cfg.TunnelRate > 0 {
		for _, i := range r.Perm(cfg.Couriers)[:prone] {
			f.couriers[i].prone = true
		}
	}
	// Drawn last, and only with roamers: the other fleets stay as they were.
	if roam := int(math.Ceil(cfg.RoamFraction*float64(cfg.Couriers) - 1e-9)); roam > 0 {
		ox := (cfg.RoamLon - cfg.CenterLon) / f.proj.degPerMLon
		oy := (cfg.RoamLat - cfg.CenterLat) / f.proj.degPerMLat
		for _, i := range r.Perm(cfg.Couriers)[:roam] {
			c := &f.couriers[i]
			c.roam, c.ox, c.oy = true, ox, oy
			// Moved there whole, its first leg or stop with it.
			c.x, c.y, c.destX, c.destY = c.x+ox, c.y+oy, c.destX+ox, c.destY+oy
		}
	}
	for i := range f.couriers {
		f.pushCourier(int32(i))
	}
	return f
}

// Config returns the configuration in use, defaults filled in.
func (f *Fleet) Config() Config { return f.cfg }

// CourierIDs returns the ids of all couriers, in index order.
func (f *Fleet) CourierIDs() []string {
	ids := make([]string, len(f.couriers))
	for i := range f.couriers {
		ids[i] = f.couriers[i].id
	}
	return ids
}

// Next returns the next event in arrival order (ties in arrival broken by
// generation order), and false once Duration is exhausted and every event
// has been returned. With Duration 0 it never returns false.
func (f *Fleet) Next() (Event, bool) {
	minDelay := MinDelay.Milliseconds()
	for {
		// No event generated from now on can arrive before bound: every
		// future position has TS ≥ the earliest nextTS and arrives at
		// least minDelay later (duplicates and bad payloads later still).
		bound := int64(math.MaxInt64)
		if len(f.byTS) > 0 {
			bound = f.couriers[f.byTS[0]].nextTS + minDelay
		}
		if len(f.byArr) > 0 && f.byArr[0].arrival <= bound {
			return f.popEvent(), true
		}
		if len(f.byTS) == 0 {
			return Event{}, false
		}
		f.generate()
	}
}

// generate emits the position of the courier due first and schedules its
// next one.
func (f *Fleet) generate() {
	ci := f.byTS[0]
	c := &f.couriers[ci]
	ts := c.nextTS
	if ts >= f.end {
		f.popCourier()
		return
	}
	r := f.rnd
	radius := f.cfg.Radius
	if c.roam {
		radius = f.cfg.RoamRadius
	}
	c.advance(ts-c.lastTS, r, radius)
	c.lastTS = ts
	x, y, acc := c.fix(r)
	e := Event{Courier: c.id, TS: ts, Accuracy: roundTo(acc, 10)}
	e.Lat, e.Lon = f.proj.latLon(x, y)
	e.Arrival = ts + delayMs(r.Float64())
	if ts < c.tunnelEnd && f.cfg.Tunnel == TunnelBuffered {
		// Queued on the phone: delivered once it is out, in order. Its own
		// random source, so that the fleet is the TunnelOnTime one's.
		e.Arrival = max(e.Arrival, c.tunnelEnd+500+f.reconnect.Int64N(2501)+(ts-c.tunnelStart)/1000)
	}
	if f.cfg.LateRate > 0 && f.reconnect.Float64() < f.cfg.LateRate {
		e.Arrival += 60_000 + f.reconnect.Int64N(180_001)
	}
	f.pushEvent(e)
	if f.observe != nil {
		f.observe(c, e)
	}
	if f.cfg.DuplicateRate > 0 && r.Float64() < f.cfg.DuplicateRate {
		d := e
		d.Duplicate = true
		d.Arrival += 200 + r.Int64N(4801)
		f.pushEvent(d)
	}
	if f.cfg.BadRate > 0 && r.Float64() < f.cfg.BadRate {
		k := &badKinds[r.IntN(len(badKinds))]
		b := e
		b.Raw = k.build(nil, e, r)
		b.Reject = k.reason
		b.Arrival = ts + delayMs(r.Float64())
		f.pushEvent(b)
	}

	gap := f.cfg.Interval.Milliseconds() + r.Int64N(2*f.jitter+1) - f.jitter
	if c.prone && !c.parked && ts >= c.tunnelEnd && r.Float64() < f.tunnel {
		d := f.tunnelMin + r.Int64N(f.tunnelMax-f.tunnelMin+1)
		if f.cfg.Tunnel == TunnelSilent {
			gap = d
		} else {
			c.tunnelStart, c.tunnelEnd = ts, ts+d
		}
	}
	c.nextTS = ts + max(gap, 1)
	f.downTS(0)
}

func (f *Fleet) pushEvent(e Event) {
	var s int32
	if n := len(f.free); n > 0 {
		s = f.free[n-1]
		f.free = f.free[:n-1]
		f.slots[s] = e
	} else {
		s = int32(len(f.slots))
		f.slots = append(f.slots, e)
	}
	f.seq++
	f.byArr = append(f.byArr, item{arrival: e.Arrival, seq: f.seq, slot: s})
	f.upArr(len(f.byArr) - 1)
}

func (f *Fleet) popEvent() Event {
	top := f.byArr[0]
	n := len(f.byArr) - 1
	f.byArr[0] = f.byArr[n]
	f.byArr = f.byArr[:n]
	if n > 0 {
		f.downArr(0)
	}
	e := f.slots[top.slot]
	f.slots[top.slot] = Event{} // drop the Raw reference
	f.free = append(f.free, top.slot)
	return e
}

func (a item) less(b item) bool {
	return a.arrival < b.arrival || a.arrival == b.arrival && a.seq < b.seq
}

func (f *Fleet) upArr(i int) {
	h := f.byArr
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (f *Fleet) downArr(i int) {
	h := f.byArr
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func (f *Fleet) lessTS(a, b int32) bool {
	ta, tb := f.couriers[a].nextTS, f.couriers[b].nextTS
	return ta < tb || ta == tb && a < b
}

func (f *Fleet) pushCourier(ci int32) {
	f.byTS = append(f.byTS, ci)
	h := f.byTS
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !f.lessTS(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (f *Fleet) popCourier() {
	n := len(f.byTS) - 1
	f.byTS[0] = f.byTS[n]
	f.byTS = f.byTS[:n]
	if n > 0 {
		f.downTS(0)
	}
}

func (f *Fleet) downTS(i int) {
	h := f.byTS
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && f.lessTS(h[r], h[l]) {
			m = r
		}
		if !f.lessTS(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
