package partition

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/market"
)

const (
	// fetchBatch is the most messages one pull request asks for.
	fetchBatch = 512
	// maxAckPending bounds the messages delivered to an owner and not yet
	// acked (they are acked, all at once, after each batch).
	maxAckPending = 8 * fetchBatch
	// pinHeader carries the pin id on every message the server delivers
	// to the pinned client.
	pinHeader = "Nats-Pin-Id"
	// TickHeader marks an idle tick an owner published into its partition;
	// together with the subject's last token TickToken it tells a tick
	// from a position.
	TickHeader = "Edgeproc-Tick"
	// TickToken is the last subject token of a tick. It is a courier id
	// too ('_' is a courier character): such a courier's positions may
	// share a tick's subject, and the header tells them apart (kindOf).
	TickToken = "_tick"
	// WakeValue, as a tick's TickHeader, makes it a wake-up: a message a
	// standby publishes into a partition without owner only so that the
	// server has something to deliver, and pin. An owner acks it and
	// applies nothing (see kindOf).
	WakeValue = "wake"
)

// part is one partition as seen by one instance: a pull loop on the
// partition's durable consumer that is either standby (no pin) or the
// owner, holding a term.
type part struct {
	env          *env
	n            int
	ecfg         engine.Config // the partition's engine (EngineConfig)
	subject      string        // filter subject of the positions
	tickSubject  string
	consumerName string
	key          string // checkpoint record key
	cons         jetstream.Consumer

	// The loop goroutine owns term and the fields below it.
	term     *term
	lastCkpt time.Time
	lastTick time.Time
	lastWake time.Time // standby: when it last looked for a partition without owner

	// Read by metrics and tests from any goroutine.
	eng      atomic.Pointer[engine.Engine]      // the current term's
	ckpt     atomic.Pointer[market.Checkpoints] // the current term's
	refused  atomic.Pointer[string]             // why the last claim cannot succeed; nil: it can
	pastMu   sync.Mutex
	past     engine.Stats     // counters of the ended terms' engines
	pastCkpt checkpoint.Stats // and of their checkpointers

	owned, epoch, processed, applied, ckptSeq, lagMsgs atomic.Uint64
	badBatches                                         atomic.Uint64 // batches that did not decode
	lastTS                                             atomic.Int64  // ms, stream time of the last message applied
	takeovers, fenced, dropped, caughtUp               atomic.Uint64
	acquiredAt, firstResultAt                          atomic.Int64 // unix ns of the current term
	lastResultAt                                       atomic.Int64 // unix ns, any term
}

func newPart(e *env, n int, ecfg engine.Config) *part {
	jc := e.cfg.JetStream
	subject := jc.PartitionSubject(n)
	return &part{
		env: e, n: n, ecfg: ecfg, subject: subject,
		tickSubject:  subject[:len(subject)-1] + TickToken,
		consumerName: jc.Consumer + "-" + strconv.Itoa(n),
		key:          "p" + strconv.Itoa(n),
	}
}

func (p *part) consumerConfig() jetstream.ConsumerConfig {
	ttl := p.env.cfg.JetStream.PinTTL
	return jetstream.ConsumerConfig{
		Durable:        p.consumerName,
		Description:    "edgeproc partition " + strconv.Itoa(p.n) + " of market " + p.env.cfg.Market,
		FilterSubject:  p.subject,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckAllPolicy,
		AckWait:        max(2*ttl, 5*time.Second),
		MaxAckPending:  maxAckPending,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PinnedTTL:      ttl,
		PriorityGroups: []string{group},
		Replicas:       p.env.cfg.JetStream.Replicas,
	}
}

// fetchWait is how long one pull request waits for messages.
func (p *part) fetchWait() time.Duration { return fetchWait(p.env.cfg.JetStream) }

// fetchWait is how long one pull request waits for messages: a fraction of
// the pin TTL, so that the owner renews its pin several times per TTL.
func fetchWait(j config.JetStream) time.Duration { return min(j.PinTTL/5, 2*time.Second) }

// deafGap is the longest gap between two messages of a partition's
// stream that counts as heard time (engine.Config.DeafGap): the owner of
// an idle partition writes a tick after every pull that found nothing,
// about every fetchWait, so four of them without any message is time
// nobody could write to the stream or read it (an outage of NATS, a
// partition without an owner, an owner paused or cut off). It is below
// the pin TTL, so a takeover's wait is always such a gap.
func deafGap(j config.JetStream) time.Duration { return 4 * fetchWait(j) }

// EngineConfig is the engine configuration of partition n of a market:
// the market's windows, limits and input format, the partition's subjects
// as its topic filter and its deaf-gap rule. An owner and anything
// replaying the partition's stream (a test, an operator's check) use it
// alike.
func EngineConfig(cfg config.Config, n int) engine.Config {
	ecfg := market.EngineConfig(cfg)
	subject := cfg.JetStream.PartitionSubject(n)
	ecfg.Topic = natsToMQTT(subject[:len(subject)-1]) + "+"
	// The subject's last token is the courier's topic level (subject.go),
	// with OwnTracks too: the filter's only '+'.
	ecfg.CourierLevel = 0
	// A partition's engine sees its own couriers only: it counts its
	// part of the market's dead zones, which the instances combine
	// (zones.go).
	ecfg.DeadZoneParts, ecfg.Partition = true, n
	if cfg.Windows.IdleTimeout > 0 {
		ecfg.DeafGap = deafGap(cfg.JetStream).Milliseconds()
	}
	return ecfg
}

// leaseMargin is how long before the pin TTL runs out (counted from the
// last accepted pull request) an owner stops publishing: room for clock
// drift and for results already handed to the connection.
func (p *part) leaseMargin() time.Duration { return p.env.cfg.JetStream.PinTTL / 4 }

func (p *part) hold() {
	if p.env.hold != nil {
		p.env.hold(p.n)
	}
}

// run is the partition's pull loop until ctx ends.
func (p *part) run(ctx context.Context) {
	defer p.release()
	p.lastWake = time.Now()
	for ctx.Err() == nil {
		p.hold()
		if p.term != nil && p.term.fenced.Load() {
			p.lose("fenced")
		}
		if p.term != nil && p.env.shares.shed() {
			// More than this instance's share: hand this one over.
			p.env.log.Info("handing the partition over for balance", "partition", p.n, "owned", p.env.shares.owned.Load(), "share", p.env.shares.share())
			p.release()
			// The server pins a partition to the instance it next delivers
			// a message to: an idle one would stay without an owner, hence
			// without ticks and the idle rule, until its next position. A
			// tick gives it its new owner now. (Not at shutdown: a tick no
			// owner applies would be in the log and in no result.)
			if p.heard() {
				p.tick(ctx)
			}
			p.env.shares.shedDone()
			continue
		}
		if p.term == nil && p.env.shares.atLimit() {
			// Leave the partition to instances with room: no pull request.
			sleepCtx(ctx, p.fetchWait())
			continue
		}
		sent := time.Now()
		batch, err := p.cons.Fetch(fetchBatch, jetstream.FetchMaxWait(p.fetchWait()), jetstream.FetchPriorityGroup(group))
		if err != nil {
			p.fetchFailed(ctx, err)
			continue
		}
		var last jetstream.Msg
		stalled := false // a gap could not be read: not idle, whatever was applied
		for m := range batch.Messages() {
			if pin := m.Headers().Get(pinHeader); p.term == nil || pin != p.term.pin {
				if p.term != nil {
					p.lose("pin changed")
				}
				if !p.acquire(ctx, pin, sent) {
					break // no term: the message is redelivered later
				}
			}
			if !p.term.handle(ctx, m) {
				stalled = true
				break // m and the rest are redelivered after the ack wait
			}
			last = m
		}
		if p.term != nil {
			p.term.eng.Flush() // latency over batching: hand the batch to the shards now
		}
		if err := batch.Error(); err != nil {
			p.fetchFailed(ctx, err)
			continue
		}
		if p.term == nil {
			if last == nil {
				p.maybeWake(ctx)
			}
			continue
		}
		// Every pull request the server accepts under our pin restarts its
		// TTL from when the server got it, which is after sent.
		p.term.lease.Store(sent.Add(p.env.cfg.JetStream.PinTTL - p.leaseMargin()).UnixNano())
		if last != nil {
			_ = last.Ack() // AckAll: everything before it too; lost acks only cause redeliveries
		} else if !stalled {
			p.lagMsgs.Store(0)
			p.maybeTick(ctx)
		}
		p.maybeCheckpoint()
	}
}

// fetchFailed handles a failed pull request: a pin mismatch means another
// instance owns the partition now.
func (p *part) fetchFailed(ctx context.Context, err error) {
	if errors.Is(err, jetstream.ErrPinIDMismatch) {
		if p.term != nil {
			p.lose("pin taken over")
		}
		return
	}
	if ctx.Err() != nil {
		return
	}
	if errors.Is(err, nats.ErrConnectionClosed) {
		<-ctx.Done()
		return
	}
	p.env.log.Debug("pull failed", "partition", p.n, "err", err)
	sleepCtx(ctx, p.fetchWait())
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// acquire starts a term under pin: it claims the checkpoint record and
// restores the engine from it. It reports false when that failed; the loop
// stays standby and the message is redelivered.
func (p *part) acquire(ctx context.Context, pin string, sent time.Time) bool {
	if !p.env.shares.reserve() {
		// Pinned, but at the limit (another partition was taken meanwhile):
		// hand the pin back so that it goes to an instance with room now.
		p.unpin()
		return false
	}
	t, err := p.claim(ctx, pin, sent)
	if err != nil {
		p.env.shares.release()
		if !engine.Refused(err) {
			p.env.log.Warn("partition not taken over", "partition", p.n, "err", err)
			return false
		}
		// Every retry fails alike until the configuration changes: say it
		// once, and in /readyz for as long as it lasts.
		why := "partition " + strconv.Itoa(p.n) + " cannot be taken over: " + err.Error()
		if errors.Is(err, engine.ErrSnapshotConfig) {
			why += "; restore the old configuration, or delete key " + p.key + " of bucket " + checkpointBucket(p.env.cfg.Market) + " to start the partition empty from the stream's first message"
		}
		if old := p.refused.Swap(&why); old == nil || *old != why {
			p.env.log.Error("partition cannot be taken over under this configuration; /readyz fails until it can", "partition", p.n, "err", err)
		}
		p.unpin() // an instance with the configuration it was written with may take it
		return false
	}
	p.refused.Store(nil)
	p.eng.Store(t.eng)
	p.ckpt.Store(t.ckpt)
	p.term = t
	p.owned.Store(1)
	p.epoch.Store(t.epoch)
	p.processed.Store(t.last)
	p.takeovers.Add(1)
	p.acquiredAt.Store(time.Now().UnixNano())
	p.firstResultAt.Store(0)
	p.lastCkpt, p.lastTick = time.Now(), time.Now()
	p.env.log.Info("partition owned", "partition", p.n, "epoch", t.epoch, "from_sequence", t.last+1)
	return true
}

// lose ends the current term: its engine's pending results are dropped
// (a successor re-derives them from the stream) and it records nothing.
func (p *part) lose(why string) {
	t := p.term
	p.term, p.lastWake = nil, time.Now()
	p.owned.Store(0)
	p.env.shares.release()
	p.fenced.Add(1)
	t.fence()
	p.stop(t)
	p.env.log.Info("partition lost", "partition", p.n, "epoch", t.epoch, "why", why)
}

// release ends the owned term at shutdown: a final checkpoint once every
// result is acked, then the pin is given up so a successor need not wait
// for the TTL. Meanwhile the pin is renewed, so that the lease holds for
// the results still on their way. All of it within the market's drain: results
// NATS does not acknowledge (a stream without a leader) must not keep the
// process from stopping; the successor then resumes from the previous
// checkpoint and re-derives what was not recorded.
func (p *part) release() {
	t := p.term
	if t == nil {
		return
	}
	p.term, p.lastWake = nil, time.Now()
	p.owned.Store(0)
	p.env.shares.release()
	if p.env.closed() {
		t.fence() // cut off: nothing can be recorded any more
		p.stop(t)
		return
	}
	drain := p.env.mkt.Drain()
	deadline := time.Now().Add(drain)
	if !p.finalCheckpoint(t, deadline) {
		p.env.log.Warn("final checkpoint not recorded in time; a successor resumes from the previous one",
			"partition", p.n, "epoch", t.epoch, "drain_timeout", drain)
	}
	// The lake's rows to Parquet while the lease holds; what is not
	// written stays staged for the successor.
	t.eng.Stop()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.closeLake(ctx)
	cancel()
	t.fence() // after the final checkpoint, nothing more goes out
	p.stop(t)
	p.unpin()
}

// stop stops an ended term's engine and keeps its counters, so that the
// market's counters never go back when a partition changes hands.
func (p *part) stop(t *term) {
	t.eng.Stop()
	t.parts.Stop()
	cut, cancel := context.WithCancel(context.Background())
	cancel()
	t.closeLake(cut) // fenced: what is staged is the successor's
	p.eng.Store(nil)
	p.ckpt.Store(nil)
	st, cs := t.eng.Stats(), t.ckpt.Stats()
	p.pastMu.Lock()
	p.past.Add(st)
	addCheckpoints(&p.pastCkpt, cs)
	p.pastMu.Unlock()
}

// finalCheckpoint checkpoints t's last applied message, unless it is
// recorded already, and waits until it is recorded or given up, renewing
// the pin meanwhile. It reports false when deadline came first.
func (p *part) finalCheckpoint(t *term, deadline time.Time) bool {
	done := make(chan struct{})
	for {
		if t.last == p.ckptSeq.Load() {
			return true // recorded, maybe by the checkpoint that was finishing
		}
		if t.checkpoint(func() { close(done) }) {
			break
		}
		if t.fenced.Load() {
			return true // nothing of this term may be recorded
		}
		select { // the previous checkpoint is finishing
		case <-t.ckpt.Idle():
		case <-time.After(time.Until(deadline)):
			return false
		}
	}
	for {
		t.keepPin()
		select {
		case <-done:
			return true
		case <-time.After(min(p.fetchWait(), time.Until(deadline))):
			if time.Now().After(deadline) {
				return false
			}
		}
	}
}

// unpin asks the server to give the partition's pin to the next instance
// asking for it now, rather than after the pin TTL. Waiting longer than
// the TTL gains nothing: by then the pin has lapsed anyway.
func (p *part) unpin() {
	ctx, cancel := context.WithTimeout(context.Background(), p.env.cfg.JetStream.PinTTL)
	defer cancel()
	if s, err := p.env.js.Stream(ctx, p.env.cfg.JetStream.Stream); err == nil {
		_ = s.UnpinConsumer(ctx, p.consumerName, group)
	}
}

// maybeCheckpoint starts a checkpoint every state.checkpoint_interval
// while the partition moved on since the last one.
func (p *part) maybeCheckpoint() {
	t := p.term
	if time.Since(p.lastCkpt) < p.env.cfg.State.CheckpointInterval || t.last == p.ckptSeq.Load() {
		return
	}
	if t.checkpoint(nil) {
		p.lastCkpt = time.Now()
	}
}

// maybeTick publishes a tick into the partition after a pull request that
// found nothing, at most about once per pull wait. A tick is a message of
// the partition's stream like any other, so its stream timestamp is the
// processing time at which the idle rule is applied, by this owner and by
// any successor replaying the stream: the idle rule is a function of the
// stream. Ticks are also what tells heard time from deafness: a gap of
// more than deafGap between two messages of the stream is taken as time
// nobody could write or read (engine.Config.DeafGap), so an outage or a
// pause is never applied as silence, and a tick buffered by the client
// while it was disconnected, stored late, only ends such a gap.
func (p *part) maybeTick(ctx context.Context) {
	if p.env.cfg.Windows.IdleTimeout <= 0 || !p.heard() {
		return
	}
	now := time.Now()
	if now.Sub(p.lastTick) < p.fetchWait()/2 {
		return
	}
	p.lastTick = now
	p.tick(ctx)
}

// maybeWake publishes a wake-up into the partition when nobody owns it,
// so that the server pins it to one of the instances asking, this one
// among them. The server pins a partition when it delivers a message, and one
// whose owner died while it was idle (every message acked) has none to
// deliver: it would stay without an owner, without ticks and so without
// the idle rule (no no_signal for its silent couriers) until its next
// position. It looks at most once a pin_ttl, after a pin_ttl of asking
// with nothing delivered: nothing pending, nothing awaiting an ack and no
// pin then mean no owner (an owner pulls, and ticks an idle partition,
// every pull wait). A wake-up, not a tick: a standby cannot vouch that the
// time since the last message was heard (the owner's ticks do that).
func (p *part) maybeWake(ctx context.Context) {
	now := time.Now()
	if now.Sub(p.lastWake) < p.env.cfg.JetStream.PinTTL {
		return
	}
	p.lastWake = now
	ictx, cancel := context.WithTimeout(ctx, p.fetchWait())
	defer cancel()
	info, err := p.cons.Info(ictx)
	if err != nil || info.NumPending > 0 || info.NumAckPending > 0 {
		return
	}
	for _, g := range info.PriorityGroups {
		if g.Group == group && g.PinnedClientID != "" {
			return
		}
	}
	p.env.log.Info("waking a partition without owner", "partition", p.n)
	p.publishTick(ctx, WakeValue)
}

// heard reports whether the positions can reach the stream now. With the
// relay unable to hear the market's broker, the positions wait there or
// in the phones, and time passing is deafness: no tick makes it a gap in
// the stream (deafGap).
func (p *part) heard() bool { return p.env.heard() }

// tick publishes a tick into the partition.
func (p *part) tick(ctx context.Context) { p.publishTick(ctx, "1") }

// publishTick publishes a message on the partition's tick subject with
// TickHeader set to value: "1" for a tick, WakeValue for a wake-up.
func (p *part) publishTick(ctx context.Context, value string) {
	msg := &nats.Msg{Subject: p.tickSubject, Header: nats.Header{TickHeader: []string{value}}}
	pctx, cancel := context.WithTimeout(ctx, p.fetchWait())
	defer cancel()
	if _, err := p.env.js.PublishMsg(pctx, msg); err != nil {
		p.env.log.Debug("tick not published", "partition", p.n, "value", value, "err", err)
	}
}
