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

// Results is the results publisher of a market's bridge: the stream of
// its results, late records and rejected inputs, every result published
// under its key and retried until acked, at most Config.MaxPending
// awaiting their ack at once. Its methods are safe for concurrent use.
type Results struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream // with the ack and error handlers below
	log *slog.Logger

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
	stop      chan struct{} // closed to stop the retry loop
	runCtx    context.Context
	cancelRun context.CancelFunc
	wg        sync.WaitGroup

	published, acked, duplicates, errs, retries atomic.Uint64
	streamRecreated                             atomic.Uint64

	// streamLost is set when a publish found no stream; streamOK while
	// publishes are acked (cleared by a failure, set by an ack).
	streamLost, streamOK atomic.Bool
	lostAt               time.Time // retry loop's last stream look-up

	pubLog ratelog.Limiter
}

// openResults creates or updates the stream and starts the retry loop.
func openResults(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) (*Results, error) {
	r := &Results{
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
	}
	js, err := jetstream.New(nc,
		// The publisher's own slots are the real bound; the library's is
		// set above it so that it never stalls a resend on stale entries.
		jetstream.WithPublishAsyncMaxPending(2*cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout),
		jetstream.WithPublishAsyncAckHandler(r.onAck),
		jetstream.WithPublishAsyncErrHandler(r.onErr),
	)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	r.js = js
	if err := r.createStream(ctx); err != nil {
		return nil, err
	}
	r.streamOK.Store(true)
	r.runCtx, r.cancelRun = context.WithCancel(context.Background())
	r.wg.Add(1)
	go r.retryLoop()
	return r, nil
}

func (r *Results) createStream(ctx context.Context) error {
	if _, err := r.js.CreateOrUpdateStream(ctx, r.cfg.streamConfig()); err != nil {
		return fmt.Errorf("create or update stream %s: %w", r.cfg.Stream, err)
	}
	return nil
}

// recreateStream runs in the retry loop after a publish found no stream: if
// the stream is really gone (not merely loading after a server restart) it
// is created again, with a warning.
func (r *Results) recreateStream() {
	ctx, cancel := context.WithTimeout(r.runCtx, r.cfg.AckTimeout)
	defer cancel()
	_, err := r.js.Stream(ctx, r.cfg.Stream)
	if err == nil {
		r.streamLost.Store(false) // it is there: the miss was transient
		return
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		r.log.Warn("bridge: cannot look up the stream after a publish found none", "stream", r.cfg.Stream, "err", err)
		return
	}
	if err := r.createStream(ctx); err != nil {
		r.log.Warn("bridge: stream missing on the server, cannot recreate it yet", "stream", r.cfg.Stream, "err", err)
		return
	}
	r.streamLost.Store(false)
	r.streamRecreated.Add(1)
	r.log.Warn("bridge: stream was missing on the server (deleted, or NATS lost its store) and has been recreated: every result it held before is lost, and re-emitted results are no longer deduplicated against them; pending results are being re-sent",
		"stream", r.cfg.Stream, "pending", len(r.slots))
}

// StreamReady reports whether results are being delivered: the connection
// is up, the stream exists, and the latest publish outcome was an ack (a
// failed or timed-out attempt clears it until the next ack).
func (r *Results) StreamReady() bool {
	return r.nc.IsConnected() && !r.streamLost.Load() && r.streamOK.Load()
}

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
func (r *Results) Publish(ctx context.Context, subject, msgID string, payload []byte) error {
	if msgID == "" {
		return fmt.Errorf("bridge: publish to %q: %w", subject, ErrMsgID)
	}
	if !r.cfg.coversSubject(subject) {
		return fmt.Errorf("bridge: publish %s to %q: %w", msgID, subject, ErrSubject)
	}
	select {
	case <-r.closing:
		return ErrClosed
	default:
	}
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("bridge: publish %s: %w", msgID, ctx.Err())
	case <-r.closing:
		return ErrClosed
	}

	it := &item{
		accepted: time.Now(),
		subject:  subject,
		hdr:      nats.Header{jetstream.MsgIDHeader: []string{msgID}},
		data:     bytes.Clone(payload),
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		<-r.slots
		return ErrClosed
	}
	it.seq = r.nextSeq
	r.nextSeq++
	r.outstanding[it.seq] = it
	r.mu.Unlock()

	msg, err := r.send(it)
	if err != nil {
		if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) {
			r.abandon(it, msg)
			return fmt.Errorf("bridge: publish %s: %w", msgID, err)
		}
		r.published.Add(1)
		r.onErr(nil, msg, err)
		return nil
	}
	r.published.Add(1)
	return nil
}

// send makes one publish attempt of it. The attempt is registered before
// the publish, as its ack may arrive before PublishMsgAsync returns.
func (r *Results) send(it *item) (*nats.Msg, error) {
	// A fresh Msg per attempt: callbacks of an earlier, superseded attempt
	// find no registration and are ignored.
	msg := &nats.Msg{Subject: it.subject, Header: it.hdr, Data: it.data}
	r.mu.Lock()
	r.attempts[msg] = it
	r.mu.Unlock()
	_, err := r.js.PublishMsgAsync(msg)
	return msg, err
}

// abandon forgets an item that can never be delivered and frees its slot.
func (r *Results) abandon(it *item, msg *nats.Msg) {
	r.mu.Lock()
	delete(r.attempts, msg)
	delete(r.outstanding, it.seq)
	r.signalLocked()
	r.mu.Unlock()
	<-r.slots
}

// onAck completes the item of an acked attempt. It runs on the nats.go
// ack goroutine and must not block.
func (r *Results) onAck(_ jetstream.JetStream, msg *nats.Msg, ack *jetstream.PubAck) {
	r.mu.Lock()
	it, ok := r.attempts[msg]
	if ok {
		delete(r.attempts, msg)
	}
	r.mu.Unlock()
	if !ok {
		return
	}
	// Reported before the result counts as delivered, outside the lock
	// (it is the caller's code): once Flush returns, every acked result
	// has been reported.
	if r.cfg.OnAcked != nil {
		r.cfg.OnAcked(time.Since(it.accepted))
	}
	r.mu.Lock()
	// Counted before Flush is woken: once it returns, Stats includes this
	// ack.
	r.acked.Add(1)
	r.streamOK.Store(true)
	duplicate := ack != nil && ack.Duplicate
	if duplicate {
		r.duplicates.Add(1)
	}
	delete(r.outstanding, it.seq)
	r.signalLocked()
	r.mu.Unlock()

	if duplicate {
		// Rare, and the one ack that says nothing of this attempt's own
		// message: worth a trail when a result is missing downstream.
		r.log.Debug("bridge: result already in the stream", "msg_id", it.hdr.Get(jetstream.MsgIDHeader), "seq", ack.Sequence)
	}
	<-r.slots
}

// onErr schedules a failed attempt for retry. It runs on nats.go goroutines
// (ack handler, timeout timer, reconnect watcher) and must not block: the
// send to retryCh cannot, since every queued item holds one of the slots
// retryCh has room for.
func (r *Results) onErr(_ jetstream.JetStream, msg *nats.Msg, err error) {
	r.mu.Lock()
	it, ok := r.attempts[msg]
	if ok {
		delete(r.attempts, msg)
	}
	r.mu.Unlock()
	if !ok {
		return
	}
	r.errs.Add(1)
	r.streamOK.Store(false)
	if isNoStream(err) {
		r.streamLost.Store(true)
	}
	delay := backoff.Delay(it.attempt+1, firstBackoff, r.cfg.MaxBackoff)
	it.attempt++
	it.notBefore = time.Now().Add(delay)
	select {
	case <-r.stop:
	default:
		if ok, suppressed := r.pubLog.Allow(); ok {
			r.log.Warn("bridge: publish failed, retrying",
				"subject", it.subject, "msg_id", it.hdr.Get(jetstream.MsgIDHeader),
				"attempt", it.attempt, "retry_in", delay, "err", err, "suppressed", suppressed)
		}
	}
	r.retryCh <- it
}

// retryLoop resends failed items once their backoff has passed.
func (r *Results) retryLoop() {
	defer r.wg.Done()
	for {
		var it *item
		select {
		case <-r.stop:
			return
		case it = <-r.retryCh:
		}
		if !r.sleep(time.Until(it.notBefore)) {
			return
		}
		// While disconnected a resend would only pile another copy into
		// the reconnect buffer; wait for the connection instead, polling
		// often enough to resume soon after it is back.
		for !r.nc.IsConnected() {
			if !r.sleep(connPoll) {
				return
			}
		}
		if r.streamLost.Load() && time.Since(r.lostAt) >= recreateEvery {
			r.lostAt = time.Now()
			r.recreateStream()
		}
		r.retries.Add(1)
		if msg, err := r.send(it); err != nil {
			r.onErr(nil, msg, err)
		}
	}
}

// sleep waits d and reports false if the bridge stopped meanwhile.
func (r *Results) sleep(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-r.stop:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.stop:
		return false
	case <-t.C:
		return true
	}
}

// signalLocked wakes Flush waiters. r.mu must be held.
func (r *Results) signalLocked() {
	if r.progress != nil {
		close(r.progress)
		r.progress = nil
	}
}

// Flush waits until every result accepted by Publish before the call is
// acked, or ctx ends (the error then wraps ctx.Err() and says how many
// results are pending). Results published during Flush do not delay it.
func (r *Results) Flush(ctx context.Context) error {
	r.mu.Lock()
	target := r.nextSeq
	for {
		// Acks arrive out of order: done when the oldest outstanding
		// sequence is at or past the target.
		low := r.nextSeq
		for seq := range r.outstanding {
			low = min(low, seq)
		}
		if low >= target {
			r.mu.Unlock()
			return nil
		}
		if r.progress == nil {
			r.progress = make(chan struct{})
		}
		ch := r.progress
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("bridge: flush: %d results not acknowledged: %w", len(r.slots), ctx.Err())
		}
		r.mu.Lock()
	}
}

// close stops accepting results, waits (bounded by ctx) until every
// accepted result is acked, stops the retry loop and releases the
// JetStream publisher, failing what is still in flight.
func (r *Results) close(ctx context.Context) error {
	close(r.closing)
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	err := r.Flush(ctx)
	close(r.stop)
	r.cancelRun()
	r.wg.Wait()
	r.js.CleanupPublisher()
	return err
}

// stats fills the results' counters of s.
func (r *Results) stats(s *Stats) {
	s.Published, s.Acked, s.Duplicates = r.published.Load(), r.acked.Load(), r.duplicates.Load()
	s.Errors, s.Retries, s.Pending = r.errs.Load(), r.retries.Load(), len(r.slots)
	s.StreamRecreated, s.StreamReady = r.streamRecreated.Load(), r.StreamReady()
}
