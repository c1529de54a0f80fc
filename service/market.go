package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/ratelog"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/mqtt"
	"github.com/km0/edgeproc/result"
	"github.com/km0/edgeproc/wal"
)

const (
	// queueCap bounds the durable log entries waiting for the engine. When
	// it is full the log's goroutine waits, the log's own bound (4 × its
	// MaxBatch) then blocks Append in the MQTT handler, paho stops reading,
	// and the broker keeps the rest in the session queue (it stops at
	// Receive Maximum).
	queueCap = 1024
	// tickEvery is how often the idle-source rule is considered on the wall
	// clock.
	tickEvery = 100 * time.Millisecond
	// openRetryMax caps the delay between two attempts to open the stream
	// while NATS is unreachable at start.
	openRetryMax = 5 * time.Second
	// setupTimeout bounds one attempt to create the stream and bucket.
	setupTimeout = 10 * time.Second
)

// durable is a write-ahead-log entry that is on disk, on its way to the
// engine: a message (msg set, acked once pushed) or an idle tick (msg nil).
type durable struct {
	index   uint64
	arrival int64 // ms
	msg     *mqtt.Message
	err     error // the log could not make the entry durable
}

// market runs one configured market: MQTT source → write-ahead log → one
// ingest goroutine owning the engine → sink → bridge, and a checkpointer.
type market struct {
	cfg  config.Config
	log  *slog.Logger
	deps *Deps
	nc   *nats.Conn

	// in carries durable entries, in log index order, from the log's
	// goroutine to the ingest goroutine. Closed at shutdown once the log
	// has nothing more to hand over.
	in chan durable
	// stopIntake is closed at shutdown: the ticker goroutine stops.
	stopIntake chan struct{}

	br  atomic.Pointer[bridge.Bridge]
	src atomic.Pointer[mqtt.Source]
	eng atomic.Pointer[engine.Engine]
	wal atomic.Pointer[wal.Log]

	// appendMu orders appends (MQTT handler, idle ticker) and owns the
	// processing clock, so arrivals never decrease in log order.
	appendMu sync.Mutex
	clock    int64 // ms, the latest arrival appended
	lastMsg  int64 // ms, the arrival of the latest message (not tick)
	stopped  bool  // intake has stopped: nothing more is appended

	// Owned by the ingest goroutine.
	applied  uint64 // the last log index handed to the engine
	ckptTag  uint64 // the tag of the last checkpoint started
	fatalErr error

	ckpt ckptState

	// Owned by the engine's merger goroutine (the sink).
	buf      []byte
	subjects [len(result.Types)]string
	pubCtx   context.Context // ends when the shutdown drain deadline passes
	lost     atomic.Int64    // results the sink could not hand to the bridge
	errLog   ratelog.Limiter

	board *board.Feed // nil: http.board off; set by attachBoard before run
}

func newMarket(cfg config.Config, nc *nats.Conn, deps *Deps) *market {
	return &market{
		cfg:        cfg,
		log:        deps.Log.With("market", cfg.Market),
		deps:       deps,
		nc:         nc,
		in:         make(chan durable, queueCap),
		stopIntake: make(chan struct{}),
		errLog:     ratelog.Limiter{Every: 5 * time.Second},
		ckpt:       ckptState{jobs: make(chan ckptJob, 1)},
	}
}

// snapshot is the market's state for metrics and readiness.
func (m *market) snapshot() metrics.Snapshot {
	s := metrics.Snapshot{QueueDepth: len(m.in), QueueCapacity: cap(m.in)}
	if e := m.eng.Load(); e != nil {
		s.Engine, s.HasEngine = e.Stats(), true
	}
	if b := m.br.Load(); b != nil {
		s.Bridge, s.HasBridge, s.StreamReady = b.Stats(), true, true
	}
	if src := m.src.Load(); src != nil {
		s.MQTT, s.HasMQTT = src.Stats(), true
	}
	if l := m.wal.Load(); l != nil {
		s.Durability, s.HasDurability = m.ckpt.metrics(l.Stats()), true
	}
	return s
}

// ready reports whether the market can do its job: MQTT and NATS connected
// and its stream created.
func (m *market) ready() bool {
	b, src := m.br.Load(), m.src.Load()
	return b != nil && src != nil && b.Connected() && src.Connected()
}

// run starts the market and keeps it running until ctx ends, then shuts it
// down: intake stops, every entry already in the write-ahead log reaches
// the engine, the engine hands over what it has, the bridge waits (at most
// drain) for the acks of every result, a final checkpoint is written, and
// the log is closed.
func (m *market) run(ctx context.Context, drain time.Duration) error {
	m.warnDuplicateWindow()
	br, err := m.openBridge(ctx)
	if err != nil || br == nil {
		return err // nil error: ctx ended before NATS was ever reachable
	}
	m.br.Store(br)

	pubCtx, cancelPub := context.WithCancel(context.Background())
	defer cancelPub()
	m.pubCtx = pubCtx
	for _, t := range result.Types {
		m.subjects[t] = br.Config().Subject(t.String())
	}
	ecfg := EngineConfig(m.cfg)
	ecfg.Topic = m.cfg.MQTT.Topic
	ecfg.Shards = m.deps.Shards
	// The bridge coalesces positions per courier and computes the cell
	// when it writes, so this stays a map lookup per position.
	ecfg.OnPosition = m.onPosition(br)

	eng, err := m.recover(ecfg)
	if err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		_ = br.Close(closeCtx)
		return fmt.Errorf("market %s: recover: %w", m.cfg.Market, err)
	}
	m.eng.Store(eng)
	log := m.wal.Load()

	// failCtx ends the market on a write-ahead-log failure: nothing can be
	// acknowledged any more.
	runCtx, fail := context.WithCancel(ctx)
	defer fail()
	ckptDone := make(chan struct{})
	go func() {
		defer close(ckptDone)
		m.checkpointer(runCtx, br, log)
	}()
	ingestDone := make(chan struct{})
	go func() {
		defer close(ingestDone)
		m.ingest(eng, fail)
	}()
	tickDone := make(chan struct{})
	go func() {
		defer close(tickDone)
		m.ticker()
	}()

	url := m.cfg.MQTT.URL
	if url == Embedded {
		url = m.deps.MQTTURL
	}
	src, err := mqtt.Start(runCtx, mqtt.Config{
		URL: url, Topic: m.cfg.MQTT.Topic, ClientID: m.cfg.MQTT.ClientID,
		Username: m.cfg.MQTT.Username, Password: m.cfg.MQTT.Password(),
		CAFile: m.cfg.MQTT.CAFile, SessionExpiry: m.cfg.MQTT.SessionExpiry,
	}, m.log, m.handle)
	if err != nil {
		err = fmt.Errorf("market %s: start mqtt: %w", m.cfg.Market, err)
	} else {
		m.src.Store(src)
		m.log.Info("market running", "mqtt", url, "topic", m.cfg.MQTT.Topic, "stream", br.Config().Stream)
		<-runCtx.Done()
	}

	start := time.Now()
	// Past the drain deadline a result that cannot be published is given up
	// (counted and logged, and no checkpoint is written past it): shutdown
	// must end even if NATS never returns.
	stopPub := time.AfterFunc(drain, cancelPub)
	defer stopPub.Stop()
	closeCtx, cancel := context.WithDeadline(context.Background(), start.Add(drain))
	defer cancel()

	// Intake stops: a handler blocked in Append finishes, later ones return
	// without acking (the broker redelivers after the restart).
	m.appendMu.Lock()
	m.stopped = true
	m.appendMu.Unlock()
	close(m.stopIntake)
	<-tickDone
	// Every appended entry made durable and handed to the ingest goroutine,
	// which pushes them all, takes the final snapshot and stops the engine.
	syncErr := log.Sync()
	close(m.in)
	<-ingestDone
	<-ckptDone

	var srcErr error
	if src != nil {
		// Acks given so far get their last flush here.
		srcErr = src.Close(closeCtx)
	}
	ckErr := m.finalCheckpoint(closeCtx, br, log)
	brErr := br.Close(closeCtx)
	walErr := log.Close()
	if n := m.lost.Load(); n > 0 {
		m.log.Error("results not handed to NATS before the shutdown deadline; the write-ahead log keeps their inputs for the next start", "lost", n)
	}
	m.log.Info("market stopped", "took", time.Since(start).Round(time.Millisecond))
	if err == nil && m.fatalErr != nil {
		err = fmt.Errorf("market %s: %w", m.cfg.Market, m.fatalErr)
	}
	if err == nil && (srcErr != nil || brErr != nil) {
		err = fmt.Errorf("market %s: shutdown: mqtt: %v; nats: %w", m.cfg.Market, srcErr, brErr)
	}
	return errors.Join(err, wrapErr(m.cfg.Market, "sync write-ahead log", syncErr), ckErr,
		wrapErr(m.cfg.Market, "close write-ahead log", walErr))
}

func wrapErr(market, what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("market %s: %s: %w", market, what, err)
}

// openBridge creates the stream and bucket, retrying while NATS is
// unreachable. It returns nil, nil if ctx ends first.
func (m *market) openBridge(ctx context.Context) (*bridge.Bridge, error) {
	cfg := bridge.Config{
		Market: m.cfg.Market, SubjectPrefix: m.cfg.NATS.SubjectPrefix, Stream: m.cfg.NATS.Stream,
		DuplicateWindow: m.cfg.NATS.DuplicateWindow,
		ComputeCell:     true, CellResolution: m.cfg.Geo.H3Resolution,
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("market %s: %w", m.cfg.Market, err)
	}
	delay := 250 * time.Millisecond
	for {
		octx, cancel := context.WithTimeout(ctx, setupTimeout)
		br, err := bridge.Open(octx, m.nc, cfg, m.log)
		cancel()
		if err == nil {
			return br, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		m.log.Warn("cannot open the JetStream stream yet, retrying", "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(delay):
		}
		delay = min(2*delay, openRetryMax)
	}
}

// handle is the MQTT handler: it stamps the arrival and appends the
// message to the write-ahead log. The message is pushed and acked by the
// ingest goroutine once the log says it is durable. Append blocks while
// the log has too much not yet durable (backpressure).
func (m *market) handle(msg *mqtt.Message) {
	m.appendMu.Lock()
	defer m.appendMu.Unlock()
	if m.stopped {
		return // not acked: the broker redelivers it after the restart
	}
	m.clock = max(m.clock, m.deps.Clock().UnixMilli())
	m.lastMsg = m.clock
	m.appendLocked(wal.Entry{Arrival: m.clock, Topic: msg.Topic, Payload: msg.Payload}, msg)
}

// ticker appends an idle tick to the log every tickEvery while the market
// has been silent for windows.idle_timeout, so that a recovery replays the
// idle rule exactly where the live run applied it. Without an idle timeout
// ticks change nothing and none is logged.
func (m *market) ticker() {
	idle := m.cfg.Windows.IdleTimeout.Milliseconds()
	if idle <= 0 {
		return
	}
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stopIntake:
			return
		case <-t.C:
			m.appendMu.Lock()
			now := max(m.clock, m.deps.Clock().UnixMilli())
			if !m.stopped && now-m.lastMsg >= idle {
				m.clock = now
				m.appendLocked(wal.Entry{Arrival: now}, nil)
			}
			m.appendMu.Unlock()
		}
	}
}

// appendLocked appends e; the done callback, called by the log's goroutine
// in index order, forwards it to the ingest goroutine. appendMu is held.
func (m *market) appendLocked(e wal.Entry, msg *mqtt.Message) {
	arrival := e.Arrival
	_, err := m.wal.Load().Append(e, func(i uint64, err error) {
		m.in <- durable{index: i, arrival: arrival, msg: msg, err: err}
	})
	if err != nil && !errors.Is(err, wal.ErrClosed) {
		if ok, n := m.errLog.Allow(); ok {
			m.log.Error("write-ahead log append failed; message not acknowledged", "err", err, "suppressed", n)
		}
	}
}

// ingest owns the engine: it pushes durable log entries in index order and
// acks their messages, flushes whenever none is waiting (latency over
// batching), and starts a checkpoint every state.checkpoint_interval. When
// m.in is closed it takes the final snapshot and stops the engine, which
// hands every pending result to the sink. fail ends the market when the
// log reports that an entry could not be made durable.
func (m *market) ingest(eng *engine.Engine, fail context.CancelFunc) {
	t := time.NewTicker(m.cfg.State.CheckpointInterval)
	defer t.Stop()
	defer eng.Stop()
	for {
		select {
		case d, open := <-m.in:
			// Take everything already waiting, then hand it to the shards.
			for waiting := open; waiting; {
				m.apply(eng, d, fail)
				select {
				case d, open = <-m.in:
					waiting = open
				default:
					waiting = false
				}
			}
			if !open {
				m.snapshotFinal(eng)
				return
			}
			eng.Flush()
		case <-t.C:
			m.startCheckpoint(eng)
		}
	}
}

// apply hands one durable entry to the engine, then acks its message.
func (m *market) apply(eng *engine.Engine, d durable, fail context.CancelFunc) {
	if d.err != nil {
		// The log failed for good (it fails every later entry too): the
		// message stays unacked, and the market stops.
		if m.fatalErr == nil {
			m.fatalErr = fmt.Errorf("write-ahead log: %w", d.err)
			m.log.Error("write-ahead log failed; stopping the market", "index", d.index, "err", d.err)
			fail()
		}
		return
	}
	if d.msg == nil {
		eng.Tick(d.arrival)
	} else {
		m.push(eng, d.index, d.arrival, d.msg.Topic, d.msg.Payload)
		d.msg.Ack()
	}
	m.applied = d.index
}

// push hands a logged message to the engine; its log index is the line of
// a rejected record's key, so that key is the same after a recovery.
func (m *market) push(eng *engine.Engine, index uint64, arrival int64, topic string, payload []byte) {
	in := engine.Input{
		Payload: payload, Topic: topic,
		Arrival: arrival, HasArrival: true, Line: int64(index),
	}
	if m.deps.Record != nil {
		m.deps.Record(m.cfg.Market, in)
	}
	eng.Push(&in)
}

// sink publishes the engine's results, in order, from the merger
// goroutine. Blocking in Publish (too many results awaiting their ack) is
// the backpressure path back to the engine and to MQTT.
func (m *market) sink(rs []result.Record) {
	br := m.br.Load()
	for i := range rs {
		r := &rs[i]
		m.buf = r.AppendJSON(m.buf[:0])
		if err := br.Publish(m.pubCtx, m.subjects[r.Type], r.Key(), m.buf); err != nil {
			m.lost.Add(1)
			if ok, n := m.errLog.Allow(); ok {
				m.log.Error("result not published", "key", r.Key(), "err", err, "suppressed", n)
			}
		}
		switch r.Type {
		case result.NoSignal:
			br.MarkNoSignal(r.Courier, r.End, r.Lat, r.Lon)
		case result.SignalRestored:
			br.MarkOnline(r.Courier)
		}
	}
	m.board.Results(rs)
}
