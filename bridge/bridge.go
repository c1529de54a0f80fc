// Package bridge delivers edgeproc's results to NATS JetStream, keyed for
// idempotence.
//
// A Bridge is one market's output, in two parts with one job each, opened
// and closed together by Open and Close: the results publisher (Results,
// results.go: the market's stream of results, late records and rejected
// inputs) and the courier writer (Couriers, kv.go: its courier-state
// key-value bucket). Publish sends a result asynchronously with the header
// Nats-Msg-Id set to the result's key, so the stream drops a re-emitted
// result inside its duplicate window. Every ack is checked; a failed or
// timed-out attempt is retried with the same id and a capped doubling delay
// until it is acked or the Bridge is closed, so no result is dropped while
// the process runs. At most Config.MaxPending results wait for their ack at
// once: Publish blocks beyond that, which is how a slow or unreachable NATS
// pushes back on the pipeline instead of growing memory.
//
// The bridge never closes the *nats.Conn it is given. That connection should
// reconnect forever (nats.MaxReconnects(-1)); should it close anyway, results
// wait, counted as pending, until Close gives up on them.
//
// A stream or bucket that disappears from the server (deleted, or NATS
// restarted on an empty store) shows as publishes nobody answers. The bridge
// then looks the stream up and, if it is gone, creates it again with a
// warning saying what was lost (every result it held; for the bucket, the
// states, which the bridge rewrites from its table of every courier's newest
// state), and the pending publishes are retried into it, so delivery goes on.
// StreamReady tells whether the stream is there and acking.
//
// The courier bucket is written as kv.go describes: one writer, newest
// timestamp wins, positions coalesced per Config.KVInterval, status changes
// at once. The bucket itself has no limit on its keys (History 1, no
// MaxValues or MaxBytes); the bridge's table holds Config.MaxCouriers
// couriers and makes room by evicting the least recently updated one, so
// the bucket never stops updating at any count.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Sentinel errors.
var (
	// ErrClosed is returned by Publish once Close has begun.
	ErrClosed = errors.New("bridge: closed")
	// ErrSubject is returned by Publish for a subject the market's stream
	// does not capture (it would never be acked).
	ErrSubject = errors.New("subject not captured by the market's stream")
	// ErrMsgID is returned by Publish for an empty message id.
	ErrMsgID = errors.New("empty message id")
)

const (
	// firstBackoff is the delay before the first retry; it doubles per
	// attempt up to Config.MaxBackoff.
	firstBackoff = 50 * time.Millisecond
	// connPoll is how often a retry waiting for the connection checks it.
	connPoll = 50 * time.Millisecond
	// errLogEvery rate-limits repeated error logs (an outage fails every
	// pending result at once).
	errLogEvery = 5 * time.Second
)

// Stats is a snapshot of a Bridge's counters. Counters only grow.
type Stats struct {
	// Published counts results accepted by Publish.
	Published uint64
	// Acked counts results acknowledged by the stream, duplicates included.
	Acked uint64
	// Duplicates counts acks that reported the Nats-Msg-Id as already stored.
	Duplicates uint64
	// Errors counts failed or timed-out publish attempts.
	Errors uint64
	// Retries counts publish attempts after a result's first.
	Retries uint64
	// Pending is the number of accepted results not yet acked (a gauge).
	Pending int
	// Connected reports whether the NATS connection is up (a gauge).
	Connected bool
	// KVWrites counts courier states written to the bucket.
	KVWrites uint64
	// KVErrors counts failed courier-state writes (they are retried).
	KVErrors uint64
	// KVRefused counts courier updates refused for an empty courier id.
	KVRefused uint64
	// KVEvicted counts couriers evicted from the table to make room for a
	// new one at Config.MaxCouriers (a pending state of theirs is written
	// once more first).
	KVEvicted uint64
	// KVWaits counts courier updates that waited for the writer because its
	// inbox was full.
	KVWaits uint64
	// KVCouriers is the number of couriers in the table (a gauge).
	KVCouriers int
	// StreamRecreated and KVRecreated count the times the stream or the
	// bucket was found missing on the server and created again.
	StreamRecreated, KVRecreated uint64
	// StreamReady is StreamReady() (a gauge).
	StreamReady bool
}

// Bridge is one market's output: its results publisher (Results) and its
// courier writer (Couriers), each with its own goroutines and state,
// opened and closed together. Its methods are safe for concurrent use.
type Bridge struct {
	*Results
	*Couriers
	cfg Config
	nc  *nats.Conn

	closeOnce sync.Once
	closeErr  error
}

// Open creates or updates the market's stream and courier bucket on nc and
// starts the bridge's retry and KV goroutines. ctx bounds only the set-up
// calls. A nil log discards logs; log is used as given, so a caller that
// runs several markets gives it their "market" attribute (the service's
// market logger has it: adding it here too printed it twice).
func Open(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) (*Bridge, error) {
	return open(ctx, nc, cfg, log, time.Now)
}

// open is Open with the KV writer's clock.
func open(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger, now func() time.Time) (*Bridge, error) {
	if nc == nil {
		return nil, errors.New("bridge: open: nil NATS connection")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bridge: open: %w", err)
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, err := openResults(ctx, nc, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("bridge: open: %w", err)
	}
	c, err := openCouriers(ctx, nc, cfg, log, now)
	if err != nil {
		_ = r.close(ctx)
		return nil, fmt.Errorf("bridge: open: %w", err)
	}
	return &Bridge{Results: r, Couriers: c, cfg: cfg, nc: nc}, nil
}

// Config returns the bridge's configuration with defaults applied.
func (b *Bridge) Config() Config { return b.cfg }

// Stats returns a snapshot of the counters.
func (b *Bridge) Stats() Stats {
	s := Stats{Connected: b.nc.IsConnected()}
	b.Results.stats(&s)
	b.Couriers.stats(&s)
	return s
}

// Connected reports whether the NATS connection is currently up.
func (b *Bridge) Connected() bool { return b.nc.IsConnected() }

// Close stops accepting results, waits (bounded by ctx) until every
// accepted result is acked, stops the goroutines, writes the courier states
// still waiting (bounded by ctx), and releases the bridge's JetStream
// publisher. It does not close the *nats.Conn. The error reports results
// left unacknowledged or states left unwritten. Later calls return the
// first call's result.
func (b *Bridge) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		if err := errors.Join(b.Results.close(ctx), b.Couriers.close(ctx)); err != nil {
			b.closeErr = fmt.Errorf("bridge: close: %w", err)
		}
	})
	return b.closeErr
}
