// Package market is the shell every configured market runs in, whatever
// its source. A source (package mqttsource: an MQTT session and a local
// write-ahead log; package partition: this instance's partitions of a
// JetStream stream) owns only how positions arrive, are made durable and
// acknowledged, and what "I can hear" means. The shell owns what every
// market does whatever its source, once:
//
//   - the results sink (Sink): the results stream and courier bucket
//     opened with retry, publishing, and the wait for acks before a
//     checkpoint and at shutdown;
//   - restoring and checkpointing an engine (Recover, Checkpoints): one
//     protocol over both stores;
//   - "failed and stops" (Die), readiness (NotReady) and the metrics
//     snapshot (Snapshot);
//   - the lake's feeds (OpenLake, LakeRows; Checkpoints cuts them at
//     its barriers), their readiness and figures;
//   - the mapping of the configuration file to each part's settings
//     (EngineConfig, BridgeConfig, MQTTConfig, LakeOptions).
//
// The process host (package service) builds one Market per configured
// market, gives it its source and serves its metrics, health and board.
package market

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/internal/natsconn"
	"github.com/km0/edgeproc/metrics"
)

// A Source is how a market's positions arrive. Run gets the market, whose
// Sink is open, and runs until ctx ends or it fails; at shutdown it
// stops its intake, applies what it made durable, and checkpoints within
// the market's Drain. The other methods are safe from any goroutine at
// any time, also before Run.
type Source interface {
	Run(ctx context.Context, m *Market) error
	// Stats adds the source's figures (engine, log, checkpoints, its
	// connection) to s.
	Stats(s *metrics.Snapshot)
	// NotReady says why the source cannot hear or apply now, "" when it
	// can.
	NotReady() string
	// Extend adds the source's own endpoints and collectors to the
	// market's listener.
	Extend(mux *http.ServeMux, reg *prometheus.Registry) error
}

// Deps are what a Market gets from the process rather than from its
// configuration.
type Deps struct {
	// Log receives the market's logs (the market's name is added).
	// Default: discarded.
	Log *slog.Logger
	// Conn is the NATS connection of the market's results (required).
	Conn *nats.Conn
	// Drain bounds the shutdown's wait for the acks of the results still
	// on their way, and the final checkpoint. Default
	// defaults.DrainTimeout.
	Drain time.Duration
}

// Market is one configured market: its source and the shell around it.
type Market struct {
	cfg   config.Config
	log   *slog.Logger
	src   Source
	drain time.Duration
	sink  *Sink
	lakes lakes

	// phase is what the market is doing, for readiness before its source
	// runs.
	phase atomic.Pointer[string]
	// dead is the error that ended the market before it was asked to
	// stop; /healthz fails while it is set.
	dead     atomic.Pointer[error]
	drainCtx atomic.Pointer[context.Context]
}

// Phases of a market before and after its source runs, as /readyz says
// them.
var (
	phaseOpening = "nats: opening the stream"
	phaseRunning = ""
)

// New returns the market of cfg around src; Run runs it.
func New(cfg config.Config, src Source, deps Deps) *Market {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Drain <= 0 {
		deps.Drain = defaults.DrainTimeout
	}
	log := deps.Log.With("market", cfg.Market)
	m := &Market{cfg: cfg, log: log, src: src, drain: deps.Drain, sink: newSink(BridgeConfig(cfg), deps.Conn, log)}
	m.phase.Store(&phaseOpening)
	return m
}

// Config is the market's configuration.
func (m *Market) Config() *config.Config { return &m.cfg }

// Log is the market's logger.
func (m *Market) Log() *slog.Logger { return m.log }

// Sink is the market's results sink.
func (m *Market) Sink() *Sink { return m.sink }

// Drain bounds the shutdown's wait for acks and the final checkpoint.
func (m *Market) Drain() time.Duration { return m.drain }

// SetBoard gives the market its fleet board feed; call it before Run.
func (m *Market) SetBoard(f *board.Feed) { m.sink.board = f }

// SetPhase says what the source is doing while it cannot yet do its job
// ("recovering state"); Running says it can.
func (m *Market) SetPhase(p string) { m.phase.Store(&p) }

// Running says the source runs: readiness is its own and the sink's from
// now on.
func (m *Market) Running() { m.phase.Store(&phaseRunning) }

// Run opens the results stream (retrying while NATS is unreachable), runs
// the source until ctx ends or the market fails, and closes the sink
// within Drain. A failure is logged at once and kept for /healthz; Run
// returns it, naming the market.
func (m *Market) Run(ctx context.Context) error {
	err := m.run(ctx)
	if err == nil {
		return nil
	}
	// /healthz and the log name the market already: the cause alone
	// there, the market's name for the caller, which joins several
	// markets' errors.
	m.Die(err)
	return fmt.Errorf("market %s: %w", m.cfg.Market, err)
}

func (m *Market) run(ctx context.Context) error {
	ok, err := m.Open(ctx)
	if err != nil || !ok {
		return err // nil: ctx ended before NATS was ever reachable
	}
	// The drain starts when ctx ends: from then on the source stops its
	// intake, applies what it made durable and checkpoints, and the sink
	// waits for the last acks, all within m.drain; past it, what is not
	// published is given up (the log keeps its inputs).
	dctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.drainCtx.Store(&dctx)
	var timer atomic.Pointer[time.Timer]
	stopDrain := context.AfterFunc(ctx, func() {
		timer.Store(time.AfterFunc(m.drain, func() { m.sink.cancelPub(); cancel() }))
	})
	defer func() {
		stopDrain()
		if t := timer.Load(); t != nil {
			t.Stop()
		}
	}()
	srcErr := m.src.Run(ctx, m)
	// A source that stopped on its own (it failed; ctx has not ended)
	// gets the same bound from now.
	cctx, cancelClose := context.WithTimeout(dctx, m.drain)
	defer cancelClose()
	closeErr := m.sink.close(cctx)
	m.sink.cancelPub()
	if n := m.sink.Lost(); n > 0 {
		m.log.Error("results not handed to NATS before the shutdown deadline; the log keeps their inputs for the next start", "lost", n)
	}
	if closeErr != nil {
		closeErr = fmt.Errorf("shutdown: nats: %w", closeErr)
	}
	return errors.Join(srcErr, closeErr)
}

// Open creates the market's results stream and courier bucket, retrying
// while NATS is unreachable; Run starts with it. It reports false, nil
// when ctx ends first.
func (m *Market) Open(ctx context.Context) (bool, error) {
	m.warnDuplicateWindow()
	return m.sink.open(ctx)
}

// DrainContext ends Drain after the market was asked to stop: the bound
// of a source's shutdown (its final checkpoint) and of the sink's last
// acks. Valid while the source runs.
func (m *Market) DrainContext() context.Context { return *m.drainCtx.Load() }

// Die records the error that ends the market and says so at once.
func (m *Market) Die(err error) {
	if m.dead.CompareAndSwap(nil, &err) {
		m.log.Error("market failed and stops; /healthz reports it", "err", err)
	}
}

// Dead is the error that ended the market, nil while it runs.
func (m *Market) Dead() error {
	if err := m.dead.Load(); err != nil {
		return *err
	}
	return nil
}

// NotReady says why the market cannot do its job now, or "" when it can:
// it runs, can deliver to its stream and its source can hear.
func (m *Market) NotReady() string {
	if err := m.Dead(); err != nil {
		return "dead: " + err.Error()
	}
	if p := *m.phase.Load(); p != phaseRunning {
		if why := natsconn.Why(m.sink.nc); why != "" {
			p += ": cannot connect to " + why
		}
		return p
	}
	if r := m.sink.ready(); r != "" {
		return r
	}
	if r := m.src.NotReady(); r != "" {
		return r
	}
	return m.lakes.behind()
}

// Snapshot is the market's state for metrics.
func (m *Market) Snapshot() metrics.Snapshot {
	s := metrics.Snapshot{Ready: m.NotReady() == "", Failed: m.Dead() != nil}
	m.sink.stats(&s)
	m.src.Stats(&s)
	m.lakes.stats(&s)
	return s
}

// Extend adds the source's own endpoints and collectors to the market's
// listener.
func (m *Market) Extend(mux *http.ServeMux, reg *prometheus.Registry) error {
	return m.src.Extend(mux, reg)
}

// DuplicateWindowMargin is what nats.duplicate_window must exceed twice
// state.checkpoint_interval by, at least, for a recovery's re-published
// results to be dropped as duplicates: it stands for the downtime before
// the restart plus the replay. Run warns at start when it does not.
const DuplicateWindowMargin = time.Minute

// warnDuplicateWindow warns when a recovery could re-publish results older
// than the stream's duplicate window, which would then be stored twice.
func (m *Market) warnDuplicateWindow() {
	dw, ci := m.cfg.NATS.DuplicateWindow, m.cfg.State.CheckpointInterval
	if need := 2*ci + DuplicateWindowMargin; dw < need {
		m.log.Warn("nats.duplicate_window is too short for state.checkpoint_interval: results re-published after a crash may be stored twice",
			"duplicate_window", dw, "checkpoint_interval", ci, "want_at_least", need)
	}
}
