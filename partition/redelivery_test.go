package partition

import (
	"fmt"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/mqtt"
)

// The broker restarted (or the connection to it cut) redelivers, on the
// relay's next connection, what the relay received and had not acked:
// flagged as duplicates and first. Those are stored already, or on their
// way in the relay's batches; stored again they would be in the stream
// twice. A redelivery of something the relay never received (its former
// relay's), and an exact copy the phone itself sent, not flagged, are
// stored.
func TestRelay_RedeliveryAfterAReconnectIsNotStoredTwice(t *testing.T) {
	r, ns, ctx := setUpRunner(t, 2)
	l := startedRelay(t, r, ctx)
	acked := make(chan *batch, 64)
	go func() {
		for p := range l.pending {
			acked <- p.b
		}
		close(acked)
	}()
	l.batching.Go(l.run)
	defer func() { l.cancel(); l.batching.Wait() }()
	msg := func(i int, dup bool) *mqtt.Message {
		c := i % 3
		return &mqtt.Message{
			Topic:     fmt.Sprintf("km0/girona/positions/c%d", c),
			Payload:   fmt.Appendf(nil, `{"courier_id":"c%d","ts":%d,"lat":41.98,"lon":2.82}`, c, 1_700_000_000_000+int64(i)*1000),
			Duplicate: dup,
		}
	}
	send := func(m *mqtt.Message) {
		part, token := l.route(m.Topic)
		l.in <- inbound{part: part, token: token, m: m}
	}
	for i := range 10 {
		send(msg(i, false))
	}
	// Redelivered at once, some before their batches are stored: 7, 8
	// and 9 again, and 42, which this relay never received.
	for _, i := range []int{7, 8, 9, 42} {
		send(msg(i, true))
	}
	send(msg(10, false))
	send(msg(9, false)) // the phone's own resend: stored (the owners ignore it)
	for i := range 16 {
		select {
		case b := <-acked:
			select {
			case <-b.stored:
			case <-time.After(time.Minute):
				t.Fatalf("position %d of 16 handed to be acked: its batch not stored within a minute", i+1)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%d of 16 positions handed to be acked", i)
		}
	}
	var stored []storedPosition
	testenv.WaitFor(t, time.Minute, "13 positions stored", func() bool {
		stored = storedPositions(t, ns.URL(), r.cfg.JetStream.Stream)
		return len(stored) >= 13
	})
	times := map[string]int{}
	for _, p := range stored {
		times[string(p.payload)]++
	}
	for i := range 11 {
		want := 1
		if i == 9 {
			want = 2
		}
		if got := times[string(msg(i, false).Payload)]; got != want {
			t.Errorf("position %d stored %d times, want %d", i, got, want)
		}
	}
	if got := times[string(msg(42, false).Payload)]; got != 1 {
		t.Errorf("a redelivery this relay never received stored %d times, want 1", got)
	}
	if len(stored) != 13 {
		t.Errorf("%d positions stored, want 13", len(stored))
	}
	if got := l.counts.redelivered.Load(); got != 3 {
		t.Errorf("%d redeliveries found among the relay's own, want 3", got)
	}
}

// The relay keeps every position it receives (lastReceived.add) and
// looks each one up (batchOf, which ends at once for a message that is
// no redelivery): the per-position part must not allocate.
func BenchmarkLastReceived_PerPosition(b *testing.B) {
	var r lastReceived
	bt := newBatch(0)
	m := &mqtt.Message{Topic: "km0/girona/positions/c1", Payload: []byte(`{"courier_id":"c1","ts":1700000000000,"lat":41.98,"lon":2.82}`)}
	b.ReportAllocs()
	for b.Loop() {
		if r.batchOf("c1", m) == nil {
			r.add("c1", m.Payload, bt)
		}
	}
}
