// Package mqttsource is the single-process source of a market (config
// source: mqtt): an MQTT persistent session feeds the market's engine
// through a local write-ahead log. It is one of the two peers that run in
// the market shell (package market); the other is package partition.
//
// The data path is three parts, each owning its state, data flowing one
// way, results leaving through the shell's sink:
//
//	intake (MQTT handler) ─Append─▶ log (write-ahead, group commit) ─done, in index order─▶
//	    bounded channel ─▶ driver (owns the engine) ─▶ market.Sink ─▶ JetStream, KV, board
//
// The intake stamps each message's arrival (wall clock, never decreasing)
// and appends it to the market's write-ahead log (state.dir/wal). Only once
// its batch is fsynced (state.wal_sync) does the log hand it, in index
// order, to the driver, which applies it to the engine with its log index
// (engine.Apply: the rejected record's key, the same after a recovery) and
// only then acks it to the broker (contract §8). Every log entry, live or
// replayed, goes through one driver.apply.
//
// Entries are of three kinds (package entry): a position, a tick (the
// idle rule applied at its arrival), and a listen (contract §3, deaf is
// not silent): the intake logs one before the first message of every new
// MQTT connection, or as soon as its subscription is granted, and appends
// ticks only while connected and subscribed, so an outage never advances
// event time by itself. A silent market logs nothing: the driver asks for
// a tick only when the idle rule would reach the earliest timer of a
// shard (engine.TickDue).
//
// Every state.checkpoint_interval the driver sends a barrier through the
// engine; the snapshot is handed, without blocking, to a checkpointer
// goroutine, which waits until JetStream has acked every result emitted
// up to the barrier (the log after a checkpoint is the outbox of the
// results emitted since), writes the checkpoint atomically
// (state.dir/checkpoints, package checkpoint) and truncates the log up to
// the previous checkpoint, kept as a fallback. At start the newest good
// checkpoint is restored (market.Recover), the log after it replayed, and
// the re-derived results re-published with the same keys, which
// JetStream's duplicate window drops.
//
// Shutdown stops intake, syncs the log and applies every durable entry,
// takes a final snapshot, stops the engine, and writes the final
// checkpoint if every result was acked within the market's drain. Nothing
// is unbounded: when NATS is slow or away the bridge's in-flight bound
// blocks the sink, the engine blocks Push, the channel fills, the log's
// own bound blocks Append in the handler, and the broker keeps the rest in
// the session queue (contract §7).
package mqttsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/ratelog"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/wal"
)

// tickEvery is how often the idle-source rule is considered on the wall
// clock, and how often the intake looks for a new subscription.
const tickEvery = 100 * time.Millisecond

// Deps are what a Source gets from the process rather than from the
// configuration. Every field is optional.
type Deps struct {
	// MQTTURL is the broker when mqtt.url is "embedded".
	MQTTURL string
	// Clock is the processing clock that stamps arrivals and drives the
	// idle rule. Default time.Now.
	Clock func() time.Time
	// Record, when set, is called by the driver goroutine with every input
	// just before it is applied (live, and again when a recovery replays
	// the log), arrival and log index (Line) filled in (for tests: a
	// replay of the recorded inputs must give the same results). It must
	// not modify or retain in.Payload beyond the call unless it copies it;
	// it blocks the market while it runs.
	Record func(market string, in engine.Input)
	// Shards is the number of shard goroutines of the engine. Default (0)
	// runtime.NumCPU().
	Shards int
}

// Source is a market's MQTT session and write-ahead log: intake, log and
// driver, each owning its state. It implements market.Source.
type Source struct {
	cfg config.Config
	log *slog.Logger
	mkt *market.Market // set by Run

	in   *intake
	drv  *driver
	wal  atomic.Pointer[wal.Log]
	eng  atomic.Pointer[engine.Engine] // for metrics, once recovered
	lake *lake.Feed                    // nil without lake.dir; set by Run before recover

	ckpt ckptState
}

var _ market.Source = (*Source)(nil)

// New returns the source of cfg (source mqtt); log gets its logs, with
// the market's name.
func New(cfg config.Config, log *slog.Logger, deps Deps) *Source {
	if deps.Clock == nil {
		deps.Clock = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("market", cfg.Market)
	s := &Source{cfg: cfg, log: log}
	in := make(chan []durable, queueBatches)
	s.drv = &driver{cfg: cfg, log: log, record: deps.Record, shards: deps.Shards, in: in, h: newHandoff(in),
		clock: deps.Clock, checkpoint: s.startCheckpoint, final: s.snapshotFinal}
	mcfg := market.MQTTConfig(cfg.MQTT)
	if mcfg.URL == "embedded" {
		mcfg.URL = deps.MQTTURL
	}
	s.in = &intake{
		cfg: mcfg,
		log: log, clock: deps.Clock, errLog: ratelog.Limiter{Every: 5 * time.Second},
		durable: s.drv.h.add,
	}
	s.drv.tick = s.in.tick
	return s
}

// Stats adds the source's figures to snap.
func (s *Source) Stats(snap *metrics.Snapshot) {
	snap.QueueDepth, snap.QueueCapacity = int(s.drv.h.queued.Load()), queueBatches*4*s.cfg.State.WALBatchMax
	if e := s.eng.Load(); e != nil {
		snap.Engine, snap.HasEngine = e.Stats(), true
	}
	if src := s.in.src.Load(); src != nil {
		snap.MQTT, snap.HasMQTT = src.Stats(), true
	}
	if l := s.wal.Load(); l != nil {
		snap.Durability, snap.HasDurability = s.ckpt.metrics(l.Stats()), true
	}
}

// NotReady says why the source cannot hear or make positions durable, or
// "" when it can.
func (s *Source) NotReady() string {
	if l := s.wal.Load(); l != nil {
		if st := l.Stats(); st.Stalled {
			return "disk: write-ahead log stalled, nothing is acknowledged: " + st.StallCause
		}
	}
	return s.in.ready()
}

// Extend adds nothing: the source has no endpoint of its own.
func (s *Source) Extend(*http.ServeMux, *prometheus.Registry) error { return nil }

// Run starts the parts in order — log and driver (recovery), then intake
// — and keeps them running until ctx ends or a part fails. Then it stops
// them in reverse: intake stops appending, every entry already in the log
// reaches the engine, the engine hands over what it has, a final
// checkpoint is written once its results are acked (within the market's
// drain), and the log is closed.
func (s *Source) Run(ctx context.Context, m *market.Market) error {
	s.mkt = m
	m.SetPhase("recovering state")
	ecfg := market.EngineConfig(s.cfg)
	ecfg.Topic = s.cfg.MQTT.Topic
	ecfg.Shards = s.drv.shards
	ecfg.Log = s.log
	// The bridge coalesces positions per courier and computes the cell
	// when it writes, so this stays a map lookup per position; the board
	// gets the same positions at the same point.
	out := m.Sink().Output()
	ecfg.OnPosition = out.Position
	ecfg.OnForget = out.Forget
	ecfg.OnSide = out.Side
	// Staging spills to state.dir while lake.dir cannot take it: the
	// lake then holds the intake back only where the log itself would.
	feed, err := m.OpenLake("", nil, filepath.Join(s.cfg.State.Dir, lakeSpillDir))
	if err != nil {
		return err
	}
	if s.lake = feed; feed != nil {
		ecfg.OnRows = market.LakeRows(feed)
	}
	if err := s.recover(ecfg); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), m.Drain())
		defer cancel()
		s.closeLake(ctx)
		return fmt.Errorf("recover: %w", err)
	}
	log := s.wal.Load()
	s.in.wal = log
	s.eng.Store(s.drv.eng)

	// runCtx ends the market when a part fails.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// Started upstream last, so stopped first: the intake's watch, then
	// the driver (once the log has handed it every durable entry), then
	// the checkpointer.
	var parts market.Stopper
	parts.Go(func() { s.ckpt.Run(runCtx) }, stop)
	var syncErr error
	parts.Go(func() { s.drv.run(func() { m.Die(s.drv.fatal); stop() }) }, func() {
		// Every appended entry made durable and handed to the driver,
		// which applies them all, takes the final snapshot and stops the
		// engine.
		syncErr = log.Sync()
		close(s.drv.in)
	})
	watchCtx, stopWatch := context.WithCancel(runCtx)
	parts.Go(func() { s.in.watch(watchCtx) }, stopWatch)

	var startErr error
	if err := s.in.start(runCtx); err != nil {
		startErr = fmt.Errorf("start mqtt: %w", err)
		m.Die(startErr)
	} else {
		m.Running()
		s.log.Info("market running", "mqtt", s.in.cfg.URL, "topic", s.cfg.MQTT.Topic, "stream", m.Sink().Bridge().Config().Stream)
		<-runCtx.Done()
	}
	m.SetPhase("stopping")
	stop()

	start := time.Now()
	// The market's drain, and the same bound from now when the source
	// stops on its own (a failure: the market's context has not ended).
	drain, cancel := context.WithTimeout(m.DrainContext(), m.Drain())
	defer cancel()
	s.in.stop()
	parts.Stop()

	srcErr := s.in.close(drain) // acks given so far get their last flush
	s.ckpt.SaveFinal(drain)
	s.closeLake(drain)
	walErr := log.Close()
	s.log.Info("market stopped", "took", time.Since(start).Round(time.Millisecond))
	err = startErr
	if err == nil && s.drv.fatal != nil {
		err = s.drv.fatal
	}
	if err == nil && srcErr != nil {
		err = fmt.Errorf("shutdown: mqtt: %w", srcErr)
	}
	return errors.Join(err, wrapErr("sync write-ahead log", syncErr), wrapErr("close write-ahead log", walErr))
}

// closeLake writes the lake's staged rows to Parquet within ctx; what is
// left stays staged for the next start.
func (s *Source) closeLake(ctx context.Context) {
	if err := s.mkt.CloseLake(ctx, s.lake); err != nil {
		s.log.Warn("lake: rows left staged for the next start", "err", err)
	}
}

func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
