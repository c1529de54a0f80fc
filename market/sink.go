package market

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/internal/natsconn"
	"github.com/km0/edgeproc/internal/ratelog"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/output"
	"github.com/km0/edgeproc/result"
)

// Sink owns everything that leaves a market: results to its JetStream
// stream, keyed so that re-publication after a recovery or a takeover is
// dropped as a duplicate, courier statuses to its bucket, and the fleet
// board's feed. Blocking in Publish (too many results awaiting their ack)
// is the backpressure path back to the engine and to the source.
type Sink struct {
	cfg bridge.Config
	log *slog.Logger
	nc  *nats.Conn

	br atomic.Pointer[bridge.Bridge]
	// board is the fleet board's feed; nil when http.board is off. Set
	// before the market runs.
	board *board.Feed
	// out publishes results and feeds the bucket and the board; set by
	// open.
	out *output.Sink
	// pubCtx ends when the shutdown drain deadline passes: a result that
	// cannot be published by then is given up (counted; no checkpoint is
	// written past it).
	pubCtx    context.Context
	cancelPub context.CancelFunc
	lost      atomic.Int64 // results the sink could not hand to the bridge
	// ackLatency is the time from a result handed to the bridge to its
	// JetStream ack.
	ackLatency metrics.Histogram
	errLog     ratelog.Limiter
}

func newSink(cfg bridge.Config, nc *nats.Conn, log *slog.Logger) *Sink {
	s := &Sink{cfg: cfg, nc: nc, log: log, errLog: ratelog.Limiter{Every: 5 * time.Second}}
	s.cfg.OnAcked = s.ackLatency.Observe
	s.pubCtx, s.cancelPub = context.WithCancel(context.Background())
	return s
}

// open creates the stream and bucket, retrying while NATS is unreachable.
// It returns false, nil if ctx ends first, and an error no retry can fix
// (the configuration, or a stream of another configuration) at once.
func (s *Sink) open(ctx context.Context) (bool, error) {
	if err := s.cfg.Validate(); err != nil {
		return false, err
	}
	return Retry(ctx, s.log.With("stream", s.cfg.Stream), "open the JetStream stream", func(ctx context.Context) error {
		br, err := bridge.Open(ctx, s.nc, s.cfg, s.log)
		if err == nil {
			s.out = output.New(br, s.board)
			s.br.Store(br)
			return nil
		}
		if why := natsconn.Why(s.nc); why != "" {
			// The attempt's own error is a timeout; the cause is the
			// connection's.
			err = fmt.Errorf("%w (cannot connect to %s)", err, why)
		}
		return err
	}, bridge.Refused)
}

// Board is the market's fleet board feed, nil when http.board is off.
func (s *Sink) Board() *board.Feed { return s.board }

// Bridge is the market's results bridge, nil until the stream is open.
func (s *Sink) Bridge() *bridge.Bridge { return s.br.Load() }

// Output is what publishes results and feeds the bucket and the board;
// a source with several engines takes one output.Sink.For each.
func (s *Sink) Output() *output.Sink { return s.out }

// Publish publishes rs in order: the engine's sink. A result that cannot
// be published before the shutdown deadline is counted as lost; the log
// keeps its input for the next start.
func (s *Sink) Publish(rs []result.Record) {
	for i := range rs {
		if err := s.out.Publish(s.pubCtx, &rs[i]); err != nil {
			s.lost.Add(1)
			if ok, n := s.errLog.Allow(); ok {
				s.log.Error("result not published", "key", rs[i].Key(), "err", err, "suppressed", n)
			}
		}
	}
}

// Flush waits (bounded by ctx) until JetStream has acked every result
// handed over so far, and fails if any was given up: the wait before a
// checkpoint, past which the log is no longer the outbox of those results.
func (s *Sink) Flush(ctx context.Context) error {
	if err := s.br.Load().Flush(ctx); err != nil {
		return fmt.Errorf("wait for JetStream acks: %w", err)
	}
	if n := s.lost.Load(); n > 0 {
		return fmt.Errorf("%d results were never handed to JetStream: not checkpointing past them", n)
	}
	return nil
}

// Lost counts the results given up at a shutdown deadline.
func (s *Sink) Lost() int64 { return s.lost.Load() }

// close waits (bounded by ctx) for every result's ack and closes the
// bridge.
func (s *Sink) close(ctx context.Context) error {
	if br := s.br.Load(); br != nil {
		return br.Close(ctx)
	}
	return nil
}

// ready says why results cannot be delivered now, or "" when they can.
func (s *Sink) ready() string {
	br := s.br.Load()
	if why := natsconn.Why(s.nc); why != "" {
		return "nats: cannot connect to " + why
	}
	switch {
	case br == nil:
		return "nats: stream " + s.cfg.Stream + " not created yet"
	case !br.Connected():
		return "nats: not connected"
	case !br.StreamReady():
		return "nats: stream " + br.Config().Stream + " not ready"
	}
	return ""
}

// stats adds the sink's figures to s.
func (s *Sink) stats(snap *metrics.Snapshot) {
	if b := s.br.Load(); b != nil {
		snap.Bridge, snap.HasBridge, snap.StreamReady = b.Stats(), true, b.StreamReady()
		snap.ResultLatency, snap.HasResultLatency = s.ackLatency.Snapshot(), true
	}
}
