package partition

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestHandle_GapIsReadOrNothingIsApplied: a delivery after a gap applies
// the gap from the stream first; when the stream cannot be read, handle
// applies nothing and says so, so that the loop leaves the delivery unacked
// (the gap must never be skipped), and the next delivery catches up again.
func TestHandle_GapIsReadOrNothingIsApplied(t *testing.T) {
	r, ctx := setUpRunner(t, 1)
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
