package partition

import (
	"context"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/backoff"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/mqtt"
	"github.com/km0/edgeproc/position"
)

// The relay (jetstream.ingest: mqtt) is the positions' way into the
// stream when the couriers' phones publish to the market's own MQTT
// broker: the one instance holding the relay lease (lease.go) subscribes
// under the market's persistent session, stores each position in its
// partition's subject, in receive order, and acks it to the broker only
// once the stream has acked it (contract §8: acknowledged only once
// durable). Nothing is stored twice: a batch's message id is a hash of
// its content, so a batch sent again is dropped by the stream's
// duplicate window; what a successor is given again (the former relay
// stored it, and lost its lease before the ack) it finds by reading the
// stream back (takeover.go), after fencing the former relay's late
// stores off (relayfence.go); what a reconnect gives the same relay
// again it finds among its last positions (redelivery.go).
// A shared subscription ($share/…) would spread the positions over the
// instances, but Mosquitto 2.0 drops what is published to a shared
// subscription after a broker restart and before an instance resubscribes
// (TestRelay_BrokerOutageIsNotSilence lost 280 of 560 positions with one),
// while it keeps a plain persistent subscription's queue. A position
// whose store fails (the stream without a leader while a node is lost) is
// sent again until it is stored, and stays unacked meanwhile.
// The subject is the courier's topic level as the gateway writes it (the
// last level, or with mqtt.format owntracks the USER or DEVICE level;
// subject.go) in the partition nats-server's mapping partition(N, …)
// gives for it, so the relay and the MQTT gateway put a courier in the
// same partition.

// relay is the market's MQTT subscription, on the instance holding the
// relay lease: one per lease term.
type relay struct {
	r   *Runner
	log *slog.Logger
	js  jetstream.JetStream
	src atomic.Pointer[mqtt.Source]

	// prefix and suffix around the partition number in a position's
	// subject (jetstream.subject without its last token), and the
	// partitions' numbers.
	prefix, suffix string
	numbers        []string
	// filter and level name the topic level that is the courier
	// (courierLevel): '+' number level of filter (mqtt.topic) with
	// mqtt.format owntracks, the topic's last level (level -1) with
	// edgeproc.
	filter string
	level  int

	// in carries the received messages, in receive order, to the
	// batcher (batches); pending carries them, with their batch, to the
	// one goroutine (acks) that acks them to the broker once the batch is
	// stored. The broker's Receive Maximum bounds the messages received
	// and not acked: neither channel, of that capacity, blocks for long,
	// and a full one blocks the MQTT handler (backpressure).
	in      chan inbound
	pending chan relayed
	// recent are the positions a former relay stored and may not have
	// acked: the session hands them to this one again (takeover.go),
	// read from the stream back to since (readBackFrom); recentRead is
	// closed once read, settled set once a position that was not given
	// again is acked (every one before it is).
	recent     *recentSet
	since      time.Time
	recentRead chan struct{}
	// after is, per partition, the sequence of this relay's fence
	// (relayfence.go): its first batch's store expects it as the batch
	// subject's last.
	after   []uint64
	settled atomic.Bool
	stopped atomic.Pointer[error] // why the relay stopped itself (its lease lapsed, a successor fenced it off); nil while it runs
	// batching is the batcher and acks goroutines; storing the stores.
	batching, storing sync.WaitGroup

	counts *relayCounts // the lease's: every term's
	ctx    context.Context
	cancel context.CancelFunc // ends ctx: the relay stops
}

// relayCounts are the relay's figures, over every lease term of an
// instance.
type relayCounts struct {
	// stored counts the positions acked once stored, skipped those of
	// them a former relay had stored, redelivered those this relay had
	// received before a reconnect, retries the batch stores sent again.
	stored, retries, skipped, redelivered atomic.Uint64
}

// inbound is a received message and where it goes.
type inbound struct {
	part  int
	token string
	m     *mqtt.Message
}

// relayed is a received message on its way to its ack.
type relayed struct {
	m *mqtt.Message
	b *batch
}

// batch is a partition's positions stored as one message (batch.go).
type batch struct {
	part   int
	body   []byte
	n      int
	prev   *batch        // the partition's batch before it, until that one is stored
	stored chan struct{} // closed once the stream holds it
	seq    uint64        // its stream sequence, once stored
}

func newBatch(part int) *batch {
	return &batch{part: part, body: []byte{batchVersion}, stored: make(chan struct{})}
}

func (b *batch) add(token string, payload []byte) {
	b.body = appendBatchEntry(b.body, token, payload)
	b.n++
}

// storedBatch stands for a batch a former relay stored.
var storedBatch = func() *batch {
	b := newBatch(0)
	close(b.stored)
	return b
}()

// batchLinger is the longest a position waits in its batch before the
// batch is stored: 50 ms of latency, against windows of minutes and a
// board redrawn twice a second, for about 25 positions a message at a
// city fleet's 3 000/s over 6 partitions. Each message wakes its owner's
// process, mostly asleep when it only owns: fewer, fuller messages are
// what an instance costs less for. BenchmarkScaleOut (jetstream-1 and
// -3, µs of edgeproc's CPU a position, GOMAXPROCS=1): 20 ms gave 20.5
// and 27.3 (+33 %), 50 ms 18.6 and 22.4 (+21 %); nats-server 18.8 and
// 21.2 against 16.2 and 17.2. (5 ms had cost 1.3 × 20 ms's.)
const batchLinger = 50 * time.Millisecond

// windowFlush is how many positions held in open batches make the relay
// store them all before their linger: half the broker's window (the
// Receive Maximum it announces), so the other half keeps coming while
// these are stored. Without it the window, not the CPU, bounds the relay
// at one window per linger and store: 1 024 positions per 50 ms and the
// store's round trip at the most.
const windowFlush = mqtt.DefaultReceiveMaximum / 2

// batchID identifies a batch for the stream's duplicate window: the same
// batch sent again is dropped.
func batchID(body []byte) string {
	h := fnv.New128a()
	_, _ = h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func newRelay(r *Runner) *relay {
	base := strings.TrimSuffix(r.cfg.JetStream.Subject, "*")
	prefix, suffix, _ := strings.Cut(base, config.PartitionToken)
	numbers := make([]string, r.cfg.JetStream.Partitions)
	for n := range numbers {
		numbers[n] = strconv.Itoa(n)
	}
	level := -1
	if ec := market.EngineConfig(r.cfg); ec.Format == position.FormatOwnTracks {
		level = ec.CourierLevel
	}
	return &relay{
		r: r, log: r.log.With("ingest", "mqtt"), prefix: prefix, suffix: suffix, numbers: numbers, counts: &r.lease.counts,
		filter: r.cfg.MQTT.Topic, level: level,
		in: make(chan inbound, mqtt.DefaultReceiveMaximum), pending: make(chan relayed, mqtt.DefaultReceiveMaximum),
		recentRead: make(chan struct{}), after: make([]uint64, len(numbers)),
	}
}

// relayConfig is the relay's MQTT session: the market's broker and topic
// under the market's persistent session (mqtt.client_id), whichever
// instance holds the relay lease, so what the broker kept for the market
// while no relay ran, or handed a former relay and got no ack for, comes
// to the next.
func relayConfig(cfg config.Config) mqtt.Config {
	return market.MQTTConfig(cfg.MQTT)
}

// errLeaseLapsed stops a relay whose lease has lapsed under it.
var errLeaseLapsed = errors.New("the relay lease lapsed before it was renewed (the process paused or NATS too slow to answer)")

// leaseLasts reports whether the lease this relay runs under, by this
// machine's clock, lasts long enough that what it connects or stores now
// is done before a successor may take over: pin_ttl/4 or more left. A
// relay whose process was paused past its lease (SIGSTOP, a stalled VM)
// finds on waking that it does not, before it sends a batch its
// successor is given again by the broker, or takes the broker's session
// back from it; it stops then (the lease loop gives the lease up).
func (l *relay) leaseLasts() error {
	rec := l.r.lease.held()
	if rec.Instance == l.r.inst && time.Until(time.UnixMilli(rec.UntilMs)) >= l.r.lease.ttl/4 {
		return nil
	}
	l.stop(errLeaseLapsed)
	return errLeaseLapsed
}

// stoppedWhy is why the relay stopped itself, or nil while it runs.
func (l *relay) stoppedWhy() error {
	if why := l.stopped.Load(); why != nil {
		return *why
	}
	return nil
}

// stop stops the relay for good, for why: the lease loop gives the
// lease up if it is still this instance's.
func (l *relay) stop(why error) {
	if l.stopped.CompareAndSwap(nil, &why) {
		l.log.Warn("relay: stopping: what it holds unacked goes to the next relay", "err", why)
	}
	l.cancel()
}

// relayAckWait is how long a store waits for the stream's ack before it
// is sent again.
const relayAckWait = 5 * time.Second

// start connects to the broker; positions are relayed until ctx ends.
func (l *relay) start(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(relayAckWait), jetstream.WithPublishAsyncMaxPending(2*mqtt.DefaultReceiveMaximum))
	if err != nil {
		return err
	}
	l.js = js
	l.ctx, l.cancel = context.WithCancel(ctx)
	ctx = l.ctx
	// Fence and read in the batcher, not here: the lease is renewed meanwhile
	// (the read may take longer than a lease), and the relay says it
	// does not hear until it is done (ready).
	l.batching.Go(l.run)
	l.batching.Go(l.acks)
	mc := relayConfig(l.r.cfg)
	mc.MayConnect = l.leaseLasts
	src, err := mqtt.Start(ctx, mc, l.log, l.handle)
	if err != nil {
		return err
	}
	l.src.Store(src)
	return nil
}

// run fences the former relay off (relayfence.go), reads what it stored
// lately (takeover.go), then batches what the broker gives.
func (l *relay) run() {
	if err := l.fence(l.ctx); err != nil {
		close(l.pending)
		return
	}
	l.recent = l.readRecent(l.ctx)
	close(l.recentRead)
	l.batches()
}

// handle hands one message, in receive order, to the batcher; acks acks
// it to the broker once its batch is stored.
func (l *relay) handle(m *mqtt.Message) {
	part, token := l.route(m.Topic)
	select {
	case l.in <- inbound{part: part, token: token, m: m}:
	case <-l.ctx.Done(): // not acked: the broker redelivers it to the session
	}
}

// route is a message's partition and its courier's token (subject.go):
// the token in the courier's partition. It allocates only the token.
func (l *relay) route(topic string) (int, string) {
	var buf [maxToken]byte
	token := appendToken(buf[:0], courierLevel(topic, l.filter, l.level))
	return partitionOf(token, len(l.numbers)), string(token)
}

// batches puts the positions into their partitions' batches, in receive
// order, and hands each batch to be stored once it is full or
// batchLinger old. Each position goes to acks, in receive order, with its
// batch.
func (l *relay) batches() {
	defer close(l.pending)
	parts := l.r.cfg.JetStream.Partitions
	open, last := make([]*batch, parts), make([]*batch, parts)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	armed := false
	held := 0 // positions in open batches
	store := func(b *batch) {
		held -= b.n
		b.prev, last[b.part], open[b.part] = last[b.part], b, nil
		l.storing.Go(func() { l.store(b) })
	}
	storeOpen := func() {
		for _, b := range open {
			if b != nil {
				store(b)
			}
		}
	}
	var again lastReceived // what a reconnect may redeliver (redelivery.go)
	for {
		select {
		case in := <-l.in:
			if b := again.batchOf(in.token, in.m); b != nil {
				l.counts.redelivered.Add(1)
				l.pending <- relayed{m: in.m, b: b} // this relay's, before a reconnect
				continue
			}
			if l.recent.has(in.token, in.m) {
				l.counts.skipped.Add(1)
				l.pending <- relayed{m: in.m, b: storedBatch} // stored by a former relay
				again.add(in.token, in.m.Payload, storedBatch)
				continue
			}
			b := open[in.part]
			if b == nil {
				b = newBatch(in.part)
				open[in.part] = b
				if !armed {
					linger.Reset(batchLinger)
					armed = true
				}
			}
			b.add(in.token, in.m.Payload)
			held++
			l.pending <- relayed{m: in.m, b: b}
			again.add(in.token, in.m.Payload, b)
			switch {
			case b.n >= batchMax || len(b.body) >= batchMaxBytes:
				store(b)
			case held >= windowFlush:
				// The broker sends no more than its window unacked:
				// waiting out the linger with half of it held would
				// only idle it.
				storeOpen()
			}
		case <-linger.C:
			armed = false
			storeOpen()
		case <-l.ctx.Done():
			return
		}
	}
}

// store stores b once the partition's batch before it is stored: a
// partition's batches reach the stream in the order they were filled,
// whatever fails in between. A store that fails is sent again, under the
// batch's message id, until it is stored or the relay stops. Each store
// expects the batch subject's last sequence to be this relay's previous
// batch (or its fence): a store that finds another's there was fenced
// off by a successor (relayfence.go), and the relay stops.
func (l *relay) store(b *batch) {
	after := l.after[b.part]
	if b.prev != nil {
		select {
		case <-b.prev.stored:
		case <-l.ctx.Done():
			return
		}
		after = b.prev.seq
		b.prev = nil // not kept alive by the chain
	}
	id := batchID(b.body)
	msg := &nats.Msg{
		Subject: l.batchSubject(b.part),
		Data:    b.body,
		Header:  nats.Header{jetstream.MsgIDHeader: []string{id}},
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			l.counts.retries.Add(1)
			select {
			case <-time.After(backoff.Delay(attempt, 50*time.Millisecond, backoff.Reconnect)):
			case <-l.ctx.Done():
				return
			}
		}
		if l.leaseLasts() != nil {
			return
		}
		ack, err := l.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(after))
		if err != nil {
			continue
		}
		select {
		case pa := <-ack.Ok():
			// A duplicate's ack gives the sequence of the batch it
			// repeats: this one, sent before and its ack lost, or an
			// older batch of the same content (nothing stored now).
			b.seq = max(after, pa.Sequence)
			close(b.stored)
			return
		case err := <-ack.Err():
			if !isWrongLastSeq(err) {
				continue
			}
			switch seq, ours, err := l.lastBatch(b.part, id); {
			case err != nil:
				continue
			case !ours:
				l.stop(errRelayFenced)
				return
			default: // sent before, its ack lost
				b.seq = seq
				close(b.stored)
				return
			}
		case <-l.ctx.Done():
			return
		}
	}
}

// acks acks the positions to the broker, in receive order, once their
// batch is stored. What is not acked when the relay stops, the broker
// hands to the next relay.
func (l *relay) acks() {
	for p := range l.pending {
		select {
		case <-p.b.stored:
		case <-l.ctx.Done():
			return
		}
		if h := l.r.hold; h != nil {
			h(RelayAcks)
			if l.ctx.Err() != nil {
				return
			}
		}
		l.counts.stored.Add(1)
		p.m.Ack()
		if !p.m.Duplicate {
			l.settled.Store(true)
		}
	}
}

// RelayAcks is the partition Deps.Hold is called with by the relay
// before it acks a stored position.
const RelayAcks = -1

// close disconnects once acks has stopped, so the acks given get their
// last flush; the positions not yet stored stay unacked and come back.
func (l *relay) close(ctx context.Context) {
	if l.cancel != nil {
		l.cancel()
	}
	l.batching.Wait()
	l.storing.Wait()
	if src := l.src.Load(); src != nil {
		_ = src.Close(ctx)
	}
}

// ready says why the relay cannot take positions, or "" when it can.
func (l *relay) ready() string {
	src := l.src.Load()
	if src == nil {
		return "mqtt: not started"
	}
	select {
	case <-l.recentRead:
	default:
		return "mqtt: fencing the former relay off and reading what it stored"
	}
	switch _, up, sub := src.Hearing(); {
	case !up:
		return "mqtt: not connected"
	case !sub:
		return "mqtt: not subscribed"
	}
	return ""
}

// PartitionOf is the partition of a courier among n: what nats-server's
// subject mapping partition(n, …) gives for the courier's subject token
// (FNV-1a, 32 bits, modulo n), so the relay and the MQTT gateway's mapping
// agree.
func PartitionOf(courierToken string, n int) int { return partitionOf(courierToken, n) }

// partitionOf is PartitionOf for a token as a string or bytes, without
// allocating.
func partitionOf[T string | []byte](token T, n int) int {
	h := uint32(2166136261) // FNV-1a, 32 bits: offset basis and prime
	for i := 0; i < len(token); i++ {
		h ^= uint32(token[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}
