package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	where "github.com/km0/edgeproc/courier"
	"github.com/km0/edgeproc/internal/ratelog"
)

// Courier statuses stored in CourierState.Status.
const (
	StatusOnline   = "online"
	StatusNoSignal = "no_signal"
)

// Sides of the market's service area stored in CourierState.Area.
const (
	AreaInside  = "inside"
	AreaOutside = "outside"
)

// CourierState is where a courier is now: the value (JSON) of its entry in
// the courier bucket, under the key CourierKey(Courier).
type CourierState struct {
	// Courier is the courier id. Required.
	Courier string `json:"courier"`
	// Lat and Lon are the last position, in degrees.
	Lat float64 `json:"lat"`
	Lon float64 `json:"lon"`
	// TS is the event time of the last position, ms since the Unix epoch.
	TS int64 `json:"timestamp_ms"`
	// Cell is the H3 cell of the last position.
	Cell string `json:"cell"`
	// Status is StatusOnline or StatusNoSignal.
	Status string `json:"status"`
	// Area is the side of the market's service area the courier is on
	// now, AreaInside or AreaOutside (MarkSide); empty, and left out of
	// the JSON, for a market without one or before its side is known.
	Area string `json:"area,omitempty"`
}

// The courier bucket has one writer: the KV goroutine (kvLoop), which owns a
// table of every courier's newest state. UpdatePosition, MarkNoSignal,
// MarkOnline and UpdateCourier only append to an inbox, under a mutex held
// for the append alone; the writer swaps the inbox out and applies it in
// call order. Because the table keeps each courier's newest timestamp and
// status after writing it, newest-timestamp-wins holds across writes: a
// courier leaves the table only when it is the least recently updated one
// and a new courier needs its place (Config.MaxCouriers).
//
// Staleness bound: a status change (no_signal, online) and a courier's first
// state are written at once: within milliseconds for MarkNoSignal,
// MarkOnline and UpdateCourier, which wake the writer, and within
// drainEvery (100 ms) for a position, which does not (a wake-up per
// position would cost more than the write it saves); a position is written at
// most once per Config.KVInterval per courier, the newest then, so the
// bucket's position of a courier is at most 1.25 KVInterval behind the
// newest one the bridge was given (the writer looks every KVInterval/4).
// Writes are published asynchronously to the bucket's subjects
// ($KV.<bucket>.<key>) in chunks of kvChunk, with one wait for a whole
// chunk's acks instead of one round trip per write.
const (
	// maxInbox bounds the updates waiting for the writer: a caller finding
	// it full waits (counted in Stats.KVWaits) until the writer swaps it.
	maxInbox = 1 << 16
	// kvChunk is how many writes are in flight at once.
	kvChunk = 1024
	// recreateEvery limits how often a lost stream or bucket is looked up
	// and recreated.
	recreateEvery = time.Second
	// drainEvery is how often the writer applies its inbox and writes the
	// urgent states it finds there, when nothing woke it sooner.
	drainEvery = 100 * time.Millisecond
)

type updKind uint8

const (
	updPosition updKind = iota
	updNoSignal
	updOnline
	updState
	updSide
)

// kvUpdate is one call waiting in the inbox.
type kvUpdate struct {
	kind         updKind
	idOff, idLen int32  // updPosition: the courier id in kvInbox.ids
	id           string // the others
	ts           int64
	lat, lon     float64
	cell, status string // updState
	area         string // updState, updSide
}

// kvInbox is where the callers leave updates for the writer.
type kvInbox struct {
	mu     sync.Mutex
	space  *sync.Cond // broadcast when the writer swaps the inbox out, or at Close
	ups    []kvUpdate
	ids    []byte // courier ids of the updPosition entries, back to back
	closed bool
}

// kvTickReq is a test's tick: a ticker tick now, and a scan too if scan.
type kvTickReq struct {
	done chan struct{}
	scan bool
}

// kvWrite is one state on its way to the bucket; e is nil for an evicted
// courier.
type kvWrite struct {
	e  *courierEntry
	cs CourierState
}

// push appends u (and, for a position, its courier id) to the inbox; it
// reports false after Close.
func (c *Couriers) push(u kvUpdate, id []byte) bool {
	in := &c.in
	in.mu.Lock()
	for len(in.ups) >= maxInbox && !in.closed {
		c.kvWaits.Add(1)
		c.wakeKV()
		in.space.Wait()
	}
	if in.closed {
		in.mu.Unlock()
		return false
	}
	if id != nil {
		u.idOff, u.idLen = int32(len(in.ids)), int32(len(id))
		in.ids = append(in.ids, id...)
	}
	in.ups = append(in.ups, u)
	n := len(in.ups)
	in.mu.Unlock()
	if n == maxInbox/4 {
		c.wakeKV() // drain early, long before callers would wait
	}
	return true
}

// UpdatePosition records a courier's position (event time ts, ms) for the
// bucket. It is the per-position path, called for every valid position: it
// appends to the writer's inbox under a briefly held mutex, without
// allocating (amortised) and without waking the writer, and computes no
// cell (see Config.ComputeCell). A position no newer than the newest one
// known for the courier is ignored, so a late or duplicate position never
// moves it back; a newer one sets the status to StatusOnline (written at
// once if it was not). Writes are coalesced as the package doc says.
func (c *Couriers) UpdatePosition(courier []byte, ts int64, lat, lon float64) {
	if len(courier) == 0 {
		c.kvRefused.Add(1)
		return
	}
	c.push(kvUpdate{kind: updPosition, ts: ts, lat: lat, lon: lon}, courier)
}

// MarkNoSignal sets a courier's status to StatusNoSignal, with the latest
// position of its closed session (lastSeen, ms; lat, lon), written at once.
// It is ignored when a newer position of the courier is known: results
// reach the bridge after the positions that follow them, and a courier that
// is back must stay online.
func (c *Couriers) MarkNoSignal(courier string, lastSeen int64, lat, lon float64) {
	if courier == "" {
		c.kvRefused.Add(1)
		return
	}
	if c.push(kvUpdate{kind: updNoSignal, id: courier, ts: lastSeen, lat: lat, lon: lon}, nil) {
		c.wakeKV()
	}
}

// MarkOnline sets the status of a known courier to StatusOnline (a
// signal_restored result), written at once. An unknown courier is left
// alone: its last write came from a position, which is online already.
func (c *Couriers) MarkOnline(courier string) {
	if courier == "" {
		c.kvRefused.Add(1)
		return
	}
	if c.push(kvUpdate{kind: updOnline, id: courier}, nil) {
		c.wakeKV()
	}
}

// MarkSide records the side of the service area a known courier is on,
// as of the fix at ts that decided it: the side the engine first knew it
// on (engine OnSide) or a left_area / entered_area result's move. A side
// dated no later than the one recorded is ignored (a move re-delivered,
// or older than the side the engine told after a restart); a change is
// written at once. An unknown courier is left alone: its first position
// comes before its side.
func (c *Couriers) MarkSide(courier string, ts int64, outside bool) {
	if courier == "" {
		c.kvRefused.Add(1)
		return
	}
	area := AreaInside
	if outside {
		area = AreaOutside
	}
	if c.push(kvUpdate{kind: updSide, id: courier, ts: ts, area: area}, nil) {
		c.wakeKV()
	}
}

// UpdateCourier records a courier's whole state, unless a newer one (by TS)
// is known; a courier's first state and a status change are written at
// once, others coalesced as the package doc says. An empty id is refused
// and counted in Stats.KVRefused. Updates after Close are ignored.
func (c *Couriers) UpdateCourier(cs CourierState) {
	if cs.Courier == "" {
		c.kvRefused.Add(1)
		return
	}
	if c.push(kvUpdate{kind: updState, id: cs.Courier, ts: cs.TS, lat: cs.Lat, lon: cs.Lon, cell: cs.Cell, status: cs.Status, area: cs.Area}, nil) {
		c.wakeKV()
	}
}

func (c *Couriers) wakeKV() {
	select {
	case c.kvWake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// kvLoop is the courier bucket's one writer: it applies the inbox and
// writes urgent states when woken and every drainEvery, and every due state
// each KVInterval/4.
func (c *Couriers) kvLoop() {
	defer c.wg.Done()
	scanEvery := max(c.cfg.KVInterval/4, 10*time.Millisecond)
	t := time.NewTicker(min(drainEvery, scanEvery))
	defer t.Stop()
	var lastScan time.Time
	for {
		scan := false
		var done chan struct{}
		select {
		case <-c.stop:
			return
		case <-t.C:
		case req := <-c.kvTick:
			done, scan = req.done, req.scan
		case <-c.kvWake:
		}
		now := c.now()
		if now.Sub(lastScan) >= scanEvery {
			scan = true
		}
		if scan {
			lastScan = now
		}
		c.drain(now)
		// Errors are counted and logged by writeKV; the states are retried.
		_ = c.writeKV(c.runCtx, now, scan, false)
		if done != nil {
			close(done)
		}
	}
}

// drain swaps the inbox out and applies it to the table in call order.
func (c *Couriers) drain(now time.Time) {
	t, in := &c.table, &c.in
	in.mu.Lock()
	ups, ids := in.ups, in.ids
	in.ups, in.ids = t.spareUps[:0], t.spareIDs[:0]
	in.space.Broadcast()
	in.mu.Unlock()
	for i := range ups {
		c.apply(&ups[i], ids)
	}
	clear(ups) // drop the strings
	t.spareUps, t.spareIDs = ups[:0], ids[:0]
}

// apply applies one update: a whole state (UpdateCourier) newest
// timestamp winning, the others under the rule the board applies too
// (courier.Place).
func (c *Couriers) apply(u *kvUpdate, ids []byte) {
	t := &c.table
	var (
		e     *courierEntry
		added bool
	)
	if u.kind == updPosition {
		e, added = entry(c, ids[u.idOff:u.idOff+u.idLen])
	} else if u.kind == updOnline || u.kind == updSide {
		if e = t.m[u.id]; e == nil {
			return
		}
	} else {
		e, added = entry(c, u.id)
	}
	s := &e.state
	if u.kind == updSide {
		if s.Area != "" && u.ts <= e.sideTS {
			return // dated no later than the side recorded
		}
		e.sideTS = u.ts
		if u.area != s.Area {
			s.Area = u.area
			t.markUrgent(e)
			t.touch(e)
		}
		return
	}
	p := where.Place{TS: s.TS, Lat: s.Lat, Lon: s.Lon, Silent: s.Status == StatusNoSignal}
	applied, status := false, false
	switch u.kind {
	case updPosition:
		applied, status = p.Position(u.ts, u.lat, u.lon)
	case updNoSignal:
		applied, status = p.NoSignal(u.ts, u.lat, u.lon)
	case updOnline:
		status = p.Restored()
		applied = status
	}
	if u.kind == updState {
		if !added && u.ts < s.TS {
			return
		}
		if u.status != s.Status {
			t.markUrgent(e)
		}
		if u.area != s.Area {
			t.markUrgent(e)
		}
		*s = CourierState{Courier: s.Courier, Lat: u.lat, Lon: u.lon, TS: u.ts, Cell: u.cell, Status: u.status, Area: u.area}
	} else {
		if !applied {
			return
		}
		if p.TS != s.TS || p.Lat != s.Lat || p.Lon != s.Lon {
			s.Cell = "" // computed again when written
		}
		s.Lat, s.Lon, s.TS, s.Status = p.Lat, p.Lon, p.TS, StatusOnline
		if p.Silent {
			s.Status = StatusNoSignal
		}
		if status {
			t.markUrgent(e)
		}
	}
	e.dirty = true
	if added {
		t.markUrgent(e) // first sight: written at once
	}
	t.touch(e)
}

// writeKV writes the urgent states and the evicted ones, and with scan
// every dirty state that is due (all of them with all). A state whose write
// fails is written again at the next scan.
func (c *Couriers) writeKV(ctx context.Context, now time.Time, scan, all bool) error {
	t := &c.table
	if !c.nc.IsConnected() {
		return errors.New("not connected") // states stay dirty; nothing piles up in the reconnect buffer
	}
	if c.kvLost.Load() && now.Sub(t.lostAt) >= recreateEvery {
		t.lostAt = now
		c.recreateBucket(ctx)
	}
	batch := t.batch[:0]
	// Evicted states first: a courier evicted and back within one drain
	// has its new state among the urgent ones, and the bucket keeps the
	// last write.
	for _, cs := range t.evicted {
		batch = append(batch, kvWrite{cs: cs})
	}
	clear(t.evicted)
	t.evicted = t.evicted[:0]
	for _, e := range t.urgent {
		if e.urgent && e.dirty {
			batch = append(batch, kvWrite{e: e, cs: e.state})
			e.dirty, e.lastWrite = false, now
		}
		e.urgent = false
	}
	clear(t.urgent)
	t.urgent = t.urgent[:0]
	if scan {
		for _, e := range t.m {
			if e.dirty && (all || now.Sub(e.lastWrite) >= c.cfg.KVInterval) {
				batch = append(batch, kvWrite{e: e, cs: e.state})
				e.dirty, e.lastWrite = false, now
			}
		}
	}
	var first error
	for start := 0; start < len(batch); start += kvChunk {
		if err := c.writeChunk(ctx, batch[start:min(start+kvChunk, len(batch))]); err != nil && first == nil {
			first = err
		}
	}
	clear(batch)
	t.batch = batch[:0]
	return first
}

// kvFailed puts a failed write back: the courier's state is due again at
// the next scan, unless a newer one is waiting anyway. An evicted courier's
// state had its one try. A bucket that is missing on the server is
// recreated before the next round.
func (c *Couriers) kvFailed(w *kvWrite, err error) {
	c.kvErrors.Add(1)
	if isNoStream(err) {
		c.kvLost.Store(true)
	}
	if w.e != nil && c.table.m[w.cs.Courier] == w.e {
		w.e.dirty, w.e.lastWrite = true, time.Time{}
	}
	c.logKV("bridge: write courier state, will retry", w.cs.Courier, err)
}

// isNoStream reports whether a publish failed because no stream captures
// its subject: the stream or bucket is gone from the server.
func isNoStream(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

func (c *Couriers) logKV(msg, courier string, err error) {
	if ok, suppressed := c.kvLog.Allow(); ok {
		c.log.Warn(msg, "bucket", c.cfg.KVBucket, "courier", courier, "err", err, "suppressed", suppressed)
	}
}

func (c *Couriers) createBucket(ctx context.Context) error {
	// History 1 and no MaxValues/MaxBytes: one value per courier, any
	// number of couriers.
	if _, err := c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      c.cfg.KVBucket,
		Description: "edgeproc courier state of market " + c.cfg.Market,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    c.cfg.Replicas,
	}); err != nil {
		return fmt.Errorf("create or update kv bucket %s: %w", c.cfg.KVBucket, err)
	}
	return nil
}

// recreateBucket is recreateStream for the courier bucket, run by the KV
// writer; the table's states are all written again.
func (c *Couriers) recreateBucket(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AckTimeout)
	defer cancel()
	_, err := c.js.KeyValue(ctx, c.cfg.KVBucket)
	if err == nil {
		c.kvLost.Store(false)
		return
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		c.logKV("bridge: cannot look up the courier bucket after a write found none", "", err)
		return
	}
	if err := c.createBucket(ctx); err != nil {
		c.logKV("bridge: courier bucket missing on the server, cannot recreate it yet", "", err)
		return
	}
	c.kvLost.Store(false)
	c.kvRecreated.Add(1)
	for _, e := range c.table.m {
		e.dirty, e.lastWrite = true, time.Time{}
	}
	c.log.Warn("bridge: courier bucket was missing on the server (deleted, or NATS lost its store) and has been recreated: every courier state it held is lost; rewriting the newest state of each courier known",
		"bucket", c.cfg.KVBucket, "couriers", len(c.table.m))
}

// Couriers is the courier writer of a market's bridge: the key-value
// bucket of every courier's state, written by one goroutine as this file
// describes. Its methods are safe for concurrent use.
type Couriers struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	// kvAcks is the courier writes' reply inbox (kvput.go).
	kvAcks *kvAcks
	log    *slog.Logger
	now    func() time.Time // the writer's clock; tests may simulate it

	stop   chan struct{} // closed to stop the writer
	runCtx context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	kvWrites, kvErrors, kvRefused atomic.Uint64
	kvEvicted, kvWaits            atomic.Uint64
	kvRecreated                   atomic.Uint64
	kvCouriers                    atomic.Int64
	kvLost                        atomic.Bool // a write found no bucket
	kvLog                         ratelog.Limiter

	in     kvInbox
	table  kvTable        // the writer's
	kvWake chan struct{}  // capacity 1
	kvTick chan kvTickReq // tests: a tick now
}

// openCouriers creates or updates the bucket and starts the writer.
func openCouriers(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger, now func() time.Time) (*Couriers, error) {
	c := &Couriers{
		cfg: cfg, nc: nc, log: log, now: now,
		stop:   make(chan struct{}),
		kvLog:  ratelog.Limiter{Every: errLogEvery},
		kvWake: make(chan struct{}, 1),
		kvTick: make(chan kvTickReq),
		table:  kvTable{m: make(map[string]*courierEntry)},
	}
	c.in.space = sync.NewCond(&c.in.mu)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	c.js = js
	if err := c.createBucket(ctx); err != nil {
		return nil, err
	}
	if c.kvAcks, err = subscribeKVAcks(nc); err != nil {
		return nil, err
	}
	c.runCtx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.kvLoop()
	return c, nil
}

// close ignores updates from now on, stops the writer, then writes the
// states still waiting (bounded by ctx) and drops the reply subscription.
func (c *Couriers) close(ctx context.Context) error {
	c.in.mu.Lock()
	c.in.closed = true
	c.in.space.Broadcast()
	c.in.mu.Unlock()
	close(c.stop)
	c.cancel()
	c.wg.Wait()
	// The writer has stopped: close owns the table now.
	now := c.now()
	c.drain(now)
	err := c.writeKV(ctx, now, true, true)
	_ = c.kvAcks.sub.Unsubscribe()
	return err
}

// stats fills the courier writer's counters of s.
func (c *Couriers) stats(s *Stats) {
	s.KVWrites, s.KVErrors, s.KVRefused = c.kvWrites.Load(), c.kvErrors.Load(), c.kvRefused.Load()
	s.KVEvicted, s.KVWaits, s.KVCouriers = c.kvEvicted.Load(), c.kvWaits.Load(), int(c.kvCouriers.Load())
	s.KVRecreated = c.kvRecreated.Load()
}
