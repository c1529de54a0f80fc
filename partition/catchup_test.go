package partition

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/internal/testenv"
)

// TestHandle_GapIsReadOrNothingIsApplied: a delivery after a gap applies
// the gap from the stream first; when the stream cannot be read, handle
// applies nothing and says so, so that the loop leaves the delivery unacked
// (the gap must never be skipped), and the next delivery catches up again.
func TestHandle_GapIsReadOrNothingIsApplied(t *testing.T) {
	r, _, ctx := setUpRunner(t, 1)
	cfg := r.cfg
	p := r.parts[0]
	for _, m := range onePartitionFleet(1, time.Minute, 9)[:3] {
		if _, err := r.js.PublishMsg(ctx, fleetMsg(m, 0)); err != nil {
			t.Fatal(err)
		}
	}
	// The third message, delivered first: sequences 1 and 2 are the gap.
	c, err := r.js.CreateConsumer(ctx, cfg.JetStream.Stream, jetstream.ConsumerConfig{
		FilterSubject: p.subject, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	third := <-batch.Messages()
	if third == nil {
		t.Fatalf("no delivery: %v", batch.Error())
	}

	a, err := p.claim(ctx, "pin-a", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer a.eng.Stop()
	if !a.handle(ctx, third) || a.last != 3 || p.caughtUp.Load() != 2 {
		t.Fatalf("stream readable: last %d, caught up %d; want the gap read (2) and the message applied (3)", a.last, p.caughtUp.Load())
	}

	if err := r.js.DeleteStream(ctx, cfg.JetStream.Stream); err != nil {
		t.Fatal(err)
	}
	b, err := p.claim(ctx, "pin-b", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer b.eng.Stop()
	if b.handle(ctx, third) || b.last != 0 || b.consSeq != 0 {
		t.Fatalf("stream gone: last %d, consumer seq %d; want nothing applied, reported, and the next delivery to catch up", b.last, b.consSeq)
	}
}

// TestRelease_BoundedWhenNothingCanBeRecorded: an owner stopping while NATS
// is away cannot record its final checkpoint; it gives up after the drain
// timeout, says so, and is fenced, instead of keeping the process from
// stopping for as long as NATS stays away.
func TestRelease_BoundedWhenNothingCanBeRecorded(t *testing.T) {
	r, ns, ctx := setUpRunner(t, 1)
	var logs testenv.LogBuffer
	r.log = slog.New(slog.NewTextHandler(&logs, nil))
	p := r.parts[0]
	a, err := p.claim(ctx, "pin-a", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.term = a
	r.shares.owned.Add(1)
	// Something to record: the final checkpoint is not a no-op.
	for _, m := range onePartitionFleet(1, time.Minute, 9)[:3] {
		a.apply(fleetMsg(m, 0).Subject, nil, m.Payload, a.last+1, time.Now())
	}

	ns.Shutdown()
	defer ns.Restart() // so that the cleanups find a server
	if r.nc.IsClosed() {
		t.Fatal("the connection is closed, not reconnecting: release would not try to record")
	}
	start := time.Now()
	released := make(chan struct{})
	go func() { p.release(); close(released) }()
	bound := defaults.DrainTimeout + r.cfg.JetStream.PinTTL + 10*time.Second // the drain, the unpin, slack for a busy machine
	select {
	case <-released:
	case <-time.After(bound):
		t.Fatalf("release still running after %v with NATS away; goroutines in edgeproc code:\n%s", bound, testenv.Blocked())
	}
	t.Logf("release returned after %v (drain timeout %v)", time.Since(start).Round(time.Millisecond), defaults.DrainTimeout)
	if !strings.Contains(logs.String(), "final checkpoint not recorded in time") {
		t.Errorf("log %q: want the final checkpoint given up, named", logs.String())
	}
	if !a.fenced.Load() || p.term != nil || r.shares.owned.Load() != 0 {
		t.Errorf("after release: fenced %v, term %v, owned %d; want the term ended", a.fenced.Load(), p.term, r.shares.owned.Load())
	}
}

// TestCatchUp_LeavesNoConsumerBehind: every catch-up reads the stream
// through a consumer of its own; once it is done, the consumer is gone. A
// stream holds at most 1000 consumers by default, and an owner catching
// up often had filled it with finished ones, after which no catch-up (and
// no new instance's consumer) could be created.
func TestCatchUp_LeavesNoConsumerBehind(t *testing.T) {
	r, _, ctx := setUpRunner(t, 1)
	cfg := r.cfg
	p := r.parts[0]
	msgs := onePartitionFleet(2, 3*time.Minute, 9)[:40]
	for _, m := range msgs {
		if _, err := r.js.PublishMsg(ctx, fleetMsg(m, 0)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := r.js.Stream(ctx, cfg.JetStream.Stream)
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.claim(ctx, "pin-a", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer a.eng.Stop()
	if before.State.LastSeq < 20 {
		t.Fatalf("the stream holds %d messages; want enough for several catch-ups", before.State.LastSeq)
	}
	for upTo := uint64(3); upTo <= before.State.LastSeq; upTo += 3 {
		if !a.catchUp(ctx, upTo) || a.last != upTo-1 {
			t.Fatalf("catch-up to %d: last %d", upTo, a.last)
		}
	}
	// Each catch-up deletes its consumer as it ends, waiting at most a
	// pull wait; on a loaded machine a delete can time out, and then the
	// server drops the consumer once it has been inactive for
	// catchUpInactive. Either way, none is left behind after that.
	testenv.WaitFor(t, catchUpInactive+20*time.Second, "the catch-ups' consumers gone", func() bool {
		after, err := s.Info(ctx)
		if err != nil {
			return false
		}
		return after.State.Consumers == before.State.Consumers
	})
}
