package bridge_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/internal/testenv"
)

func openLogged(tb testing.TB, nc *nats.Conn, cfg bridge.Config) (*bridge.Bridge, *testenv.LogBuffer) {
	tb.Helper()
	var logs testenv.LogBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := bridge.Open(ctx, nc, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		tb.Fatalf("open bridge: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	return b, &logs
}

func mustJS(tb testing.TB, nc *nats.Conn) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

// A stream deleted under a running bridge is noticed by the publishes that
// find no stream, created again with a warning, and the pending results
// land in it.
func TestPublish_StreamDeletedIsRecreated(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", AckTimeout: time.Second, MaxBackoff: 100 * time.Millisecond}
	b, logs := openLogged(t, nc, cfg)
	subj := cfg.Subject(bridge.KindDistance)
	if !b.StreamReady() {
		t.Fatal("StreamReady false after Open")
	}
	publishRange(t, b, subj, 0, 10)
	mustFlush(t, b, 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mustJS(t, nc).DeleteStream(ctx, b.Config().Stream); err != nil {
		t.Fatal(err)
	}
	publishRange(t, b, subj, 10, 50)
	mustFlush(t, b, 20*time.Second)

	msgs := testenv.ReadStream(t, srv.URL(), b.Config().Stream)
	ids := msgIDs(msgs)
	for i := 10; i < 50; i++ {
		if c := ids[fmt.Sprintf("k|%d", i)]; c != 1 {
			t.Errorf("key k|%d stored %d times in the recreated stream, want 1", i, c)
		}
	}
	if len(msgs) != 40 {
		t.Errorf("recreated stream holds %d messages, want the 40 published after the loss", len(msgs))
	}
	st := b.Stats()
	if st.StreamRecreated != 1 || !st.StreamReady || st.Pending != 0 {
		t.Errorf("got StreamRecreated %d, StreamReady %v, Pending %d; want 1, true, 0", st.StreamRecreated, st.StreamReady, st.Pending)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "stream was missing") || !strings.Contains(l, "lost") {
		t.Errorf("log %q: want a warning that the stream was missing and what was lost", l)
	}
}

// StreamReady follows the connection and the acks.
func TestStreamReady_FollowsOutage(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", AckTimeout: 300 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	b := mustOpen(t, nc, cfg)
	srv.Shutdown()
	testenv.WaitFor(t, 5*time.Second, "StreamReady false while NATS is down", func() bool { return !b.StreamReady() })
	publishRange(t, b, cfg.Subject(bridge.KindDistance), 0, 1)
	srv.Restart()
	mustFlush(t, b, 20*time.Second)
	if !b.StreamReady() {
		t.Errorf("StreamReady false after the pending result was acked (stats %+v)", b.Stats())
	}
}

// A courier bucket deleted under a running bridge is recreated, and every
// courier's newest state is written into it again from the table.
func TestKV_BucketDeletedIsRecreated(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", KVInterval: time.Minute, AckTimeout: time.Second}
	b, logs := openLogged(t, nc, cfg)
	bucket := b.Config().KVBucket
	b.UpdateCourier(bridge.CourierState{Courier: "a", TS: 1, Status: bridge.StatusOnline})
	b.UpdateCourier(bridge.CourierState{Courier: "b", TS: 2, Status: bridge.StatusNoSignal})
	if _, _, ok := waitKV(t, nc, bucket, "b", 5*time.Second, func(cs bridge.CourierState) bool { return cs.TS == 2 }); !ok {
		t.Fatal("b never written")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mustJS(t, nc).DeleteKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	b.UpdateCourier(bridge.CourierState{Courier: "c", TS: 3, Status: bridge.StatusOnline}) // finds no bucket
	testenv.WaitFor(t, 20*time.Second, "the bucket recreated", func() bool { return b.Stats().KVRecreated == 1 })
	b.ScanKV() // the rewrite is due at once; a scan writes it without waiting for the ticker
	for _, want := range []bridge.CourierState{
		{Courier: "a", TS: 1, Status: bridge.StatusOnline},
		{Courier: "b", TS: 2, Status: bridge.StatusNoSignal},
		{Courier: "c", TS: 3, Status: bridge.StatusOnline},
	} {
		if got, _, ok := waitKV(t, nc, bucket, want.Courier, 10*time.Second, func(cs bridge.CourierState) bool { return cs == want }); !ok {
			t.Errorf("after the bucket was recreated: %s is %+v, want %+v", want.Courier, got, want)
		}
	}
	if l := logs.String(); !strings.Contains(l, "courier bucket was missing") || !strings.Contains(l, "couriers=3") {
		t.Errorf("log %q: want a warning naming the bucket loss and the couriers rewritten", l)
	}
}

// The case: after a courier's newer online state is written, a
// stale no_signal (of an older session) must not overwrite it, however long
// after the write it comes.
func TestKV_NewestWinsAfterWrite(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", KVInterval: 50 * time.Millisecond}
	b := mustOpen(t, nc, cfg)
	bucket := b.Config().KVBucket
	b.UpdatePosition([]byte("van-1"), 400, 1, 2)
	if _, _, ok := waitKV(t, nc, bucket, "van-1", 5*time.Second, func(cs bridge.CourierState) bool { return cs.TS == 400 }); !ok {
		t.Fatal("position never written")
	}
	time.Sleep(10 * cfg.KVInterval) // long after the write: a writer that forgot a courier once written would let the stale state through here
	b.MarkNoSignal("van-1", 300, 5, 6)
	b.UpdateCourier(bridge.CourierState{Courier: "van-1", TS: 200, Status: bridge.StatusNoSignal})
	b.ScanKV()
	time.Sleep(200 * time.Millisecond)
	if cs, _ := kvState(t, nc, bucket, "van-1"); cs.TS != 400 || cs.Status != bridge.StatusOnline {
		t.Errorf("got %+v, want the newer online state (ts 400) kept", cs)
	}
	b.MarkNoSignal("van-1", 400, 1, 2) // its own session's end does count
	if cs, _, ok := waitKV(t, nc, bucket, "van-1", 5*time.Second, func(cs bridge.CourierState) bool { return cs.Status == bridge.StatusNoSignal }); !ok {
		t.Errorf("got %+v, want no_signal at ts 400", cs)
	}
}

// A courier write that nobody acks (its subject answered by a plain
// subscriber, not the bucket) fails after AckTimeout and is written again;
// once the bucket's subjects find no responder at all, the bucket is
// recreated and the state lands.
func TestKV_UnackedWriteIsRetried(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", KVInterval: 200 * time.Millisecond, AckTimeout: 300 * time.Millisecond}
	b := mustOpen(t, nc, cfg)
	bucket := b.Config().KVBucket
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mustJS(t, nc).DeleteKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	swallow, sub := swallowing(t, srv, "$KV."+bucket+".>")
	b.UpdatePosition([]byte("van-1"), 100, 1, 2)
	for i := range 2 {
		select {
		case <-swallow:
		case <-time.After(10 * time.Second):
			t.Fatalf("write %d of the unacked state never came (stats %+v)", i+1, b.Stats())
		}
	}
	if st := b.Stats(); st.KVErrors == 0 || st.KVWrites != 0 {
		t.Errorf("after an unacked write: KVErrors %d, KVWrites %d; want > 0, 0", st.KVErrors, st.KVWrites)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the bucket recreated", func() bool { return b.Stats().KVRecreated == 1 })
	want := bridge.CourierState{Courier: "van-1", Lat: 1, Lon: 2, TS: 100, Status: bridge.StatusOnline}
	if got, _, ok := waitKV(t, nc, bucket, "van-1", 20*time.Second, func(cs bridge.CourierState) bool { return cs == want }); !ok {
		t.Errorf("got %+v, want %+v written once the bucket is back (stats %+v)", got, want, b.Stats())
	}
	// The state is in the bucket before its ack reaches the bridge and is
	// counted: wait for the count.
	testenv.WaitFor(t, 10*time.Second, "the write counted", func() bool { return b.Stats().KVWrites > 0 })
}

// A result nobody acks (the stream gone, its subject answered by a plain
// subscriber) is sent again after AckTimeout, each time with the same
// Nats-Msg-Id; once the subject finds no responder, the stream is
// recreated and the result lands in it once.
func TestPublish_UnackedResultIsRetried(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", AckTimeout: 300 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	b := mustOpen(t, nc, cfg)
	subj := cfg.Subject(bridge.KindDistance)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mustJS(t, nc).DeleteStream(ctx, b.Config().Stream); err != nil {
		t.Fatal(err)
	}
	swallow, sub := swallowing(t, srv, subj)
	publishRange(t, b, subj, 0, 1)
	for i := range 3 {
		select {
		case m := <-swallow:
			if id := m.Header.Get(jetstream.MsgIDHeader); id != "k|0" {
				t.Errorf("attempt %d has Nats-Msg-Id %q, want k|0", i+1, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("attempt %d of the unacked result never came (stats %+v)", i+1, b.Stats())
		}
	}
	if st := b.Stats(); st.Errors < 2 || st.Retries < 2 || st.Acked != 0 || st.Pending != 1 {
		t.Errorf("after unacked attempts: %+v; want Errors, Retries >= 2, Acked 0, Pending 1", st)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, b, 20*time.Second)
	if ids := msgIDs(testenv.ReadStream(t, srv.URL(), b.Config().Stream)); len(ids) != 1 || ids["k|0"] != 1 {
		t.Errorf("recreated stream holds %v, want k|0 once", ids)
	}
}

// swallowing subscribes to subject on a connection of its own and never
// replies: a publish there has a responder but no ack. The server has the
// interest when it returns.
func swallowing(tb testing.TB, srv *testenv.NATS, subject string) (chan *nats.Msg, *nats.Subscription) {
	tb.Helper()
	ch := make(chan *nats.Msg, 64)
	nc := srv.Connect(tb)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		tb.Fatal(err)
	}
	return ch, sub
}
