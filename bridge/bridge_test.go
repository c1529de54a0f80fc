package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/internal/testenv"
)

// These are integration tests against a real, embedded nats-server.

func mustOpen(tb testing.TB, nc *nats.Conn, cfg bridge.Config) *bridge.Bridge {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := bridge.Open(ctx, nc, cfg, nil)
	if err != nil {
		tb.Fatalf("open bridge: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Close(ctx) // tests that care call Close themselves
	})
	return b
}

func mustFlush(tb testing.TB, b *bridge.Bridge, d time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := b.Flush(ctx); err != nil {
		tb.Fatalf("flush: %v (stats %+v)", err, b.Stats())
	}
}

func mustPublish(tb testing.TB, b *bridge.Bridge, subject, id string, payload []byte) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Publish(ctx, subject, id, payload); err != nil {
		tb.Fatalf("publish %s: %v", id, err)
	}
}

// msgIDs returns the Nats-Msg-Id of each message, counted.
func msgIDs(msgs []*nats.Msg) map[string]int {
	ids := map[string]int{}
	for _, m := range msgs {
		ids[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	return ids
}

func TestPublish_SubjectsAndMsgID(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", Stream: "RESULTS"}
	b := mustOpen(t, nc, cfg)

	type result struct{ kind, key string }
	results := []result{
		{bridge.KindDistance, "distance|girona|van-3|1726308240000"},
		{bridge.KindNoSignal, "no_signal|girona|van-3|1726308000000"},
		{bridge.KindSignalRestored, "signal_restored|girona|van-3|1726308100000"},
		{bridge.KindLate, "late|girona|van-3|1726308000500|distance"},
		{bridge.KindRejected, "rejected|girona|1"},
	}
	buf := make([]byte, 0, 64)
	for _, r := range results {
		buf = append(buf[:0], `{"key":"`+r.key+`"}`...)
		mustPublish(t, b, cfg.Subject(r.kind), r.key, buf)
		// Publish must have copied the payload.
		for i := range buf {
			buf[i] = 'X'
		}
	}
	mustFlush(t, b, 10*time.Second)

	msgs := testenv.ReadStream(t, srv.URL(), "RESULTS")
	if len(msgs) != len(results) {
		t.Fatalf("got %d messages in stream, want %d", len(msgs), len(results))
	}
	for i, r := range results {
		m := msgs[i]
		if want := cfg.Subject(r.kind); m.Subject != want {
			t.Errorf("message %d: got subject %q, want %q", i, m.Subject, want)
		}
		if got := m.Header.Get(jetstream.MsgIDHeader); got != r.key {
			t.Errorf("message %d: got Nats-Msg-Id %q, want %q", i, got, r.key)
		}
		if want := `{"key":"` + r.key + `"}`; string(m.Data) != want {
			t.Errorf("message %d: got payload %q, want %q", i, m.Data, want)
		}
	}
	st := b.Stats()
	if st.Published != 5 || st.Acked != 5 || st.Duplicates != 0 || st.Pending != 0 || !st.Connected {
		t.Errorf("got stats %+v, want 5 published, 5 acked, 0 duplicates, 0 pending, connected", st)
	}
}

func TestPublish_DuplicateMsgIDStoredOnce(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona"}
	b := mustOpen(t, nc, cfg)
	subj := cfg.Subject(bridge.KindDistance)

	mustPublish(t, b, subj, "distance|girona|van-3|60000", []byte(`{"first":true}`))
	mustFlush(t, b, 10*time.Second)
	mustPublish(t, b, subj, "distance|girona|van-3|60000", []byte(`{"first":false}`))
	mustPublish(t, b, subj, "distance|girona|van-4|60000", []byte(`{}`))
	mustFlush(t, b, 10*time.Second)

	msgs := testenv.ReadStream(t, srv.URL(), b.Config().Stream)
	if len(msgs) != 2 {
		t.Fatalf("got %d messages, want 2 (the re-emitted key dropped)", len(msgs))
	}
	if string(msgs[0].Data) != `{"first":true}` {
		t.Errorf("got stored payload %s, want the first one", msgs[0].Data)
	}
	st := b.Stats()
	if st.Published != 3 || st.Acked != 3 || st.Duplicates != 1 {
		t.Errorf("got published %d, acked %d, duplicates %d; want 3, 3, 1", st.Published, st.Acked, st.Duplicates)
	}
}

func TestPublish_InvalidInput(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona"}
	b := mustOpen(t, nc, cfg)
	ctx := context.Background()

	tests := []struct {
		name    string
		subject string
		id      string
		payload []byte
		want    error
	}{
		{"subject of another market", "delivery.dashboard.bcn.distance", "k", nil, bridge.ErrSubject},
		{"subject outside the stream", "delivery.other.girona", "k", nil, bridge.ErrSubject},
		{"empty id", cfg.Subject(bridge.KindDistance), "", nil, bridge.ErrMsgID},
		{"payload over max", cfg.Subject(bridge.KindDistance), "k", make([]byte, nc.MaxPayload()+1), nats.ErrMaxPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := b.Publish(ctx, tt.subject, tt.id, tt.payload)
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	if st := b.Stats(); st.Published != 0 || st.Pending != 0 {
		t.Errorf("got published %d, pending %d after refused publishes; want 0, 0", st.Published, st.Pending)
	}
}

// publishRange publishes results [from, to) with keys "k|i".
func publishRange(tb testing.TB, b *bridge.Bridge, subj string, from, to int) {
	tb.Helper()
	for i := from; i < to; i++ {
		id := fmt.Sprintf("k|%d", i)
		mustPublish(tb, b, subj, id, []byte(`{"key":"`+id+`"}`))
	}
}

func TestPublish_DeliveredOnceAfterOutage(t *testing.T) {
	const n = 300
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	// A short ack timeout makes attempts fail and retry during the outage.
	cfg := bridge.Config{Market: "girona", AckTimeout: 300 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	b := mustOpen(t, nc, cfg)
	subj := cfg.Subject(bridge.KindDistance)

	publishRange(t, b, subj, 0, n/3)
	srv.Shutdown() // some of the first third may still be unacked
	publishRange(t, b, subj, n/3, n)
	time.Sleep(time.Second) // outage long enough for timeouts and retries
	if b.Connected() {
		t.Errorf("got Connected() true while the server is down")
	}
	if st := b.Stats(); st.Pending == 0 {
		t.Errorf("got 0 pending during the outage, want the unacked results")
	}
	srv.Restart()
	mustFlush(t, b, 30*time.Second)

	msgs := testenv.ReadStream(t, srv.URL(), b.Config().Stream)
	ids := msgIDs(msgs)
	for i := range n {
		id := fmt.Sprintf("k|%d", i)
		if c := ids[id]; c != 1 {
			t.Errorf("key %s stored %d times, want 1", id, c)
		}
	}
	if len(msgs) != n {
		t.Errorf("got %d messages, want %d", len(msgs), n)
	}
	st := b.Stats()
	if st.Published != n || st.Acked != n || st.Pending != 0 {
		t.Errorf("got published %d, acked %d, pending %d; want %d, %d, 0", st.Published, st.Acked, st.Pending, n, n)
	}
	if st.Errors == 0 || st.Retries == 0 {
		t.Errorf("got errors %d, retries %d; want both > 0 after an outage with 300ms ack timeout", st.Errors, st.Retries)
	}
}

func TestPublish_BlocksWhenMaxPendingReached(t *testing.T) {
	const maxPending = 4
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", MaxPending: maxPending, AckTimeout: 300 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	b := mustOpen(t, nc, cfg)
	subj := cfg.Subject(bridge.KindDistance)

	srv.Shutdown()
	publishRange(t, b, subj, 0, maxPending)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.Publish(ctx, subj, "k|blocked", []byte(`{}`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish over MaxPending: got %v, want context.DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("publish over MaxPending returned after %v, want it to block until the deadline", waited)
	}
	if st := b.Stats(); st.Pending != maxPending || st.Published != maxPending {
		t.Errorf("got pending %d, published %d; want %d, %d", st.Pending, st.Published, maxPending, maxPending)
	}

	srv.Restart()
	mustFlush(t, b, 30*time.Second)
	// Capacity is back: the next publish goes through at once.
	mustPublish(t, b, subj, "k|after", []byte(`{}`))
	mustFlush(t, b, 10*time.Second)

	ids := msgIDs(testenv.ReadStream(t, srv.URL(), b.Config().Stream))
	var got []string
	for id := range ids {
		got = append(got, id)
	}
	sort.Strings(got)
	want := []string{"k|0", "k|1", "k|2", "k|3", "k|after"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got stored keys %v, want %v (the timed-out publish not stored)", got, want)
	}
}

func TestFlush_ReturnsAtDeadlineWhileDown(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", AckTimeout: 300 * time.Millisecond}
	b := mustOpen(t, nc, cfg)

	srv.Shutdown()
	publishRange(t, b, cfg.Subject(bridge.KindLate), 0, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := b.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("flush while down: got %v, want context.DeadlineExceeded", err)
	}
	// The results were kept: once the server is back, Flush completes.
	srv.Restart()
	mustFlush(t, b, 30*time.Second)
	if got := len(testenv.ReadStream(t, srv.URL(), b.Config().Stream)); got != 3 {
		t.Errorf("got %d messages after restart, want 3", got)
	}
}

func TestClose(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona"}
	b := mustOpen(t, nc, cfg)
	subj := cfg.Subject(bridge.KindDistance)

	publishRange(t, b, subj, 0, 50)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	// Close waited for the acks.
	if got := len(testenv.ReadStream(t, srv.URL(), b.Config().Stream)); got != 50 {
		t.Errorf("got %d messages after Close, want 50", got)
	}
	if err := b.Publish(ctx, subj, "k|late", nil); !errors.Is(err, bridge.ErrClosed) {
		t.Errorf("publish after close: got %v, want ErrClosed", err)
	}
	if nc.IsClosed() {
		t.Errorf("Close closed the caller's NATS connection")
	}
	if err := b.Close(ctx); err != nil {
		t.Errorf("second close: got %v, want nil", err)
	}
	// The KV calls after Close are ignored, without blocking or panicking.
	b.UpdatePosition([]byte("van-1"), 1, 1, 1)
	b.MarkNoSignal("van-1", 1, 1, 1)
	b.MarkOnline("van-1")
	b.UpdateCourier(bridge.CourierState{Courier: "van-1", Status: bridge.StatusOnline})
	if st := b.Stats(); st.KVWrites != 0 || st.KVCouriers != 0 {
		t.Errorf("after Close: %+v, want no KV state", st)
	}
}

func TestClose_ReportsUnackedWhenDown(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", AckTimeout: 300 * time.Millisecond}
	b := mustOpen(t, nc, cfg)

	srv.Shutdown()
	publishRange(t, b, cfg.Subject(bridge.KindDistance), 0, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := b.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("close while down: got %v, want it to wrap context.DeadlineExceeded", err)
	}
}

func TestOpen_UpdatesExistingStream(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	// A long ack timeout: on a loaded machine a timed-out publish is
	// retried, and the duplicate count below would then depend on timing.
	cfg := bridge.Config{Market: "girona", DuplicateWindow: time.Minute, AckTimeout: time.Minute}
	b := mustOpen(t, nc, cfg)
	mustPublish(t, b, cfg.Subject(bridge.KindDistance), "k|0", []byte(`{}`))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}

	for _, window := range []time.Duration{time.Minute, 3 * time.Minute} {
		cfg.DuplicateWindow = window
		b2 := mustOpen(t, nc, cfg) // second Open with the same config, then a changed one

		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(ctx, "EDGEPROC_GIRONA")
		if err != nil {
			t.Fatalf("stream after reopen: %v", err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Duplicates != window {
			t.Errorf("got duplicate window %v, want %v", info.Config.Duplicates, window)
		}
		if info.State.Msgs != 1 {
			t.Errorf("got %d messages after reopen, want the 1 kept", info.State.Msgs)
		}
		wantSubj := []string{"delivery.dashboard.girona.>", "delivery.late.girona", "delivery.rejected.girona", "delivery.zones.girona"}
		if fmt.Sprint(info.Config.Subjects) != fmt.Sprint(wantSubj) {
			t.Errorf("got subjects %v, want %v", info.Config.Subjects, wantSubj)
		}
		if info.Config.Storage != jetstream.FileStorage {
			t.Errorf("got storage %v, want file", info.Config.Storage)
		}
		// The reopened bridge still dedups the key stored before.
		mustPublish(t, b2, cfg.Subject(bridge.KindDistance), "k|0", []byte(`{}`))
		mustFlush(t, b2, 10*time.Second)
		if d := b2.Stats().Duplicates; d != 1 {
			t.Errorf("got %d duplicates after reopen, want 1", d)
		}
		if err := b2.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
}

func TestOpen_InvalidConfig(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	ctx := context.Background()
	if _, err := bridge.Open(ctx, nc, bridge.Config{Market: "Bad Market"}, nil); !errors.Is(err, bridge.ErrConfig) {
		t.Errorf("open with bad market: got %v, want ErrConfig", err)
	}
	if _, err := bridge.Open(ctx, nil, bridge.Config{Market: "girona"}, nil); err == nil {
		t.Errorf("open with nil connection: got nil error")
	}
}

// kvState reads a courier's state and the bucket's number of writes so far.
func kvState(tb testing.TB, nc *nats.Conn, bucket, courier string) (bridge.CourierState, uint64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		tb.Fatalf("kv bucket %s: %v", bucket, err)
	}
	e, err := kv.Get(ctx, bridge.CourierKey(courier))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		tb.Fatalf("kv get %s: %v", courier, err)
	}
	// Read after the value, so the count includes the write that stored it.
	// Every Put is one message of the bucket's stream.
	st, serr := kv.Status(ctx)
	if serr != nil {
		tb.Fatal(serr)
	}
	writes := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	if err != nil {
		return bridge.CourierState{}, writes
	}
	var cs bridge.CourierState
	if err := json.Unmarshal(e.Value(), &cs); err != nil {
		tb.Fatalf("kv value %s: %v", e.Value(), err)
	}
	return cs, writes
}

// waitKV polls until cond holds for the courier's state or d passes.
func waitKV(tb testing.TB, nc *nats.Conn, bucket, courier string, d time.Duration, cond func(bridge.CourierState) bool) (bridge.CourierState, uint64, bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		cs, writes := kvState(tb, nc, bucket, courier)
		if cond(cs) {
			return cs, writes, true
		}
		if time.Now().After(deadline) {
			return cs, writes, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestUpdateCourier_CoalescesWrites(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", KVInterval: time.Second}
	b := mustOpen(t, nc, cfg)
	bucket := b.Config().KVBucket

	start := time.Now()
	for i := range 100 {
		b.UpdateCourier(bridge.CourierState{Courier: "fleet:van-3", Lat: 41.97, Lon: 2.82, TS: int64(1000 + i), Cell: "89394", Status: bridge.StatusOnline})
		if i%10 == 0 {
			time.Sleep(time.Millisecond) // let the writer run between updates
		}
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Fatalf("updates took %v, more than the second the bound below assumes", d)
	}
	cs, writes, ok := waitKV(t, nc, bucket, "fleet:van-3", 3*time.Second, func(cs bridge.CourierState) bool { return cs.TS == 1099 })
	if !ok {
		t.Fatalf("latest state never written: got %+v, want TS 1099", cs)
	}
	if writes > 2 {
		t.Errorf("got %d KV writes for 100 updates within a second, want at most 2", writes)
	}
	want := bridge.CourierState{Courier: "fleet:van-3", Lat: 41.97, Lon: 2.82, TS: 1099, Cell: "89394", Status: bridge.StatusOnline}
	if cs != want {
		t.Errorf("got state %+v, want %+v", cs, want)
	}
	if st := b.Stats(); st.KVWrites > 2 || st.KVErrors != 0 {
		t.Errorf("got KVWrites %d, KVErrors %d; want at most 2, 0", st.KVWrites, st.KVErrors)
	}
}

func TestUpdateCourier_StatusChangeWrittenAtOnce(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	// A long interval: only the immediate path can write within the test.
	cfg := bridge.Config{Market: "girona", KVInterval: time.Minute}
	b := mustOpen(t, nc, cfg)
	bucket := b.Config().KVBucket
	state := func(ts int64, status string) bridge.CourierState {
		return bridge.CourierState{Courier: "van-3", Lat: 41.9, Lon: 2.8, TS: ts, Cell: "c", Status: status}
	}

	steps := []struct {
		update    bridge.CourierState
		immediate bool
	}{
		{state(1, bridge.StatusOnline), true},    // first sight
		{state(2, bridge.StatusOnline), false},   // same status: coalesced
		{state(3, bridge.StatusNoSignal), true},  // status change
		{state(4, bridge.StatusNoSignal), false}, // same status
		{state(5, bridge.StatusOnline), true},    // back online
	}
	for i, s := range steps {
		b.UpdateCourier(s.update)
		wait := 2 * time.Second
		if !s.immediate {
			wait = 300 * time.Millisecond
		}
		got, _, ok := waitKV(t, nc, bucket, "van-3", wait, func(cs bridge.CourierState) bool { return cs.TS == s.update.TS })
		if ok != s.immediate {
			t.Errorf("step %d (%s): written at once %v, want %v (stored %+v)", i, s.update.Status, ok, s.immediate, got)
		}
	}
}

// At MaxCouriers the least recently updated courier makes room: every
// courier is still written (the bucket never stops updating), and the
// evicted courier's unwritten state is written before it leaves.
func TestUpdateCourier_EvictsLeastRecentWhenFull(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", MaxCouriers: 2, KVInterval: time.Minute}
	b := mustOpen(t, nc, cfg)

	for _, c := range []string{"a", "b", "c", "a", "d", ""} {
		b.UpdateCourier(bridge.CourierState{Courier: c, TS: 5, Status: bridge.StatusOnline})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil { // Close writes what is still waiting
		t.Fatalf("close: %v", err)
	}
	st := b.Stats()
	// c evicts a, a evicts b, d evicts c: the table holds a and d.
	if st.KVRefused != 1 || st.KVEvicted != 3 || st.KVCouriers != 2 {
		t.Errorf("got KVRefused %d, KVEvicted %d, KVCouriers %d; want 1 (the empty id), 3, 2", st.KVRefused, st.KVEvicted, st.KVCouriers)
	}
	for _, c := range []string{"a", "b", "c", "d"} {
		if cs, _ := kvState(t, nc, b.Config().KVBucket, c); cs.Courier != c || cs.TS != 5 {
			t.Errorf("courier %s: got stored %+v, want it written", c, cs)
		}
	}
}

func TestUpdateCourier_WrittenAfterOutage(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", KVInterval: 100 * time.Millisecond, AckTimeout: 200 * time.Millisecond}
	b := mustOpen(t, nc, cfg)

	srv.Shutdown()
	b.UpdateCourier(bridge.CourierState{Courier: "van-3", TS: 7, Status: bridge.StatusNoSignal})
	time.Sleep(500 * time.Millisecond)
	srv.Restart()
	cs, _, ok := waitKV(t, nc, b.Config().KVBucket, "van-3", 10*time.Second, func(cs bridge.CourierState) bool { return cs.TS == 7 })
	if !ok {
		t.Fatalf("state not written after reconnection: got %+v", cs)
	}
	if cs.Status != bridge.StatusNoSignal {
		t.Errorf("got status %q, want %q", cs.Status, bridge.StatusNoSignal)
	}
	// While disconnected the writer attempts nothing (the states wait in
	// its table, not in the connection's reconnect buffer). A write counts
	// once its ack is back, which may come after the value is readable.
	testenv.WaitFor(t, 10*time.Second, "the write's ack", func() bool { return b.Stats().KVWrites >= 1 })
	if st := b.Stats(); st.KVWrites != 1 {
		t.Errorf("got %d KV writes, want the 1 state written once, after the outage", st.KVWrites)
	}
}

func BenchmarkPublish(b *testing.B) {
	srv := testenv.StartNATS(b)
	nc := srv.Connect(b)
	cfg := bridge.Config{Market: "girona"}
	br := mustOpen(b, nc, cfg)
	subj := cfg.Subject(bridge.KindDistance)
	payload := []byte(`{"type":"distance","market":"girona","courier":"van-3","key":"distance|girona|van-3|1726308240000","window_start_ms":1726308240000,"window_end_ms":1726308540000,"distance_m":812.4,"positions":61,"stopped":false,"cell":"89394460cafffff","emitted_at_ms":1726308585000}`)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := br.Publish(ctx, subj, fmt.Sprintf("distance|girona|van-3|%d", i), payload); err != nil {
			b.Fatal(err)
		}
	}
	mustFlush(b, br, time.Minute)
}

// BenchmarkPublishBurst is a window close as the bridge sees it (issue
// #8): a burst of one result per courier of 1 250 after an idle pause,
// each its own acked JetStream message, and nothing else running. It
// reports, as the median over bursts, when the first, the median and the
// last result of a burst was acked, from the burst's first Publish: the
// floor under the close → JetStream latency of the live service.
func BenchmarkPublishBurst(b *testing.B) {
	const burst = 1250
	srv := testenv.StartNATS(b)
	nc := srv.Connect(b)
	cfg := bridge.Config{Market: "girona"}
	var (
		mu    sync.Mutex
		start time.Time
		acked []time.Duration
	)
	cfg.OnAcked = func(time.Duration) {
		mu.Lock()
		acked = append(acked, time.Since(start))
		mu.Unlock()
	}
	br := mustOpen(b, nc, cfg)
	subj := cfg.Subject(bridge.KindDistance)
	payload := []byte(`{"type":"distance","market":"girona","courier":"van-3","key":"distance|girona|van-3|1726308240000","window_start_ms":1726308240000,"window_end_ms":1726308540000,"distance_m":812.4,"positions":61,"stopped":false,"cell":"89394460cafffff","emitted_at_ms":1726308585000}`)
	ctx := context.Background()
	var first, mid, last []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		time.Sleep(200 * time.Millisecond) // idle between closes, as between windows
		mu.Lock()
		acked, start = acked[:0], time.Now()
		mu.Unlock()
		b.StartTimer()
		for k := range burst {
			if err := br.Publish(ctx, subj, fmt.Sprintf("distance|girona|c%d|%d", k, i), payload); err != nil {
				b.Fatal(err)
			}
		}
		mustFlush(b, br, time.Minute)
		mu.Lock()
		if len(acked) != burst {
			b.Fatalf("burst %d: %d acks, want %d", i, len(acked), burst)
		}
		first, mid, last = append(first, acked[0]), append(mid, acked[burst/2]), append(last, acked[burst-1])
		mu.Unlock()
	}
	median := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2]) / 1e6
	}
	b.ReportMetric(median(first), "first-ms")
	b.ReportMetric(median(mid), "p50-ms")
	b.ReportMetric(median(last), "last-ms")
}

// streamInfo returns the market stream's info.
func streamInfo(tb testing.TB, nc *nats.Conn, name string) *jetstream.StreamInfo {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		tb.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		tb.Fatalf("stream %s: info: %v", name, err)
	}
	return info
}

func TestOpen_BoundsRetentionOfExistingStream(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The stream as an edgeproc without retention made it: kept forever.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "EDGEPROC_GIRONA", Subjects: []string{"delivery.dashboard.girona.>", "delivery.late.girona", "delivery.rejected.girona"},
		Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		age      time.Duration
		bytes    int64
		wantAge  time.Duration
		wantSize int64
	}{
		{"defaults bound it", 0, 0, bridge.DefaultMaxAge, bridge.DefaultMaxBytes},
		{"configured bounds", 2 * time.Hour, 64 << 20, 2 * time.Hour, 64 << 20},
		{"unlimited", bridge.Unlimited, bridge.Unlimited, 0, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustOpen(t, nc, bridge.Config{Market: "girona", MaxAge: tt.age, MaxBytes: tt.bytes})
			info := streamInfo(t, nc, "EDGEPROC_GIRONA")
			if info.Config.MaxAge != tt.wantAge || info.Config.MaxBytes != tt.wantSize {
				t.Errorf("got max_age %v max_bytes %d, want %v and %d", info.Config.MaxAge, info.Config.MaxBytes, tt.wantAge, tt.wantSize)
			}
			if info.Config.Discard != jetstream.DiscardOld {
				t.Errorf("got discard %v, want old: a full stream must not refuse new results", info.Config.Discard)
			}
			if err := b.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestPublish_FullStreamDropsOldestResults(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	const limit = 8 << 10
	cfg := bridge.Config{Market: "girona", MaxBytes: limit, AckTimeout: time.Minute}
	b := mustOpen(t, nc, cfg)
	payload := make([]byte, 200)
	const n = 200 // ~50 KB offered to an 8 KiB stream
	for i := range n {
		mustPublish(t, b, cfg.Subject(bridge.KindDistance), fmt.Sprintf("k|%d", i), payload)
	}
	mustFlush(t, b, 10*time.Second)
	if st := b.Stats(); st.Acked != n || st.Errors != 0 {
		t.Fatalf("got %+v, want all %d acked without error", st, n)
	}
	info := streamInfo(t, nc, "EDGEPROC_GIRONA")
	if info.State.Bytes > limit {
		t.Errorf("stream holds %d bytes, over its %d bound", info.State.Bytes, limit)
	}
	if info.State.LastSeq != n || info.State.Msgs == 0 || info.State.FirstSeq == 1 {
		t.Errorf("got sequences %d..%d (%d msgs), want the newest kept up to %d and the oldest gone",
			info.State.FirstSeq, info.State.LastSeq, info.State.Msgs, n)
	}
}

func TestPublish_OnAckedOncePerResultWithItsLatency(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	var mu sync.Mutex
	var got []time.Duration
	cfg := bridge.Config{Market: "girona", AckTimeout: time.Minute, OnAcked: func(d time.Duration) {
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
	}}
	b := mustOpen(t, nc, cfg)
	start := time.Now()
	for i := range 20 {
		mustPublish(t, b, cfg.Subject(bridge.KindDistance), fmt.Sprintf("k|%d", i%10), []byte(`{}`))
	}
	mustFlush(t, b, 10*time.Second)
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 20 { // duplicates are acked too, and count
		t.Fatalf("OnAcked called %d times, want 20", len(got))
	}
	for _, d := range got {
		if d <= 0 || d > elapsed {
			t.Errorf("latency %v outside (0, %v]", d, elapsed)
		}
	}
}
