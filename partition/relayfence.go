package partition

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/internal/backoff"
)

// A relay's lease tells it when to stop, but a store it has sent is out
// of its hands: a batch held up in the network (its packets dropped, its
// TCP connection alive) can reach the stream after the relay stopped and
// after its successor read back what was stored, and the successor, given
// those positions again by the broker, stores them a second time. So a
// relay that takes over first fences the former one off, on the stream
// itself: every batch is stored with the batch subject's last sequence
// expected (Nats-Expected-Last-Subject-Sequence), the one of the relay's
// previous batch there, and the new relay begins by storing an empty
// batch on each partition's batch subject. After it, a store the former
// relay sent, however late it arrives, expects an older sequence and is
// refused; what it would have held the broker gives the new relay, and
// the read-back, which starts after the fence, finds what the former
// relay did store. A relay whose store is refused so has been fenced off
// and stops. The empty batch is an entry of nothing in the partition's
// log (eachEntry).

// errRelayFenced stops a relay whose store found another relay's fence.
var errRelayFenced = errors.New("another instance relays now: it fenced this one's stores off")

// batchSubject is partition part's batch subject, the relay's only one.
func (l *relay) batchSubject(part int) string {
	return l.prefix + l.numbers[part] + l.suffix + BatchToken
}

// fence stores an empty batch on every partition's batch subject,
// expecting the last sequence it reads there, and keeps the fences'
// sequences in l.after. It retries until it is done, the lease does not
// last or the relay stops.
func (l *relay) fence(ctx context.Context) error {
	for part := range l.numbers {
		for attempt := 0; ; attempt++ {
			if attempt > 0 {
				select {
				case <-time.After(backoff.Delay(attempt, 50*time.Millisecond, backoff.Reconnect)):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if err := l.leaseLasts(); err != nil {
				return err
			}
			last, _, err := l.lastBatch(part, "")
			if err != nil {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, relayAckWait)
			pa, err := l.js.PublishMsg(cctx, &nats.Msg{Subject: l.batchSubject(part), Data: []byte{batchVersion}},
				jetstream.WithExpectLastSequencePerSubject(last))
			cancel()
			if err == nil {
				l.after[part] = pa.Sequence
				break
			}
			if isWrongLastSeq(err) {
				// A store of the former relay landed between the read
				// and the fence: read again.
				l.log.Debug("relay: a store landed before the fence; fencing again", "partition", part)
			}
		}
	}
	return nil
}

// lastBatch is the sequence of the last message on partition part's
// batch subject (0 when there is none), and whether it is the batch
// with message id id.
func (l *relay) lastBatch(part int, id string) (seq uint64, ours bool, err error) {
	ctx, cancel := context.WithTimeout(l.ctx, relayAckWait)
	defer cancel()
	s, err := l.js.Stream(ctx, l.r.cfg.JetStream.Stream)
	if err != nil {
		return 0, false, err
	}
	m, err := s.GetLastMsgForSubject(ctx, l.batchSubject(part))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return m.Sequence, id != "" && m.Header.Get(jetstream.MsgIDHeader) == id, nil
}

// isWrongLastSeq reports whether err is the stream refusing a store whose
// expected last sequence is not the subject's (10164 on replicated
// streams, 10071 otherwise).
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
