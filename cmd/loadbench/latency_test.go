package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/internal/testenv"
)

// TestReadBackStored: only the results stored since the step began count,
// each timed from its emitted_at_ms to the stream's stamp, and a burst's
// fastest result is its crossing's first.
func TestReadBackStored(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RESULTS", Subjects: []string{"delivery.dashboard." + market + ".>"}}); err != nil {
		t.Fatal(err)
	}
	publish := func(typ string, emittedAt int64) {
		t.Helper()
		if _, err := js.Publish(ctx, "delivery.dashboard."+market+"."+typ, fmt.Appendf(nil, `{"type":%q,"emitted_at_ms":%d}`, typ, emittedAt)); err != nil {
			t.Fatal(err)
		}
	}
	publish("distance", 1) // before the step: not counted
	time.Sleep(20 * time.Millisecond)
	from := time.Now()
	at := from.UnixMilli() - 1000 // a crossing 1 s before: every latency ≥ 1 s
	const n = 2500                // more than one fetch
	for range n {
		publish("distance", at)
	}
	publish("no_signal", at)
	stored := time.Now() // every stamp is before this
	time.Sleep(300 * time.Millisecond)

	l := newLatencies()
	if err := readBackStored(ctx, srv.URL(), from, l); err != nil {
		t.Fatal(err)
	}
	s := l.summary()
	if s.N != n+1 || l.bad != 0 {
		t.Fatalf("read back %d results (%d unreadable), want %d", s.N, l.bad, n+1)
	}
	if s.Crossings != 1 || s.BurstMax != n {
		t.Fatalf("crossings %d, largest burst %d; want 1 of %d distance results", s.Crossings, s.BurstMax, n)
	}
	// Timed by the stamps, not by when they were read 300 ms later.
	bound := stored.UnixMilli() - at
	if s.FirstP50 < 1000 || s.Max > bound || s.P50 < s.FirstP50 {
		t.Fatalf("first %d ms, p50 %d ms, max %d ms: want 1000 ≤ first ≤ p50 ≤ max ≤ %d", s.FirstP50, s.P50, s.Max, bound)
	}
}
