package partition

import (
	"context"
	"encoding/hex"
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
// broker: every instance subscribes under a persistent session of its
// own, stores each position in its partition's subject and acks it to
// the broker only once the stream has acked it (contract §8:
// acknowledged only once durable). Every instance stores every position,
// under the same message id (a hash of topic and payload), and the
// stream's duplicate window keeps one copy: so a position reaches the
// stream while any instance is up, and one an instance had not acked when
// it stopped is stored when it is back, if no other did. A shared
// subscription ($share/…) would hand each position to one instance only,
// but Mosquitto 2.0 drops what is published to a shared subscription
// after a broker restart and before an instance resubscribes
// (TestRelay_BrokerOutageIsNotSilence lost 280 of 560 positions with one),
// while it keeps a plain persistent subscription's queue. A position
// whose store fails (the stream without a leader while a node is lost) is
// sent again until it is stored, and stays unacked meanwhile.
// The subject is the courier's topic level as the gateway writes it (the
// last level, or with mqtt.format owntracks the USER or DEVICE level;
// subject.go) in the partition nats-server's mapping partition(N, …)
// gives for it, so the relay and the MQTT gateway put a courier in the
// same partition.

// relay is one instance's share of the market's MQTT subscription.
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

	// pending carries, in receive order, the positions published and not
	// yet acked by the stream, to the one goroutine (acks) that acks them
	// to the broker. Its bound, with the broker's Receive Maximum, is the
	// backpressure: a full queue blocks the MQTT handler.
	pending chan relayed
	acking  sync.WaitGroup // the acks goroutine

	stored, retries atomic.Uint64
	ctx             context.Context
}

// relayed is a position on its way to the stream.
type relayed struct {
	msg *nats.Msg
	ack jetstream.PubAckFuture
	m   *mqtt.Message
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
		r: r, log: r.log.With("ingest", "mqtt"), prefix: prefix, suffix: suffix, numbers: numbers,
		filter: r.cfg.MQTT.Topic, level: level,
		pending: make(chan relayed, mqtt.DefaultReceiveMaximum),
	}
}

// relayConfig is the instance's MQTT session: the market's broker and
// topic under a persistent session of its own (client id
// CLIENT_ID-INSTANCE), so what the broker kept for it while it was away,
// or handed it and got no ack for, comes to it when it is back.
func relayConfig(cfg config.Config, inst string) mqtt.Config {
	mc := market.MQTTConfig(cfg.MQTT)
	mc.ClientID = cfg.MQTT.ClientID + "-" + inst
	return mc
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
	l.js, l.ctx = js, ctx
	l.acking.Go(l.acks)
	src, err := mqtt.Start(ctx, relayConfig(l.r.cfg, l.r.inst), l.log, l.handle)
	if err != nil {
		return err
	}
	l.src.Store(src)
	return nil
}

// handle publishes one message to its partition's subject; acks acks it
// once stored.
func (l *relay) handle(m *mqtt.Message) {
	msg := &nats.Msg{Subject: l.subjectOf(m.Topic), Data: m.Payload, Header: nats.Header{jetstream.MsgIDHeader: []string{positionID(m.Topic, m.Payload)}}}
	ack, err := l.js.PublishMsgAsync(msg)
	if err != nil {
		ack = nil // acks sends it again
	}
	select {
	case l.pending <- relayed{msg: msg, ack: ack, m: m}:
	case <-l.ctx.Done(): // not acked: the broker redelivers it to this session
	}
}

// subjectOf is the subject a message on topic is stored on: the
// courier's token (subject.go) in the courier's partition. It allocates
// only the subject.
func (l *relay) subjectOf(topic string) string {
	var buf [maxToken]byte
	token := appendToken(buf[:0], courierLevel(topic, l.filter, l.level))
	return l.prefix + l.numbers[partitionOf(token, len(l.numbers))] + l.suffix + string(token)
}

// acks acks the positions to the broker as the stream acks them, in
// receive order; one whose store failed is published again, with its id,
// until it is stored or the instance stops (it is then redelivered to
// this session when it comes back).
func (l *relay) acks() {
	for {
		var p relayed
		select {
		case p = <-l.pending:
		case <-l.ctx.Done():
			return
		}
		if !l.wait(p) {
			return
		}
		l.stored.Add(1)
		p.m.Ack()
	}
}

// wait waits until p is stored, publishing it again after a failure; it
// reports false when the instance stops first.
func (l *relay) wait(p relayed) bool {
	for attempt := 1; ; attempt++ {
		if p.ack != nil {
			select {
			case <-p.ack.Ok():
				return true
			case <-p.ack.Err():
			case <-l.ctx.Done():
				return false
			}
		}
		l.retries.Add(1)
		select {
		case <-time.After(backoff.Delay(attempt, 50*time.Millisecond, backoff.Reconnect)):
		case <-l.ctx.Done():
			return false
		}
		ack, err := l.js.PublishMsgAsync(p.msg)
		if err != nil {
			ack = nil
		}
		p.ack = ack
	}
}

// close disconnects once acks has stopped, so the acks given get their
// last flush; the positions not yet stored stay unacked and come back.
func (l *relay) close(ctx context.Context) {
	if src := l.src.Load(); src != nil {
		l.acking.Wait()
		_ = src.Close(ctx)
	}
}

// ready says why the relay cannot take positions, or "" when it can.
func (l *relay) ready() string {
	src := l.src.Load()
	if src == nil {
		return "mqtt: not started"
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

// positionID identifies a position for the stream's duplicate window: the same
// message delivered twice by the broker has the same id.
func positionID(topic string, payload []byte) string {
	h := fnv.New128a()
	_, _ = h.Write([]byte(topic))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(payload)
	return hex.EncodeToString(h.Sum(nil))
}
