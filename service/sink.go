package service

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/backoff"
	"github.com/km0/edgeproc/internal/ratelog"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/output"
	"github.com/km0/edgeproc/result"
)

// sink owns everything that leaves a market: results to its JetStream
// stream, keyed so that re-publication after a recovery is dropped as a
// duplicate, and courier statuses to its bucket. It runs on the engine's
// merger goroutine; blocking in Publish (too many results awaiting their
// ack) is the backpressure path back to the engine and to MQTT.
type sink struct {
	cfg config.Config
	log *slog.Logger
	nc  *nats.Conn

	br atomic.Pointer[bridge.Bridge]
	// board is the fleet board's feed; nil when http.board is off. Set by
	// attachBoard before the market runs.
	board *board.Feed
	// out publishes results and feeds the bucket and the board; set by
	// open. Owned by the merger goroutine.
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

// open creates the stream and bucket, retrying while NATS is unreachable.
// It returns false, nil if ctx ends first.
func (s *sink) open(ctx context.Context) (bool, error) {
	cfg := bridge.ConfigFrom(s.cfg)
	cfg.OnAcked = s.ackLatency.Observe
	if err := cfg.Validate(); err != nil {
		return false, err
	}
	for attempt := 1; ; attempt++ {
		octx, cancel := context.WithTimeout(ctx, setupTimeout)
		br, err := bridge.Open(octx, s.nc, cfg, s.log)
		cancel()
		if err == nil {
			s.out = output.New(br, s.board)
			s.br.Store(br)
			s.pubCtx, s.cancelPub = context.WithCancel(context.Background())
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
		if bridge.Refused(err) {
			return false, err
		}
		delay := backoff.Delay(attempt, 250*time.Millisecond, backoff.Reconnect)
		s.log.Warn("cannot open the JetStream stream yet, retrying", "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(delay):
		}
	}
}

// publish is the engine's sink: it publishes rs in order. A result that
// cannot be published before the shutdown deadline is counted as lost;
// the log keeps its input for the next start.
func (s *sink) publish(rs []result.Record) {
	for i := range rs {
		if err := s.out.Publish(s.pubCtx, &rs[i]); err != nil {
			s.lost.Add(1)
			if ok, n := s.errLog.Allow(); ok {
				s.log.Error("result not published", "key", rs[i].Key(), "err", err, "suppressed", n)
			}
		}
	}
}

// close waits (bounded by ctx) for every result's ack and closes the
// bridge.
func (s *sink) close(ctx context.Context) error {
	if br := s.br.Load(); br != nil {
		return br.Close(ctx)
	}
	return nil
}

// ready says why results cannot be delivered now, or "" when they can.
func (s *sink) ready() string {
	br := s.br.Load()
	switch {
	case br == nil:
		return "nats: stream not created yet"
	case !br.Connected():
		return "nats: not connected"
	case !br.StreamReady():
		return "nats: stream " + br.Config().Stream + " not ready"
	}
	return ""
}
