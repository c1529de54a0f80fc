package partition

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/mqtt"
)

// A relay that takes over the market's session gets again, flagged as
// duplicates and before anything new, what the former relay received and
// did not ack: some of it the former relay had stored. Batched afresh,
// those would be stored twice (a batch's message id is its content, and
// the new batches differ), so the new relay first reads the positions
// the stream stored lately (recentWindow back) and acks a redelivered
// message found among them without storing it again. Positions the broker
// redelivers are those of the former relay's in-flight window, stored
// within its lease and the store timeout: recentWindow back from the end
// of the former lease covers that. From the end of the lease, not from
// now: after a NATS outage the successor starts only once NATS is back,
// and the former relay's last stores, made as the outage began, their
// acks to the broker held behind a store that never got its answer, are
// as old as the outage (TestRelay_TakeoverAfterLongOutageStoresNothingTwice).
// And from further back when the former relay had not acked past what it
// was given again itself (its lease record's SinceMs): those positions
// come back once more, as old as they were (a relay that lost its lease
// while reading, after an outage of all the nodes).

// recentSet is the positions stored lately, by entryID, until the first
// message that is no redelivery: the redeliveries come first.
type recentSet struct {
	ids map[uint64]struct{}
}

// recentMax bounds the set: 2^20 positions of the window (8 MiB or so).
const recentMax = 1 << 20

// recentWindow is how far back the stream is read: the pin TTL (the
// former relay's lease), the store timeout and a margin.
func recentWindow(pinTTL time.Duration) time.Duration {
	return pinTTL + relayAckWait + 5*time.Second
}

// readBackFrom is where a relay taking the lease from the record former
// at now reads the stream back from: recentWindow before the former
// lease ended (or now, when none did, it was given up, or it ends
// later), or the former holder's own SinceMs when earlier: a relay that
// never acked past what the broker gave it again passes its read on.
func readBackFrom(former leaseRecord, now time.Time, pinTTL time.Duration) time.Time {
	from := now
	if former.UntilMs > 0 && former.UntilMs < now.UnixMilli() {
		from = time.UnixMilli(former.UntilMs)
	}
	from = from.Add(-recentWindow(pinTTL))
	if former.SinceMs > 0 && former.SinceMs < from.UnixMilli() {
		from = time.UnixMilli(former.SinceMs)
	}
	return from
}

// entryID identifies a position within the relay: its subject token and
// payload.
func entryID(token string, payload []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(token))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(payload)
	return h.Sum64()
}

// has reports whether m, a redelivery, was stored lately; the first
// message that is not one ends the set.
func (s *recentSet) has(token string, m *mqtt.Message) bool {
	if s == nil || s.ids == nil {
		return false
	}
	if !m.Duplicate {
		s.ids = nil
		return false
	}
	_, ok := s.ids[entryID(token, m.Payload)]
	return ok
}

// readRecent reads the batches every partition stored since l.since
// (readBackFrom). A failure leaves the set empty (logged): a redelivered
// position may then be stored twice, which the owners' duplicate rule
// (contract §2) ignores.
func (l *relay) readRecent(ctx context.Context) *recentSet {
	set := &recentSet{ids: map[uint64]struct{}{}}
	ctx, cancel := context.WithTimeout(ctx, l.r.cfg.JetStream.PinTTL+10*time.Second)
	defer cancel()
	from := l.since
	if from.IsZero() {
		from = time.Now().Add(-recentWindow(l.r.cfg.JetStream.PinTTL))
	}
	oc, err := l.js.OrderedConsumer(ctx, l.r.cfg.JetStream.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{l.prefix + "*" + l.suffix + BatchToken},
		DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
		OptStartTime:      &from,
		InactiveThreshold: catchUpInactive,
	})
	if err != nil {
		l.log.Warn("relay: the stream's recent positions not read; a redelivered one may be stored twice", "err", err)
		return set
	}
	for len(set.ids) < recentMax {
		batch, err := oc.Fetch(fetchBatch, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			l.log.Warn("relay: the stream's recent positions not all read; a redelivered one may be stored twice", "err", err)
			break
		}
		got, pending := 0, uint64(0)
		for m := range batch.Messages() {
			got++
			if md, err := m.Metadata(); err == nil {
				pending = md.NumPending
			}
			_ = eachBatchEntry(m.Data(), func(_ int, token, payload []byte) {
				set.ids[entryID(string(token), payload)] = struct{}{}
			})
		}
		if got == 0 || pending == 0 {
			break
		}
	}
	l.log.Info("relay: positions stored lately, not to be stored again", "positions", len(set.ids), "since", from.Round(time.Millisecond))
	return set
}
