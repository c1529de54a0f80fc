// Package engine is edgeproc's event-time core for one market: a sequencer
// that decodes inputs in arrival order and owns the watermark, N shard
// goroutines that own their couriers' window and session state outright,
// and a merger that emits every result in one deterministic order.
//
// Data flows one way, in chunks of inputs:
//
//	Push → sequencer (decode, reject, tracking, watermark) → shard queues
//	     → shards (windows, sessions, timers) → merger (order) → sink
//
// The sequencer records every watermark step of a chunk with the input that
// caused it and the processing clock at that moment. A shard applies its
// own positions with the watermark that preceded each one and fires its
// timers lazily, stamping each firing with the step at which the watermark
// first reached it. Results therefore do not depend on the shard count or
// on goroutine scheduling: a run is a function of its inputs and their
// arrival times (contract §3, "live = replay"). For the same reason the
// sequencer decides which couriers are tracked (the courier limit, and
// forgetting after restore_ttl) and tells their shards in sequence.
package engine

import (
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/ratelog"
	"github.com/km0/edgeproc/internal/tmath"
	"github.com/km0/edgeproc/position"
	"github.com/km0/edgeproc/result"
	"github.com/km0/edgeproc/watermark"
	"github.com/km0/edgeproc/window"
)

// Config is what the engine needs of a market's configuration. Durations
// are milliseconds.
type Config struct {
	Market                           string
	Size, Slide, Gap, ToleratedDelay int64
	IdleTimeout, MaxFutureSkew       int64
	// AllowedLateness is how long past its end a fired distance window
	// takes late positions and is re-emitted as a revision (contract §3,
	// Allowed lateness). 0: a window fires once.
	AllowedLateness int64
	// RestoreTTL is how long (event time) a courier stays tracked after its
	// latest position. At least max(Size + AllowedLateness, Gap): a smaller
	// value is raised to that, as config.Validate requires.
	RestoreTTL int64
	// MaxCouriers is how many couriers are tracked at most (contract §3,
	// Courier limit). Default (<= 0) defaults.MaxCouriers.
	MaxCouriers   int
	Filter        geo.Filter
	StoppedBelowM float64
	H3Resolution  int
	// Topic is the MQTT subscription filter whose '+' level must equal the
	// payload's courier; empty in a replay. With FormatOwnTracks it is the
	// filter whose '+' level CourierLevel names the courier (a replay sets
	// it too, to match each line's "topic" against).
	Topic string
	// Format is how a payload becomes a position (mqtt.format; contract
	// §2, Input formats). Default position.FormatEdgeproc.
	Format position.Format
	// CourierLevel is, with FormatOwnTracks, which '+' level of Topic
	// names the courier: 0 the first (owntracks/USER/DEVICE's USER, the
	// default), 1 the second (DEVICE).
	CourierLevel int
	// Log, when set, receives a rate-limited hint when a late position's
	// timestamp_ms reads as seconds (position.SecondsBefore). nil: none.
	Log *slog.Logger
	// Shards is the number of shard goroutines. Default runtime.NumCPU().
	Shards int
	// ChunkSize is how many inputs the sequencer hands over at a time.
	// Default 4096.
	ChunkSize int
	// OnPosition, when set, is called from the sequencer with every valid
	// position that is not refused as courier_limit (duplicates and late
	// ones included: their status is decided later, by the shards).
	// courier is only valid during the call. The live service uses it for
	// the courier key-value bucket; it must be cheap and must not block.
	OnPosition func(courier []byte, ts int64, lat, lon float64)
	// DeafGap, when > 0, is the longest step of the processing clock
	// (ms, between two inputs or ticks) that counts as time the source
	// was heard: a longer one is taken as the source having been deaf
	// (contract §3, deaf is not silent), as if a Listen came first. The
	// partitioned source sets it: its owner writes a tick into an idle
	// partition every pull wait, so a longer gap in the stream is time
	// nobody could write (an outage, no owner). 0: only Listen says so.
	DeafGap int64
	// DeadZoneWindow, when > 0, counts no_signal warnings by the H3 cell
	// of resolution DeadZoneResolution of their last position over
	// tumbling windows of that length (docs/semantics.md, Dead zones), at
	// most DeadZoneCells cells a window (default 10000). 0: off.
	DeadZoneWindow     int64
	DeadZoneResolution int
	DeadZoneCells      int
	// DeadZoneParts (with DeadZoneWindow > 0) makes the engine partition
	// Partition of its market: instead of dead_zone results it emits its
	// part of them (result.ZonePart), which the partitioned source
	// combines across partitions.
	DeadZoneParts bool
	Partition     int
	// Area, when set, is the market's service area: each courier's side
	// of it is followed (geo.Presence) and a move out or in is a
	// left_area or entered_area result. nil: no side, no H3 lookup per
	// position.
	Area *geo.Area
	// OnRows, when set, is called on the merger goroutine with the
	// accepted positions of each chunk of inputs (Row), in log order,
	// before any checkpoint barrier that follows them: the lake's feed.
	// The slice is reused after it returns. nil: no row is kept.
	OnRows func(rows []Row)
	// OnForget, when set, is called from the sequencer with every courier
	// that stops being tracked: forgotten after RestoreTTL, or evicted to
	// make room at MaxCouriers. Like OnPosition, it must not block.
	OnForget func(courier string)
	// OnSide, when set with Area, is called once per courier and engine
	// with the side of the area the courier is on (outside or inside) as
	// of the fix at ts, when that side is first known to this engine: the
	// courier's first fix out of the border band, or its first fix after
	// the engine was restored, unless that fix completes a move (then the
	// left_area or entered_area result says it). Later moves are results
	// only: the first side is no move (docs/semantics.md), and this is how
	// a live view learns it without an H3 lookup of its own. It is called
	// from the shards' goroutines, several at once: it must be safe for
	// concurrent use, cheap, and must not block.
	OnSide func(courier string, ts int64, outside bool)
}

// Input is one arrived message: a payload to decode, or a position
// already decoded (Position).
type Input struct {
	Payload []byte // not retained after Push returns
	Topic   string
	// Position, when not nil, is the input already decoded — a lake's row
	// replayed — and Push does not decode Payload: *Position is taken as
	// what the market's decoder gives for the payload, accepted
	// (position.OK). The caller vouches for that: every rule of contract
	// §2 that reads the payload alone must hold (position.Check), and values must be exactly the decoder's (a -0 coordinate is
	// 0, accuracy_m not usable is -1, Arrival and HasArrival as for a
	// replay line). What needs the engine applies as to any input: the
	// topic, max_future_skew, the courier limit. Not retained after Push
	// returns.
	Position *position.Position
	// AppendPayload, with Position, appends to dst the payload Position
	// was decoded from (or one that decodes to it): the raw of the input's
	// rejected record, were it rejected (courier_mismatch,
	// future_timestamp, courier_limit). It is called only then. nil:
	// Payload is the raw.
	AppendPayload func(dst []byte) []byte
	// Arrival is the processing time in ms (the live clock, or a WAL
	// record's). Without it, a replay line's own arrival_ms is used.
	Arrival    int64
	HasArrival bool
	// Line identifies the input in a rejected record's key: the line of a
	// replay file or the position in the write-ahead log.
	Line int64
}

// Sink receives results in output order, one chunk at a time, from a single
// goroutine. The slice is reused after Sink returns.
type Sink func([]result.Record)

// Engine processes one market. Push, Tick, Flush, Sync, Checkpoint,
// EndOfInput and Stop must be called from one goroutine.
//
// An engine ends in one of two ways, and only once: EndOfInput when the
// input is over (a replay: everything open fires), or Stop when processing
// stops but the input does not (a live shutdown: everything open stays
// open, to be restored from a checkpoint). Calls after the first are no-ops.
type Engine struct {
	cfg    Config
	params *params
	dec    position.Decoder
	wm     *watermark.Watermark
	track  *tracker
	items  int64 // inputs pushed so far

	shards []*shard
	zones  *zones // nil: dead zones off; the merger's
	free   chan *chunk
	merge  chan *chunk
	cur    *chunk
	wg     sync.WaitGroup
	closed bool

	received atomic.Int64
	accepted atomic.Int64
	evicted  atomic.Int64
	rejected [len(position.Reasons) + 1]atomic.Int64
	ignored  [len(position.MessageTypes)]atomic.Int64 // by position.MessageType
}

// params is the read-only configuration the shards share.
type params struct {
	market  string
	spec    window.Spec
	gap     int64
	filter  geo.Filter
	stopped float64
	res     int
	area    *geo.Area
	// log and hint: the rate-limited seconds hint of late positions.
	log    *slog.Logger
	hint   *ratelog.Limiter
	rows   bool // Config.OnRows is set: shards keep their accepted positions
	onSide func(courier string, ts int64, outside bool)
}

const inFlight = 4 // chunks between the sequencer and the merger

// hintEvery is how often at most the seconds hint is logged.
const hintEvery = time.Minute

// New starts an engine whose results go to sink.
func New(cfg Config, sink Sink) *Engine {
	if cfg.Shards <= 0 {
		cfg.Shards = runtime.NumCPU()
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 4096
	}
	if cfg.MaxCouriers <= 0 {
		cfg.MaxCouriers = DefaultMaxCouriers
	}
	if cfg.DeadZoneCells <= 0 {
		cfg.DeadZoneCells = defaults.DeadZoneCells
	}
	idle := max(tmath.Add(cfg.Size, cfg.AllowedLateness), cfg.Gap)
	spec := window.NewSpec(cfg.Size, cfg.Slide)
	spec.Lateness = cfg.AllowedLateness
	e := &Engine{
		cfg: cfg,
		params: &params{
			market: cfg.Market, spec: spec, gap: cfg.Gap,
			filter: cfg.Filter, stopped: cfg.StoppedBelowM, res: cfg.H3Resolution, area: cfg.Area,
			log: cfg.Log, hint: &ratelog.Limiter{Every: hintEvery}, rows: cfg.OnRows != nil,
			onSide: cfg.OnSide,
		},
		wm:    watermark.New(cfg.ToleratedDelay, cfg.IdleTimeout, cfg.MaxFutureSkew),
		track: newTracker(cfg.MaxCouriers, max(cfg.RestoreTTL, idle), idle, cfg.Shards),
		zones: newZones(&cfg),
		free:  make(chan *chunk, inFlight),
		merge: make(chan *chunk, inFlight),
	}
	for i := 0; i < inFlight; i++ {
		e.free <- newChunk(cfg.Shards)
	}
	for i := 0; i < cfg.Shards; i++ {
		s := newShard(i, e.params)
		e.shards = append(e.shards, s)
		e.wg.Add(1)
		go func() { defer e.wg.Done(); s.run() }()
	}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.runMerger(sink) }()
	return e
}

// Push processes one input: it is decoded and validated, makes room for a
// new courier or is refused (courier_limit), moves the watermark, and is
// routed to its courier's shard.
func (e *Engine) Push(in *Input) {
	c := e.chunk()
	seq := 2*e.items + 1
	e.items++
	e.received.Add(1)

	var p position.Position
	reason := e.decode(in, &p)
	switch {
	case in.HasArrival:
		e.clock(c, seq-1, in.Arrival)
	case p.HasArrival:
		e.clock(c, seq-1, p.Arrival)
	}
	if reason == position.Ignored {
		// Not a position: an arrival for the idle rule, nothing else.
		e.wm.Received()
		e.ignored[p.Type].Add(1)
		if c.inputs++; c.inputs >= e.cfg.ChunkSize {
			e.Flush()
		}
		return
	}
	if reason == position.OK && e.cfg.Topic != "" && e.cfg.Format == position.FormatEdgeproc {
		reason = position.CheckTopic(e.cfg.Topic, in.Topic, &p)
	}
	if reason == position.OK && e.wm.Future(p.TS) {
		reason = position.FutureTimestamp
	}
	e.wm.Received()
	now, _ := e.wm.Clock()
	var t *tracked
	if reason == position.OK {
		if t = e.track.byName[string(p.Courier)]; t == nil && e.track.full() {
			// Make room: the most idle courier goes if nothing of it is open.
			if old := e.track.expired(e.wm.Current(), e.track.idle); old != nil {
				e.evicted.Add(1)
				e.forget(c, seq)
			} else {
				reason = position.CourierLimit
			}
		}
	}
	if reason != position.OK {
		e.rejected[reason].Add(1)
		c.recs = append(c.recs, result.Record{
			Type: result.Rejected, Market: e.cfg.Market, EmittedAt: now,
			Order:  result.Order{Seq: seq},
			Reason: reason.String(), Field: p.Missing, Raw: rawOf(in), Line: in.Line,
		})
		if reason == position.CourierLimit {
			// Its timestamp still tells the time: a full table of silent
			// couriers must not freeze event time (contract §3).
			e.observe(c, seq, nil, p.TS)
		}
	} else {
		e.accepted.Add(1)
		if t == nil {
			t = e.track.add(string(p.Courier), p.TS, shardOf(p.Courier, len(e.shards)))
		} else {
			t.latest = max(t.latest, p.TS)
		}
		c.events[t.shard] = append(c.events[t.shard], event{
			seq: seq, line: in.Line, ts: p.TS, lat: p.Lat, lon: p.Lon, acc: geo.Accuracy(max(p.Accuracy, 0)), rawAcc: p.Accuracy,
			wm: e.wm.Current(), clock: now, off: uint32(len(c.names)), n: uint8(len(p.Courier)), slot: t.slot,
		})
		c.names = append(c.names, p.Courier...)
		e.observe(c, seq, t, p.TS)
		if e.cfg.OnPosition != nil {
			e.cfg.OnPosition(p.Courier, p.TS, p.Lat, p.Lon)
		}
	}
	if c.inputs++; c.inputs >= e.cfg.ChunkSize {
		e.Flush()
	}
}

// observe applies a position's timestamp to the watermark (which counts it
// at its effective timestamp, min(ts, arrival)), unless it is a duplicate.
// t is its tracked courier, nil for a refused position.
//
// Duplicates are decided by the shards, but only a duplicate above max_ts
// could move the watermark, and such a copy's original is one of t.ahead.
func (e *Engine) observe(c *chunk, seq int64, t *tracked, ts int64) {
	maxTS := e.wm.MaxTS()
	if ts <= maxTS {
		return // t.ahead keeps its stale entries until one is not
	}
	if t != nil && t.ahead != nil && t.isAhead(ts, maxTS) {
		return
	}
	if e.wm.Observe(ts) {
		e.stepped(c, seq)
	}
	if t != nil && ts > e.wm.MaxTS() {
		t.addAhead(ts)
	}
}

// stepped records a watermark step at input seq and forgets every courier
// it makes forgettable.
func (e *Engine) stepped(c *chunk, seq int64) {
	wm := e.wm.Current()
	now, _ := e.wm.Clock()
	c.steps = append(c.steps, step{seq: seq, wm: wm, clock: now})
	for e.track.expired(wm, e.track.ttl) != nil {
		e.forget(c, seq)
	}
}

// forget stops tracking the tracker's top courier and tells its shard to
// drop it, in sequence with its positions.
func (e *Engine) forget(c *chunk, seq int64) {
	t := e.track.top()
	e.track.removeTop()
	if e.cfg.OnForget != nil {
		e.cfg.OnForget(t.name)
	}
	c.events[t.shard] = append(c.events[t.shard], event{
		seq: seq, wm: e.wm.Current(), forget: true, off: uint32(len(c.names)), n: uint8(len(t.name)), slot: t.slot,
	})
	c.names = append(c.names, t.name...)
}

// clock moves the processing clock to now, applying the idle rule first
// (after a gap longer than DeafGap, none of it counts as silence).
func (e *Engine) clock(c *chunk, seq, now int64) {
	if g := e.cfg.DeafGap; g > 0 {
		if prev, ok := e.wm.Clock(); ok && now-prev > g {
			e.wm.Listen(now)
		}
	}
	if e.wm.Idle(now) {
		e.stepped(c, seq)
	}
}

// rawOf is what in's rejected record carries: its payload, truncated
// (result.TruncateRaw), in a slice of its own.
func rawOf(in *Input) []byte {
	raw := in.Payload
	if in.Position != nil && in.AppendPayload != nil {
		raw = in.AppendPayload(nil)
	}
	return append([]byte(nil), result.TruncateRaw(raw)...)
}

// decode reads in's payload in the market's format (contract §2), or
// takes its Position as decoded.
func (e *Engine) decode(in *Input, p *position.Position) position.Reason {
	if in.Position != nil {
		*p = *in.Position
		return position.OK
	}
	if e.cfg.Format == position.FormatOwnTracks {
		return e.dec.DecodeOwnTracks(in.Payload, in.Topic, e.cfg.Topic, e.cfg.CourierLevel, p)
	}
	return e.dec.Decode(in.Payload, p)
}

// Tick applies the idle rule at processing time now (the live service calls
// it on a ticker) and hands what is pending to the shards.
func (e *Engine) Tick(now int64) {
	e.clock(e.chunk(), 2*e.items, now)
	e.Flush()
}

// Apply applies one entry of a market's log, at its place there (a
// write-ahead-log index, or a partition's stream sequence: the line of a
// rejected record's key, the same whenever the entry is applied): a
// position arrives at its arrival, a tick applies the idle rule then, a
// listen says the source could hear from then on. Every source applies
// its log through here, live and when a recovery or a new owner replays
// it.
func (e *Engine) Apply(index uint64, en entry.Entry) {
	switch en.Kind {
	case entry.Position:
		in := EntryInput(index, en)
		e.Push(&in)
	case entry.Tick:
		e.Tick(en.Arrival)
	case entry.Listen:
		e.Listen(en.Arrival)
	}
}

// EntryInput is the input a position entry of a log is, at its place
// index.
func EntryInput(index uint64, en entry.Entry) Input {
	return Input{Payload: en.Payload, Topic: en.Topic, Arrival: en.Arrival, HasArrival: true, Line: int64(index)}
}

// Listen records that the live source (re)started listening at processing
// time now: silence before now does not count for the idle rule (contract
// §3, deaf is not silent).
func (e *Engine) Listen(now int64) { e.wm.Listen(now) }

// TickDue reports whether a Tick at processing time now would move the
// watermark to or past the earliest timer of any shard (a window to fire,
// a session to close) or the time the most idle courier is forgotten, so
// that a silent market logs and applies ticks only when one changes
// something. The shards' timers are read as of their last chunk: a timer
// still in flight is seen one call later.
func (e *Engine) TickDue(now int64) bool {
	v, ok := e.wm.IdleAt(now)
	if !ok || v <= e.wm.Current() {
		return false
	}
	next := int64(tmath.Forever)
	for _, s := range e.shards {
		next = min(next, s.next.Load())
	}
	if t := e.track.top(); t != nil {
		next = min(next, tmath.Add(t.latest, e.track.ttl))
	}
	return v >= next
}

// Flush hands the inputs pushed so far to the shards.
func (e *Engine) Flush() {
	if e.cur != nil {
		e.dispatch(e.take())
	}
}

// Sync hands the inputs pushed so far to the shards and waits until the
// sink has received every result they cause.
func (e *Engine) Sync() {
	e.Flush()
	var held [inFlight]*chunk
	for i := range held { // every chunk back in the free list: all are done
		held[i] = <-e.free
	}
	for _, c := range held {
		e.free <- c
	}
}

// EndOfInput ends the input: the watermark goes to +∞, everything open
// fires (contract §3, end of a replay), and EndOfInput returns once the
// sink has received every result. The engine is then stopped.
func (e *Engine) EndOfInput() {
	if e.closed {
		return
	}
	c := e.take() // shards first catch up with the inputs, then flush
	e.wm.End()
	now, _ := e.wm.Clock()
	c.steps = append(c.steps, step{seq: 2 * e.items, wm: tmath.Forever, clock: now})
	c.endOfInput = true
	e.dispatch(c)
	e.Stop()
}

// Stop hands over what is pending and waits for the sink to receive it,
// without ending the input: open windows and sessions stay open and
// nothing fires for them. It is the shutdown of a live service, whose input
// goes on after a restart.
func (e *Engine) Stop() {
	if e.closed {
		return
	}
	e.closed = true
	e.Flush()
	for _, s := range e.shards {
		close(s.in)
	}
	close(e.merge)
	e.wg.Wait()
}

// chunk returns the open chunk, taking a free one (and waiting for it: the
// backpressure of Push) if none is open.
func (e *Engine) chunk() *chunk {
	if e.cur == nil {
		e.cur = <-e.free
	}
	return e.cur
}

// take closes the open chunk (an empty one if none is open) at the current
// watermark, for dispatch.
func (e *Engine) take() *chunk {
	c := e.chunk()
	e.cur = nil
	c.wm = e.wm.Current()
	return c
}

func (e *Engine) dispatch(c *chunk) {
	for _, s := range e.shards {
		s.in <- c
	}
	e.merge <- c
}

// shardOf maps a courier to a shard. Any stable hash does: results do not
// depend on the assignment.
func shardOf[T string | []byte](courier T, n int) int {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(courier); i++ {
		h = (h ^ uint32(courier[i])) * 16777619
	}
	return int(h % uint32(n))
}
