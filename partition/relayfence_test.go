package partition

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// startedRelay is heldRelay's relay with its stream connection and
// context, not subscribed to any broker.
func startedRelay(t *testing.T, r *Runner, ctx context.Context) *relay {
	t.Helper()
	l := heldRelay(t, r, time.Minute)
	js, err := jetstream.New(r.deps.Conn)
	if err != nil {
		t.Fatal(err)
	}
	l.js = js
	l.ctx, l.cancel = context.WithCancel(ctx)
	t.Cleanup(l.cancel)
	return l
}

func storeNow(l *relay, part int, token, payload string) *batch {
	b := newBatch(part)
	b.add(token, []byte(payload))
	l.store(b)
	return b
}

func isStored(b *batch) bool {
	select {
	case <-b.stored:
		return true
	default:
		return false
	}
}

// A store the former relay sent and that reaches the stream only after
// its successor fenced the partition (held up in the network) is
// refused, and the former relay stops: without the fence it would be
// stored beside the successor's copy of the same positions. A store
// sent again after its ack was lost is found stored, not taken for a
// fence.
func TestRelayFence_AStoreAfterTheSuccessorsFenceIsRefused(t *testing.T) {
	r, ns, ctx := setUpRunner(t, 2)
	former := startedRelay(t, r, ctx)
	if err := former.fence(ctx); err != nil {
		t.Fatal(err)
	}
	first := storeNow(former, 1, "c1", `{"courier_id":"c1","ts":1700000000000,"lat":41.98,"lon":2.82}`)
	if !isStored(first) || first.seq <= former.after[1] {
		t.Fatalf("first batch stored %v at %d after the fence at %d", isStored(first), first.seq, former.after[1])
	}

	// Its ack lost, the same batch sent again expecting the fence: found
	// stored, at its sequence.
	again := newBatch(1)
	again.body = append([]byte(nil), first.body...)
	again.n = first.n
	former.store(again)
	if !isStored(again) || again.seq != first.seq || former.stoppedWhy() != nil {
		t.Fatalf("batch sent again: stored %v at %d (first at %d), relay stopped %v", isStored(again), again.seq, first.seq, former.stoppedWhy())
	}

	successor := startedRelay(t, r, ctx)
	if err := successor.fence(ctx); err != nil {
		t.Fatal(err)
	}
	if successor.after[1] <= first.seq {
		t.Fatalf("successor's fence at %d, not after the former's batch at %d", successor.after[1], first.seq)
	}

	late := newBatch(1)
	late.add("c1", []byte(`{"courier_id":"c1","ts":1700000001000,"lat":41.98,"lon":2.82}`))
	late.prev = first
	former.store(late)
	if isStored(late) {
		t.Fatal("the former relay's store after the successor's fence was stored")
	}
	if why := former.stoppedWhy(); why != errRelayFenced || former.ctx.Err() == nil {
		t.Errorf("former relay: stopped %v, context %v: want it stopped, fenced off", why, former.ctx.Err())
	}
	got := storedPositions(t, ns.URL(), r.cfg.JetStream.Stream)
	if len(got) != 1 {
		t.Errorf("%d positions stored, want the first batch's one", len(got))
	}

	next := storeNow(successor, 1, "c1", `{"courier_id":"c1","ts":1700000001000,"lat":41.98,"lon":2.82}`)
	if !isStored(next) || successor.stoppedWhy() != nil {
		t.Errorf("successor's batch stored %v, successor stopped %v", isStored(next), successor.stoppedWhy())
	}
}

// The fence finds a partition's last batch whatever it is, and a
// partition with none yet.
func TestRelayFence_LastBatch(t *testing.T) {
	r, _, ctx := setUpRunner(t, 2)
	l := startedRelay(t, r, ctx)
	if seq, ours, err := l.lastBatch(0, "x"); err != nil || seq != 0 || ours {
		t.Fatalf("empty partition: %d %v %v, want 0 false nil", seq, ours, err)
	}
	if err := l.fence(ctx); err != nil {
		t.Fatal(err)
	}
	for part := range 2 {
		seq, _, err := l.lastBatch(part, "")
		if err != nil || seq != l.after[part] {
			t.Errorf("partition %d: last batch %d (%v), fence at %d", part, seq, err, l.after[part])
		}
	}
}
