package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/ratelog"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/mqtt"
	"github.com/km0/edgeproc/wal"
)

const (
	// tickEvery is how often the idle-source rule is considered on the wall
	// clock, and how often the intake looks for a new subscription.
	tickEvery = 100 * time.Millisecond
	// setupTimeout bounds one attempt to create the stream and bucket.
	setupTimeout = 10 * time.Second
)

// market runs one configured market as four parts, each owning its own
// state, with data flowing one way:
//
//	intake (MQTT) → log (WAL) → driver (engine) → sink (JetStream, KV)
//
// The only things that flow back are plain facts: "durable up to index N"
// (the log's done callbacks, which make the driver ack), and "acked up to
// the barrier" (the sink's Flush, before a checkpoint truncates the log).
// The market starts the parts in that order, stops them in reverse,
// reports why it is not ready, and records the first error that ends it.
type market struct {
	cfg  config.Config
	log  *slog.Logger
	deps *Deps

	in  *intake
	drv *driver
	snk *sink
	wal atomic.Pointer[wal.Log]
	eng atomic.Pointer[engine.Engine] // for metrics, once recovered

	ckpt ckptState

	// phase is what the market is doing, for readiness before it runs.
	phase atomic.Pointer[string]
	// dead is the error that ended the market before it was asked to
	// stop; /healthz fails while it is set.
	dead atomic.Pointer[error]
}

var (
	phaseOpening    = "nats: opening the stream"
	phaseRecovering = "recovering state"
	phaseRunning    = ""
	phaseStopping   = "stopping"
)

func newMarket(cfg config.Config, nc *nats.Conn, deps *Deps) *market {
	log := deps.Log.With("market", cfg.Market)
	m := &market{
		cfg:  cfg,
		log:  log,
		deps: deps,
		ckpt: ckptState{jobs: make(chan ckptJob, 1)},
	}
	m.snk = &sink{cfg: cfg, log: log, nc: nc, errLog: ratelog.Limiter{Every: 5 * time.Second}}
	in := make(chan []durable, queueBatches)
	m.drv = &driver{cfg: cfg, log: log, record: deps.Record, in: in, h: newHandoff(in),
		clock: deps.Clock, checkpoint: m.startCheckpoint, final: m.snapshotFinal}
	mcfg := mqtt.ConfigFrom(cfg.MQTT)
	if mcfg.URL == Embedded {
		mcfg.URL = deps.MQTTURL
	}
	m.in = &intake{
		cfg: mcfg,
		log: log, clock: deps.Clock, errLog: ratelog.Limiter{Every: 5 * time.Second},
		durable: m.drv.h.add,
	}
	m.drv.tick = m.in.tick
	m.phase.Store(&phaseOpening)
	return m
}

// snapshot is the market's state for metrics.
func (m *market) snapshot() metrics.Snapshot {
	s := metrics.Snapshot{
		QueueDepth: int(m.drv.h.queued.Load()), QueueCapacity: queueBatches * 4 * m.cfg.State.WALBatchMax,
		Ready: m.notReady() == "", Failed: m.dead.Load() != nil,
	}
	if e := m.eng.Load(); e != nil {
		s.Engine, s.HasEngine = e.Stats(), true
	}
	if b := m.snk.br.Load(); b != nil {
		s.Bridge, s.HasBridge, s.StreamReady = b.Stats(), true, b.StreamReady()
		s.ResultLatency, s.HasResultLatency = m.snk.ackLatency.Snapshot(), true
	}
	if src := m.in.src.Load(); src != nil {
		s.MQTT, s.HasMQTT = src.Stats(), true
	}
	if l := m.wal.Load(); l != nil {
		s.Durability, s.HasDurability = m.ckpt.metrics(l.Stats()), true
	}
	return s
}

// notReady says why the market cannot do its job now, or "" when it can:
// it is running, hears its broker and can deliver to its stream.
func (m *market) notReady() string {
	if err := m.dead.Load(); err != nil {
		return "dead: " + (*err).Error()
	}
	if p := *m.phase.Load(); p != phaseRunning {
		return p
	}
	if r := m.snk.ready(); r != "" {
		return r
	}
	if l := m.wal.Load(); l != nil {
		if st := l.Stats(); st.Stalled {
			return "disk: write-ahead log stalled, nothing is acknowledged: " + st.StallCause
		}
	}
	return m.in.ready()
}

// die records the error that ends the market and says so at once.
func (m *market) die(err error) {
	if m.dead.CompareAndSwap(nil, &err) {
		m.log.Error("market failed and stops; /healthz reports it", "err", err)
	}
}

// run runs the market until ctx ends or it fails, then shuts it down. A
// failure is logged at once and kept for /healthz; run returns it.
func (m *market) run(ctx context.Context, drain time.Duration) error {
	err := m.serve(ctx, drain)
	if err == nil {
		return nil
	}
	// /healthz and the log name the market already: the cause alone there,
	// the market's name for the caller, which joins several markets' errors.
	m.die(err)
	return fmt.Errorf("market %s: %w", m.cfg.Market, err)
}

// serve starts the parts in order — sink, log and driver (recovery), then
// intake — and keeps them running until ctx ends or a part fails. Then it
// stops them in reverse: intake stops appending, every entry already in the
// log reaches the engine, the engine hands over what it has, the sink
// waits (at most drain) for the acks of every result, a final checkpoint is
// written, and the log is closed.
func (m *market) serve(ctx context.Context, drain time.Duration) error {
	m.warnDuplicateWindow()
	ok, err := m.snk.open(ctx)
	if err != nil || !ok {
		return err // nil: ctx ended before NATS was ever reachable
	}
	defer m.snk.cancelPub()

	m.phase.Store(&phaseRecovering)
	ecfg := engine.ConfigFrom(m.cfg)
	ecfg.Topic = m.cfg.MQTT.Topic
	ecfg.Shards = m.deps.Shards
	// The bridge coalesces positions per courier and computes the cell
	// when it writes, so this stays a map lookup per position; the board
	// gets the same positions at the same point.
	ecfg.OnPosition = m.snk.out.Position
	ecfg.OnForget = m.snk.out.Forget
	ecfg.OnSide = m.snk.out.Side
	if err := m.recover(ecfg); err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		_ = m.snk.close(closeCtx)
		return fmt.Errorf("recover: %w", err)
	}
	log := m.wal.Load()
	m.in.wal = log
	m.eng.Store(m.drv.eng)

	// runCtx ends the market when a part fails.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// Started upstream last, so stopped first: the intake's watch, then
	// the driver (once the log has handed it every durable entry), then
	// the checkpointer.
	var parts stopper
	parts.Go(func() { m.checkpointer(runCtx) }, stop)
	var syncErr error
	parts.Go(func() { m.drv.run(func() { m.die(m.drv.fatal); stop() }) }, func() {
		// Every appended entry made durable and handed to the driver,
		// which applies them all, takes the final snapshot and stops the
		// engine.
		syncErr = log.Sync()
		close(m.drv.in)
	})
	watchCtx, stopWatch := context.WithCancel(runCtx)
	parts.Go(func() { m.in.watch(watchCtx) }, stopWatch)

	var startErr error
	if err := m.in.start(runCtx); err != nil {
		startErr = fmt.Errorf("start mqtt: %w", err)
		m.die(startErr)
	} else {
		m.phase.Store(&phaseRunning)
		m.log.Info("market running", "mqtt", m.in.cfg.URL, "topic", m.cfg.MQTT.Topic, "stream", m.snk.br.Load().Config().Stream)
		<-runCtx.Done()
	}
	m.phase.Store(&phaseStopping)
	stop()

	start := time.Now()
	stopPub := time.AfterFunc(drain, m.snk.cancelPub)
	defer stopPub.Stop()
	closeCtx, cancel := context.WithDeadline(context.Background(), start.Add(drain))
	defer cancel()

	m.in.stop()
	parts.Stop()

	srcErr := m.in.close(closeCtx) // acks given so far get their last flush
	m.finalCheckpoint(closeCtx)
	brErr := m.snk.close(closeCtx)
	walErr := log.Close()
	if n := m.snk.lost.Load(); n > 0 {
		m.log.Error("results not handed to NATS before the shutdown deadline; the write-ahead log keeps their inputs for the next start", "lost", n)
	}
	m.log.Info("market stopped", "took", time.Since(start).Round(time.Millisecond))
	err = startErr
	if err == nil && m.drv.fatal != nil {
		err = m.drv.fatal
	}
	if err == nil && (srcErr != nil || brErr != nil) {
		err = fmt.Errorf("shutdown: mqtt: %v; nats: %w", srcErr, brErr)
	}
	return errors.Join(err, wrapErr("sync write-ahead log", syncErr), wrapErr("close write-ahead log", walErr))
}

func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
