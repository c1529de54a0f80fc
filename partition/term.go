package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/output"
	"github.com/km0/edgeproc/result"
)

// errFenced is why a fenced term records nothing.
var errFenced = fmt.Errorf("%w: partition owned by another instance", checkpoint.ErrSuperseded)

// term is one instance's ownership of one partition, from the claim to
// its loss or release. The pull loop owns last, consSeq, prevFirst and the
// engine's input side; the engine's goroutines call sink and the
// checkpoint callbacks.
type term struct {
	p     *part
	pin   string
	epoch uint64
	eng   *engine.Engine

	last      uint64 // stream sequence of the last message applied
	consSeq   uint64 // consumer sequence of the last delivery seen; 0: none yet
	prevFirst bool   // the last delivery seen was a first delivery

	rev      atomic.Uint64       // checkpoint record revision this term wrote last
	object   string              // snapshot of that record; written by the checkpoint callback only
	deltas   []deltaRef          // that record's deltas; as object
	wholeSeq uint64              // object's sequence while there are deltas; as object
	ckpt     *market.Checkpoints // over the term itself as its store
	parts    market.Stopper      // the checkpoint driver's goroutine
	fenced   atomic.Bool
	lease    atomic.Int64 // unix ns after which this term must not publish

	pubCtx    context.Context // ends when the term is fenced
	cancelPub context.CancelFunc

	out      *output.Sink // sink only
	topicBuf []byte       // pull loop only

	// lake is the partition's lake series (nil without lake.dir), fed
	// by the engine's merger through lakeRows; closed when the term ends.
	lake     *lake.Feed
	lakeRows func([]engine.Row)
}

// claim makes this instance the partition's owner and restores its
// engine from the partition's recovery point (the term's Load claims the
// checkpoint record).
func (p *part) claim(ctx context.Context, pin string, sent time.Time) (*term, error) {
	r := p.env
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	t := &term{p: p, pin: pin}
	t.pubCtx, t.cancelPub = context.WithCancel(context.Background())
	t.out = r.out.For()
	ecfg := p.ecfg
	ecfg.OnPosition = t.out.Position
	ecfg.OnForget = t.out.Forget
	ecfg.OnSide = t.out.Side
	if r.cfg.Lake.Dir != "" {
		ecfg.OnRows = func(rows []engine.Row) { t.lakeRows(rows) }
	}
	eng, seq, err := market.Recover(cctx, ecfg, t.sink, t)
	if err != nil {
		t.cancelPub()
		return nil, err
	}
	t.eng, t.last = eng, seq
	t.lease.Store(sent.Add(r.cfg.JetStream.PinTTL - p.leaseMargin()).UnixNano())
	// The lake series is opened once the record is claimed (Recover): an
	// earlier owner is fenced by then, and its lease, which its writes
	// check, has ended.
	if err := t.openLake(seq); err != nil {
		eng.Stop()
		t.cancelPub()
		return nil, fmt.Errorf("lake: %w", err)
	}
	t.ckpt = market.NewCheckpoints(r.mkt.Sink().Flush, t, seq, r.log.With("partition", p.n))
	t.ckpt.Lake, t.ckpt.LakeIndex = t.lake, lastLineOf
	t.ckpt.SaveTimeout = opTimeout
	t.parts.Go(func() { t.ckpt.Run(t.pubCtx) }, t.cancelPub)
	p.ckptSeq.Store(seq)
	return t, nil
}

// openLake opens and starts the partition's lake series (prefix "pN-")
// at seq, the claimed checkpoint's sequence; its rows' indexes are lines
// (lineOf).
func (t *term) openLake(seq uint64) error {
	// No spill folder: an owner whose staging fails stops pulling, and
	// the positions wait in the stream, the partition's log.
	f, err := t.p.env.mkt.OpenLake(fmt.Sprintf("p%d-", t.p.n), t.leased, "")
	if err != nil || f == nil {
		return err
	}
	if err := f.Start(lastLineOf(seq)); err != nil {
		t.p.env.mkt.CloseLake(context.Background(), f)
		return err
	}
	t.lake, t.lakeRows = f, market.LakeRows(f)
	return nil
}

// leased is the lake's fence: an error once the term is fenced or its
// lease has run out, when the partition may already be another
// instance's; the term is then over, as when its sink finds the lease
// ended.
func (t *term) leased() error {
	if time.Now().UnixNano() > t.lease.Load() {
		t.fence()
	}
	if t.fenced.Load() {
		return errFenced
	}
	return nil
}

// closeLake closes the term's lake series within ctx (bounded by the
// lease: the fence stops what would come after).
func (t *term) closeLake(ctx context.Context) {
	f := t.lake
	if f == nil {
		return
	}
	t.lake = nil
	ctx, cancel := context.WithDeadline(ctx, time.Unix(0, t.lease.Load()))
	defer cancel()
	if err := t.p.env.mkt.CloseLake(ctx, f); err != nil && !t.fenced.Load() {
		t.p.env.log.Warn("lake: rows left staged for the partition's next owner", "partition", t.p.n, "err", err)
	}
}

// Load claims the partition's checkpoint record for this term (the next
// epoch, by compare-and-set, so that every earlier owner is fenced before
// the snapshot is read) and returns the recovery point it names.
func (t *term) Load(ctx context.Context) (checkpoint.Point, bool, error) {
	st := t.p.env.store
	rec, rev, err := st.claim(ctx, t.p.key, t.pin)
	if err != nil {
		return checkpoint.Point{}, false, err
	}
	t.epoch, t.object, t.deltas, t.wholeSeq = rec.Epoch, rec.Object, rec.Deltas, rec.WholeSeq
	t.rev.Store(rev)
	return st.point(ctx, t.p.n, rec)
}

// fence stops the term from publishing or recording anything more.
func (t *term) fence() {
	t.fenced.Store(true)
	t.cancelPub()
}

// handle applies one delivered message. The partition is applied in stream
// order whatever the consumer delivers: a message at or before the last
// one applied is a redelivery and is skipped, and before one that may
// follow a gap (the first of a term, a redelivery, or a delivery after one
// this term did not see) the messages in between are read from the stream
// itself. Between two consecutive first deliveries there is nothing to
// read: the consumer delivers its filter's messages in stream order.
//
// It reports false when the gap before m could not be read: m is not
// applied, and neither may anything delivered after it (the loop leaves
// them unacked, so they are redelivered and the catch-up is tried again).
func (t *term) handle(ctx context.Context, m jetstream.Msg) bool {
	md, err := m.Metadata()
	if err != nil {
		return true
	}
	seq := md.Sequence.Stream
	first := md.NumDelivered == 1
	cont := t.consSeq != 0 && md.Sequence.Consumer == t.consSeq+1 && t.prevFirst && first
	t.consSeq, t.prevFirst = md.Sequence.Consumer, first
	t.p.lagMsgs.Store(md.NumPending)
	if seq <= t.last {
		return true
	}
	if !cont && seq > t.last+1 && !t.catchUp(ctx, seq) {
		t.consSeq = 0 // whatever comes next follows a gap
		return false
	}
	t.apply(m.Subject(), m.Headers(), m.Data(), seq, md.Timestamp)
	return true
}

// catchUpResets bounds the attempts of the ordered consumer to create its
// consumer for one fetch. Its default retries for ever on its own
// context, and a stream that has lost its leader (a node died) would keep
// the pull loop, and the shutdown, waiting there.
const catchUpResets = 2

// catchUp applies the partition's messages after t.last and before upTo,
// read in stream order by an ordered consumer. It reports false when they
// could not be read (the stream unavailable, the term fenced, ctx ended:
// the instance is stopping); true once they are applied, or when the
// stream no longer holds them.
func (t *term) catchUp(ctx context.Context, upTo uint64) bool {
	p := t.p
	ctx, cancel := context.WithTimeout(ctx, 10*p.env.cfg.JetStream.PinTTL)
	defer cancel()
	defer context.AfterFunc(t.pubCtx, cancel)()
	oc, err := p.env.js.OrderedConsumer(ctx, p.env.cfg.JetStream.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{p.subject},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       t.last + 1,
		MaxResetAttempts:  catchUpResets,
		InactiveThreshold: catchUpInactive,
	})
	if err != nil {
		t.catchUpFailed(upTo, err)
		return false
	}
	defer p.dropConsumer(oc)
	empty := 0
	for t.last+1 < upTo {
		if t.fenced.Load() || ctx.Err() != nil {
			return false
		}
		t.keepPin()
		batch, err := oc.Fetch(fetchBatch, jetstream.FetchMaxWait(p.fetchWait()))
		if err != nil {
			t.catchUpFailed(upTo, err)
			return false
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil || md.Sequence.Stream <= t.last {
				continue
			}
			if md.Sequence.Stream >= upTo {
				return true
			}
			t.apply(m.Subject(), m.Headers(), m.Data(), md.Sequence.Stream, md.Timestamp)
			p.caughtUp.Add(1)
		}
		if got == 0 {
			if empty++; empty >= 3 {
				// upTo itself is in the stream: only a purge or age limit
				// removes what lies before it.
				p.env.log.Error("catch-up found nothing more; messages missing from the stream", "partition", p.n, "after", t.last, "before", upTo)
				return true
			}
		}
	}
	return true
}

// catchUpInactive is how long the server keeps a catch-up's consumer
// that nobody pulls from, should dropConsumer not reach it. The library's
// default is 5 minutes; a stream holds at most 1000 consumers by default
// (nats-server 2.11 on), and an owner that catches up often (a flapping
// connection, a paused process) had filled that in minutes, after which
// no catch-up and no consumer of the stream could be created.
const catchUpInactive = 10 * time.Second

// dropConsumer deletes the server's consumer of a finished catch-up, if
// it made one, waiting at most a pull wait (the pull loop waits for it).
func (p *part) dropConsumer(oc jetstream.Consumer) {
	info := oc.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.fetchWait())
	defer cancel()
	if err := p.env.js.DeleteConsumer(ctx, p.env.cfg.JetStream.Stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		p.env.log.Debug("catch-up consumer not deleted; the server drops it once inactive", "partition", p.n, "consumer", info.Name, "inactive_threshold", catchUpInactive, "err", err)
	}
}

func (t *term) catchUpFailed(upTo uint64, err error) {
	if t.fenced.Load() {
		return // the term is over: nothing to tell
	}
	t.p.env.log.Warn("catch-up failed; the messages after it are redelivered and it is tried again",
		"partition", t.p.n, "from", t.last+1, "to", upTo-1, "err", err)
}

// keepPin renews the pin during a long catch-up with a pull request of one
// message. The message is left unacked: the consumer redelivers it, and
// the gap it leaves in the deliveries this term sees makes the next one
// catch up from the stream again.
func (t *term) keepPin() {
	p := t.p
	if time.Until(time.Unix(0, t.lease.Load())) > p.env.cfg.JetStream.PinTTL/2 {
		return
	}
	sent := time.Now()
	batch, err := p.cons.Fetch(1, jetstream.FetchMaxWait(min(p.fetchWait(), 200*time.Millisecond)), jetstream.FetchPriorityGroup(group))
	if err != nil {
		return
	}
	for m := range batch.Messages() {
		if m.Headers().Get(pinHeader) != t.pin {
			t.fence()
			return
		}
	}
	if errors.Is(batch.Error(), jetstream.ErrPinIDMismatch) {
		t.fence()
		return
	}
	t.lease.Store(sent.Add(p.env.cfg.JetStream.PinTTL - p.leaseMargin()).UnixNano())
	t.consSeq = 0 // whatever was delivered is not applied: the next delivery catches up
}

// msgKind is what a message of a partition's stream is.
type msgKind uint8

const (
	msgPosition msgKind = iota
	msgTick             // an owner's idle tick: the idle rule at its timestamp
	msgWake             // a standby's wake-up (WakeValue): nothing to apply
	msgBatch            // the relay's positions (batch.go)
)

// kindOf tells a message of a partition's stream by its subject and
// headers; the owner and any replay of the stream must agree on it.
func kindOf(subject string, hdr nats.Header) msgKind {
	i := strings.LastIndexByte(subject, '.')
	switch last := subject[i+1:]; {
	case last == BatchToken:
		return msgBatch
	case last != TickToken: // a position: no header lookup
		return msgPosition
	}
	switch hdr.Get(TickHeader) {
	case "":
		return msgPosition
	case WakeValue:
		return msgWake
	}
	return msgTick
}

// eachEntry calls fn with the entries of the partition's log that a
// message stored at seq and ms holds, each with its line (lineOf): a
// tick applies the idle rule at ms, a position arrives at ms (its topic
// built in *topic, reused), a batch's positions arrive at ms in order,
// and a wake-up is none. The owner and every replay of the stream go
// through it. A batch that does not decode gives the positions before
// the damage and an error.
func eachEntry(subject string, hdr nats.Header, data []byte, seq uint64, ms int64, topic *[]byte, fn func(line uint64, e entry.Entry)) error {
	switch kindOf(subject, hdr) {
	case msgWake:
		return nil
	case msgTick:
		fn(lineOf(seq, 0), entry.Entry{Kind: entry.Tick, Arrival: ms})
		return nil
	case msgBatch:
		base := subject[:len(subject)-len(BatchToken)]
		return eachBatchEntry(data, func(i int, token, payload []byte) {
			*topic = appendMQTTTopic(appendMQTTTopic((*topic)[:0], base), token)
			fn(lineOf(seq, i), entry.Entry{Kind: entry.Position, Arrival: ms, Topic: string(*topic), Payload: payload})
		})
	}
	*topic = appendMQTTTopic((*topic)[:0], subject)
	fn(lineOf(seq, 0), entry.Entry{Kind: entry.Position, Arrival: ms, Topic: string(*topic), Payload: data})
	return nil
}

// apply hands one message of the partition to the engine as entries of
// the partition's log (engine.Apply, eachEntry), each line the key of its
// rejected record and its lake row's index.
func (t *term) apply(subject string, hdr nats.Header, data []byte, seq uint64, ts time.Time) {
	ms := ts.UnixMilli()
	n := 0
	err := eachEntry(subject, hdr, data, seq, ms, &t.topicBuf, func(line uint64, e entry.Entry) {
		t.eng.Apply(line, e)
		n++
	})
	if err != nil {
		t.p.badBatches.Add(1)
		t.p.env.log.Error("a batch of the positions stream does not decode; the positions before the damage are applied", "partition", t.p.n, "seq", seq, "err", err)
	}
	t.last = seq
	t.p.processed.Store(seq)
	if n > 0 {
		t.p.applied.Add(uint64(n))
		t.p.lastTS.Store(ms)
	}
}

// sink publishes the term's results while its lease holds. Past the lease
// the pin may already be another instance's: the term fences itself and
// drops what is left, which the successor re-derives from the stream.
func (t *term) sink(rs []result.Record) {
	p := t.p
	p.hold()
	now := time.Now().UnixNano()
	if now > t.lease.Load() {
		t.fence()
	}
	if t.fenced.Load() {
		p.dropped.Add(uint64(len(rs)))
		t.logResults("results dropped: the term is over", rs)
		return
	}
	t.logResults("results to the bridge", rs)
	p.firstResultAt.CompareAndSwap(0, now)
	p.lastResultAt.Store(now)
	// A publish waits (bridge backpressure) at most until the lease ends,
	// or the pull loop, blocked behind this sink, could never find out
	// that the partition moved.
	var ctx context.Context
	cancel := context.CancelFunc(func() {})
	defer func() { cancel() }()
	leased := func() {
		cancel()
		ctx, cancel = context.WithDeadline(t.pubCtx, time.Unix(0, t.lease.Load()))
	}
	leased()
	for i := range rs {
		err := t.out.Publish(ctx, &rs[i])
		for errors.Is(err, context.DeadlineExceeded) && time.Now().UnixNano() < t.lease.Load() {
			leased() // the lease was renewed meanwhile
			err = t.out.Publish(ctx, &rs[i])
		}
		if err != nil {
			if ctx.Err() != nil {
				t.fence()
				p.dropped.Add(uint64(len(rs) - i))
				t.logResults("results dropped: the lease ended while publishing", rs[i:])
				return
			}
			p.dropped.Add(1)
		}
	}
}

// checkpoint starts a snapshot at the last applied message; after, when
// set, is called once it is recorded or given up. It reports false when a
// checkpoint is still in progress.
func (t *term) checkpoint(after func()) bool { return t.ckpt.Start(t.eng, t.last, after) }

// Save is the term's checkpoint.Saver: it stores the snapshot as an
// object, then points the checkpoint record at it by compare-and-set; a
// revision mismatch means another instance claimed the partition: the
// term is fenced. The previous snapshot and its deltas go once the record
// no longer names them.
func (t *term) Save(ctx context.Context, seq uint64, snap [][]byte) (int64, error) {
	name := t.objectName(seq, "")
	n, err := t.record(ctx, name, snap, record{Seq: seq, Object: name})
	if err != nil {
		return 0, err
	}
	if old := t.object; old != "" && old != name {
		t.p.env.store.drop(ctx, old)
	}
	for _, d := range t.deltas {
		t.p.env.store.drop(ctx, d.Object)
	}
	t.object, t.deltas = name, nil
	return n, nil
}

// SaveDelta stores an incremental snapshot as an object and adds it to
// the checkpoint record's chain, as Save does. The whole snapshot it
// builds on and the deltas before stay until the next whole one.
func (t *term) SaveDelta(ctx context.Context, base, seq uint64, snap [][]byte) (int64, error) {
	name := t.objectName(seq, "-delta")
	chain := append(slices.Clone(t.deltas), deltaRef{Object: name, Seq: seq})
	whole := base
	if len(t.deltas) > 0 {
		whole = t.wholeSeq
	}
	n, err := t.record(ctx, name, snap, record{Seq: seq, Object: t.object, Deltas: chain, WholeSeq: whole})
	if err != nil {
		return 0, err
	}
	t.deltas, t.wholeSeq = chain, whole
	return n, nil
}

// objectName names the snapshot of seq that the term's next record
// write points at. The record's revision makes it unique: two snapshots
// at one sequence (nothing applied between two checkpoints) must not
// overwrite each other, for the record may name the first.
func (t *term) objectName(seq uint64, suffix string) string {
	return fmt.Sprintf("%s-e%d-s%d-r%d%s", t.p.key, t.epoch, seq, t.rev.Load(), suffix)
}

// record stores snap as object name and writes rec, with this term's
// epoch and pin, as the checkpoint record on the revision the term wrote
// last; a revision mismatch fences the term.
func (t *term) record(ctx context.Context, name string, snap [][]byte, rec record) (int64, error) {
	if t.fenced.Load() {
		return 0, errFenced
	}
	rec.Epoch, rec.Pin = t.epoch, t.pin
	rev, n, err := t.p.env.store.put(ctx, t.p.key, name, snap, rec, t.rev.Load())
	if errors.Is(err, errFenced) {
		t.fence()
	}
	if err != nil {
		return 0, err
	}
	t.rev.Store(rev)
	t.p.ckptSeq.Store(rec.Seq)
	t.p.env.log.Debug("checkpoint recorded", "partition", t.p.n, "epoch", t.epoch, "seq", rec.Seq, "object", name, "revision", rev)
	return n, nil
}

// logResults leaves a trail of where a term's results went, at debug
// level: one line per hand-over, naming its first and last keys, so that a
// result missing downstream can be traced to the term that had it.
func (t *term) logResults(msg string, rs []result.Record) {
	log := t.p.env.log
	if len(rs) == 0 || !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	log.Debug(msg, "partition", t.p.n, "epoch", t.epoch, "applied_seq", t.p.processed.Load(), "results", len(rs),
		"first", rs[0].Key(), "last", rs[len(rs)-1].Key())
}
