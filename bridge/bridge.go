// Package bridge delivers edgeproc's results to NATS JetStream, keyed for
// idempotence.
//
// A Bridge owns one market's output: Open creates or updates the market's
// stream (results, late records and rejected inputs) and its courier-state
// key-value bucket. Publish sends a result asynchronously with the header
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
// the bucket never stops updating at any count. (Before, the coalescer
// refused every courier past 100000, its default cap, so their statuses
// were never written.)
package bridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/internal/backoff"
	"github.com/km0/edgeproc/internal/ratelog"
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

// item is one accepted result; it holds one slot until it is acked.
type item struct {
	seq      uint64
	accepted time.Time // when Publish took it, for Config.OnAcked
	subject  string
	hdr      nats.Header
	data     []byte
	// attempt and notBefore are written by whoever saw the failure and read
	// by the retry loop after the hand-over through retryCh.
	attempt   int
	notBefore time.Time
}

// Bridge publishes one market's results to JetStream. Its methods are safe
// for concurrent use.
type Bridge struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	// kvAcks is the courier writes' reply inbox (kvput.go).
	kvAcks *kvAcks
	log    *slog.Logger
	now    func() time.Time // the KV writer's clock; tests may simulate it

	// slots holds one token per accepted, unacked result: its capacity is
	// the in-flight bound.
	slots chan struct{}
	// retryCh has room for every slot, so handing a failed item over never
	// blocks an ack or error callback.
	retryCh chan *item

	mu          sync.Mutex
	closed      bool
	nextSeq     uint64
	outstanding map[uint64]*item    // every slot holder, by sequence
	attempts    map[*nats.Msg]*item // current attempt of each item in flight
	progress    chan struct{}       // closed at the next completion, if a Flush waits

	closing   chan struct{} // closed when Close begins
	stop      chan struct{} // closed to stop the goroutines
	runCtx    context.Context
	cancelRun context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	published, acked, duplicates, errs, retries atomic.Uint64
	kvWrites, kvErrors, kvRefused               atomic.Uint64
	kvEvicted, kvWaits                          atomic.Uint64
	streamRecreated, kvRecreated                atomic.Uint64
	kvCouriers                                  atomic.Int64

	// streamLost is set when a publish found no stream; streamOK while
	// publishes are acked (cleared by a failure, set by an ack). kvLost is
	// streamLost for the bucket.
	streamLost, streamOK, kvLost atomic.Bool
	lostAt                       time.Time // retry loop's last stream look-up

	pubLog ratelog.Limiter
	kvLog  ratelog.Limiter

	in     kvInbox
	table  kvTable        // the KV writer's
	kvWake chan struct{}  // capacity 1
	kvTick chan kvTickReq // tests: a tick now
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
	b := &Bridge{
		cfg:         cfg,
		nc:          nc,
		log:         log,
		slots:       make(chan struct{}, cfg.MaxPending),
		retryCh:     make(chan *item, cfg.MaxPending),
		outstanding: make(map[uint64]*item),
		attempts:    make(map[*nats.Msg]*item),
		closing:     make(chan struct{}),
		stop:        make(chan struct{}),
		pubLog:      ratelog.Limiter{Every: errLogEvery},
		kvLog:       ratelog.Limiter{Every: errLogEvery},
		kvWake:      make(chan struct{}, 1),
		kvTick:      make(chan kvTickReq),
		now:         now,
		table:       kvTable{m: make(map[string]*courierEntry)},
	}
	b.in.space = sync.NewCond(&b.in.mu)
	js, err := jetstream.New(nc,
		// The bridge's own slots are the real bound; the library's is set
		// above it so that it never stalls a resend on stale entries.
		jetstream.WithPublishAsyncMaxPending(2*cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout),
		jetstream.WithPublishAsyncAckHandler(b.onAck),
		jetstream.WithPublishAsyncErrHandler(b.onErr),
	)
	if err != nil {
		return nil, fmt.Errorf("bridge: open: jetstream: %w", err)
	}
	b.js = js

	if err := b.createStream(ctx); err != nil {
		return nil, fmt.Errorf("bridge: open: %w", err)
	}
	if err := b.createBucket(ctx); err != nil {
		return nil, fmt.Errorf("bridge: open: %w", err)
	}
	if b.kvAcks, err = subscribeKVAcks(nc); err != nil {
		return nil, fmt.Errorf("bridge: open: %w", err)
	}
	b.streamOK.Store(true)

	b.runCtx, b.cancelRun = context.WithCancel(context.Background())
	b.wg.Add(2)
	go b.retryLoop()
	go b.kvLoop()
	return b, nil
}

func (b *Bridge) createStream(ctx context.Context) error {
	if _, err := b.js.CreateOrUpdateStream(ctx, b.cfg.streamConfig()); err != nil {
		return fmt.Errorf("create or update stream %s: %w", b.cfg.Stream, err)
	}
	return nil
}

func (b *Bridge) createBucket(ctx context.Context) error {
	// History 1 and no MaxValues/MaxBytes: one value per courier, any
	// number of couriers.
	if _, err := b.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      b.cfg.KVBucket,
		Description: "edgeproc courier state of market " + b.cfg.Market,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    b.cfg.Replicas,
	}); err != nil {
		return fmt.Errorf("create or update kv bucket %s: %w", b.cfg.KVBucket, err)
	}
	return nil
}

// recreateStream runs in the retry loop after a publish found no stream: if
// the stream is really gone (not merely loading after a server restart) it
// is created again, with a warning.
func (b *Bridge) recreateStream() {
	ctx, cancel := context.WithTimeout(b.runCtx, b.cfg.AckTimeout)
	defer cancel()
	_, err := b.js.Stream(ctx, b.cfg.Stream)
	if err == nil {
		b.streamLost.Store(false) // it is there: the miss was transient
		return
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		b.log.Warn("bridge: cannot look up the stream after a publish found none", "stream", b.cfg.Stream, "err", err)
		return
	}
	if err := b.createStream(ctx); err != nil {
		b.log.Warn("bridge: stream missing on the server, cannot recreate it yet", "stream", b.cfg.Stream, "err", err)
		return
	}
	b.streamLost.Store(false)
	b.streamRecreated.Add(1)
	b.log.Warn("bridge: stream was missing on the server (deleted, or NATS lost its store) and has been recreated: every result it held before is lost, and re-emitted results are no longer deduplicated against them; pending results are being re-sent",
		"stream", b.cfg.Stream, "pending", len(b.slots))
}

// recreateBucket is recreateStream for the courier bucket, run by the KV
// writer; the table's states are all written again.
func (b *Bridge) recreateBucket(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.AckTimeout)
	defer cancel()
	_, err := b.js.KeyValue(ctx, b.cfg.KVBucket)
	if err == nil {
		b.kvLost.Store(false)
		return
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		b.logKV("bridge: cannot look up the courier bucket after a write found none", "", err)
		return
	}
	if err := b.createBucket(ctx); err != nil {
		b.logKV("bridge: courier bucket missing on the server, cannot recreate it yet", "", err)
		return
	}
	b.kvLost.Store(false)
	b.kvRecreated.Add(1)
	for _, e := range b.table.m {
		e.dirty, e.lastWrite = true, time.Time{}
	}
	b.log.Warn("bridge: courier bucket was missing on the server (deleted, or NATS lost its store) and has been recreated: every courier state it held is lost; rewriting the newest state of each courier known",
		"bucket", b.cfg.KVBucket, "couriers", len(b.table.m))
}

// StreamReady reports whether results are being delivered: the connection
// is up, the stream exists, and the latest publish outcome was an ack (a
// failed or timed-out attempt clears it until the next ack).
func (b *Bridge) StreamReady() bool {
	return b.nc.IsConnected() && !b.streamLost.Load() && b.streamOK.Load()
}

// Config returns the bridge's configuration with defaults applied.
func (b *Bridge) Config() Config { return b.cfg }

// Publish sends payload to subject with Nats-Msg-Id = msgID (the result's
// key) and returns once the result is accepted; its ack is awaited in the
// background and a failed attempt is retried until acked or Close. Publish
// copies payload, so the caller may reuse it at once.
//
// Publish blocks while Config.MaxPending results await their ack, until a
// slot frees, ctx ends (the ctx error is returned, wrapped) or Close begins
// (ErrClosed). A subject outside the market's stream gives ErrSubject, an
// empty msgID ErrMsgID, and a payload larger than the server accepts an
// error wrapping nats.ErrMaxPayload; nothing is sent in those cases.
func (b *Bridge) Publish(ctx context.Context, subject, msgID string, payload []byte) error {
	if msgID == "" {
		return fmt.Errorf("bridge: publish to %q: %w", subject, ErrMsgID)
	}
	if !b.cfg.coversSubject(subject) {
		return fmt.Errorf("bridge: publish %s to %q: %w", msgID, subject, ErrSubject)
	}
	select {
	case <-b.closing:
		return ErrClosed
	default:
	}
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("bridge: publish %s: %w", msgID, ctx.Err())
	case <-b.closing:
		return ErrClosed
	}

	it := &item{
		accepted: time.Now(),
		subject:  subject,
		hdr:      nats.Header{jetstream.MsgIDHeader: []string{msgID}},
		data:     bytes.Clone(payload),
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		<-b.slots
		return ErrClosed
	}
	it.seq = b.nextSeq
	b.nextSeq++
	b.outstanding[it.seq] = it
	b.mu.Unlock()

	msg, err := b.send(it)
	if err != nil {
		if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) {
			b.abandon(it, msg)
			return fmt.Errorf("bridge: publish %s: %w", msgID, err)
		}
		b.published.Add(1)
		b.onErr(nil, msg, err)
		return nil
	}
	b.published.Add(1)
	return nil
}

// send makes one publish attempt of it. The attempt is registered before
// the publish, as its ack may arrive before PublishMsgAsync returns.
func (b *Bridge) send(it *item) (*nats.Msg, error) {
	// A fresh Msg per attempt: callbacks of an earlier, superseded attempt
	// find no registration and are ignored.
	msg := &nats.Msg{Subject: it.subject, Header: it.hdr, Data: it.data}
	b.mu.Lock()
	b.attempts[msg] = it
	b.mu.Unlock()
	_, err := b.js.PublishMsgAsync(msg)
	return msg, err
}

// abandon forgets an item that can never be delivered and frees its slot.
func (b *Bridge) abandon(it *item, msg *nats.Msg) {
	b.mu.Lock()
	delete(b.attempts, msg)
	delete(b.outstanding, it.seq)
	b.signalLocked()
	b.mu.Unlock()
	<-b.slots
}

// onAck completes the item of an acked attempt. It runs on the nats.go
// ack goroutine and must not block.
func (b *Bridge) onAck(_ jetstream.JetStream, msg *nats.Msg, ack *jetstream.PubAck) {
	b.mu.Lock()
	it, ok := b.attempts[msg]
	if ok {
		delete(b.attempts, msg)
	}
	b.mu.Unlock()
	if !ok {
		return
	}
	// Reported before the result counts as delivered, outside the lock
	// (it is the caller's code): once Flush returns, every acked result
	// has been reported.
	if b.cfg.OnAcked != nil {
		b.cfg.OnAcked(time.Since(it.accepted))
	}
	b.mu.Lock()
	// Counted before Flush is woken: once it returns, Stats includes this
	// ack.
	b.acked.Add(1)
	b.streamOK.Store(true)
	duplicate := ack != nil && ack.Duplicate
	if duplicate {
		b.duplicates.Add(1)
	}
	delete(b.outstanding, it.seq)
	b.signalLocked()
	b.mu.Unlock()

	if duplicate {
		// Rare, and the one ack that says nothing of this attempt's own
		// message: worth a trail when a result is missing downstream.
		b.log.Debug("bridge: result already in the stream", "msg_id", it.hdr.Get(jetstream.MsgIDHeader), "seq", ack.Sequence)
	}
	<-b.slots
}

// onErr schedules a failed attempt for retry. It runs on nats.go goroutines
// (ack handler, timeout timer, reconnect watcher) and must not block: the
// send to retryCh cannot, since every queued item holds one of the slots
// retryCh has room for.
func (b *Bridge) onErr(_ jetstream.JetStream, msg *nats.Msg, err error) {
	b.mu.Lock()
	it, ok := b.attempts[msg]
	if ok {
		delete(b.attempts, msg)
	}
	b.mu.Unlock()
	if !ok {
		return
	}
	b.errs.Add(1)
	b.streamOK.Store(false)
	if isNoStream(err) {
		b.streamLost.Store(true)
	}
	delay := backoff.Delay(it.attempt+1, firstBackoff, b.cfg.MaxBackoff)
	it.attempt++
	it.notBefore = time.Now().Add(delay)
	select {
	case <-b.stop:
	default:
		if ok, suppressed := b.pubLog.Allow(); ok {
			b.log.Warn("bridge: publish failed, retrying",
				"subject", it.subject, "msg_id", it.hdr.Get(jetstream.MsgIDHeader),
				"attempt", it.attempt, "retry_in", delay, "err", err, "suppressed", suppressed)
		}
	}
	b.retryCh <- it
}

// retryLoop resends failed items once their backoff has passed.
func (b *Bridge) retryLoop() {
	defer b.wg.Done()
	for {
		var it *item
		select {
		case <-b.stop:
			return
		case it = <-b.retryCh:
		}
		if !b.sleep(time.Until(it.notBefore)) {
			return
		}
		// While disconnected a resend would only pile another copy into
		// the reconnect buffer; wait for the connection instead, polling
		// often enough to resume soon after it is back.
		for !b.nc.IsConnected() {
			if !b.sleep(connPoll) {
				return
			}
		}
		if b.streamLost.Load() && time.Since(b.lostAt) >= recreateEvery {
			b.lostAt = time.Now()
			b.recreateStream()
		}
		b.retries.Add(1)
		if msg, err := b.send(it); err != nil {
			b.onErr(nil, msg, err)
		}
	}
}

// sleep waits d and reports false if the bridge stopped meanwhile.
func (b *Bridge) sleep(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-b.stop:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.stop:
		return false
	case <-t.C:
		return true
	}
}

// signalLocked wakes Flush waiters. b.mu must be held.
func (b *Bridge) signalLocked() {
	if b.progress != nil {
		close(b.progress)
		b.progress = nil
	}
}

// Flush waits until every result accepted by Publish before the call is
// acked, or ctx ends (the error then wraps ctx.Err() and says how many
// results are pending). Results published during Flush do not delay it.
func (b *Bridge) Flush(ctx context.Context) error {
	b.mu.Lock()
	target := b.nextSeq
	for {
		// Acks arrive out of order: done when the oldest outstanding
		// sequence is at or past the target.
		low := b.nextSeq
		for seq := range b.outstanding {
			low = min(low, seq)
		}
		if low >= target {
			b.mu.Unlock()
			return nil
		}
		if b.progress == nil {
			b.progress = make(chan struct{})
		}
		ch := b.progress
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("bridge: flush: %d results not acknowledged: %w", len(b.slots), ctx.Err())
		}
		b.mu.Lock()
	}
}

// Stats returns a snapshot of the counters.
func (b *Bridge) Stats() Stats {
	return Stats{
		Published:  b.published.Load(),
		Acked:      b.acked.Load(),
		Duplicates: b.duplicates.Load(),
		Errors:     b.errs.Load(),
		Retries:    b.retries.Load(),
		Pending:    len(b.slots),
		Connected:  b.nc.IsConnected(),
		KVWrites:   b.kvWrites.Load(),
		KVErrors:   b.kvErrors.Load(),
		KVRefused:  b.kvRefused.Load(),

		KVEvicted:       b.kvEvicted.Load(),
		KVWaits:         b.kvWaits.Load(),
		KVCouriers:      int(b.kvCouriers.Load()),
		StreamRecreated: b.streamRecreated.Load(),
		KVRecreated:     b.kvRecreated.Load(),
		StreamReady:     b.StreamReady(),
	}
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
		close(b.closing)
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		b.in.mu.Lock()
		b.in.closed = true // updates from now on are ignored
		b.in.space.Broadcast()
		b.in.mu.Unlock()

		flushErr := b.Flush(ctx)
		close(b.stop)
		b.cancelRun()
		b.wg.Wait()
		// The writer has stopped: Close owns the table now.
		now := b.now()
		b.drain(now)
		kvErr := b.writeKV(ctx, now, true, true)
		// Fails what is still in flight (the callbacks find nothing to
		// retry any more) and drops the reply subscriptions.
		b.js.CleanupPublisher()
		_ = b.kvAcks.sub.Unsubscribe()
		if flushErr != nil || kvErr != nil {
			b.closeErr = fmt.Errorf("bridge: close: %w", errors.Join(flushErr, kvErr))
		}
	})
	return b.closeErr
}
