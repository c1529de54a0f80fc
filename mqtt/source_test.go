package mqtt

// Integration tests against a real Mosquitto (internal/testenv). Each test
// owns its broker, so they run in parallel.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

func TestSource_ReceivesInOrder(t *testing.T) {
	t.Parallel()
	broker := testenv.StartMosquitto(t)
	rec := newRecorder()
	src := mustStart(t, testConfig(broker.URL(), "edgeproc-order"), rec.handle)
	waitSubscribed(t, src)

	const n = 200
	pub := broker.Publisher(t, "")
	before := time.Now()
	for i := range n {
		courier := fmt.Sprintf("van-%d", i%3)
		pub.MustPublish(t, testTopic(courier), fmt.Appendf(nil, `{"courier":%q,"seq":%d}`, courier, i))
	}
	got := rec.waitLen(t, n, 10*time.Second)

	for i, m := range got {
		courier := fmt.Sprintf("van-%d", i%3)
		if want := testTopic(courier); m.Topic != want {
			t.Errorf("message %d: got topic %q, want %q", i, m.Topic, want)
		}
		if want := fmt.Sprintf(`{"courier":%q,"seq":%d}`, courier, i); string(m.Payload) != want {
			t.Errorf("message %d: got payload %s, want %s", i, m.Payload, want)
		}
		if m.Arrival.Before(before) || m.Arrival.After(time.Now()) {
			t.Errorf("message %d: arrival %v outside the test's run", i, m.Arrival)
		}
		if i > 0 && m.Arrival.Before(got[i-1].Arrival) {
			t.Errorf("message %d: arrival %v before the previous one's %v", i, m.Arrival, got[i-1].Arrival)
		}
		if m.Duplicate {
			t.Errorf("message %d: got Duplicate true on first delivery", i)
		}
		m.Ack()
		m.Ack() // a second ack must not be counted or sent
	}
	st := src.Stats()
	if st.Received != n || st.Acked != n || st.StaleAcks != 0 || st.Redelivered != 0 {
		t.Errorf("got stats %+v, want Received=Acked=%d, no stale acks, no redeliveries", st, n)
	}
	if !st.Connected || !st.Subscribed || st.Connects != 1 || st.Reconnects != 0 {
		t.Errorf("got stats %+v, want connected and subscribed once", st)
	}
}

func TestSource_PersistentSessionQueuesWhileStopped(t *testing.T) {
	t.Parallel()
	broker := testenv.StartMosquitto(t)
	cfg := testConfig(broker.URL(), "edgeproc-persist")

	// First run creates the session (and its subscription), then leaves.
	first := mustStart(t, cfg, func(m *Message) { m.Ack() })
	waitSubscribed(t, first)
	mustClose(t, first)

	const n = 1000
	pub := broker.Publisher(t, "")
	publishSeq(t, pub, "van-1", 0, n)

	rec := newRecorder()
	second := mustStart(t, cfg, func(m *Message) { rec.handle(m); m.Ack() })
	got := rec.waitLen(t, n, 20*time.Second)
	for i, m := range got[:n] {
		if seq := seqOf(t, m); seq != i {
			t.Fatalf("message %d: got seq %d, want %d (order or loss)", i, seq, i)
		}
	}
	if st := second.Stats(); st.Connects != 1 || st.SessionsLost != 0 {
		t.Errorf("got stats %+v, want one connection to an existing session", st)
	}
	// Close flushes the acks made so far: a third run must get nothing.
	mustClose(t, second)

	third := newRecorder()
	mustStart(t, cfg, third.handle)
	time.Sleep(300 * time.Millisecond)
	if k := third.len(); k != 0 {
		t.Errorf("after acking all and restarting, got %d redelivered messages, want 0", k)
	}
}

func TestSource_UnackedRedeliveredAfterRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// ack lists the sequence numbers acked in the first run.
		ack  []int
		want []int // sequence numbers redelivered in the second run
	}{
		{name: "prefix acked", ack: []int{0, 1, 2, 3, 4}, want: seqRange(5, 20)},
		{name: "nothing acked", ack: nil, want: seqRange(0, 20)},
		// Acks must be released in receive order: 2..5 wait behind 0, which
		// is never acked, so all of them come back.
		{name: "gap holds later acks back", ack: []int{1, 2, 3, 4, 5}, want: seqRange(0, 20)},
		{name: "acked out of order", ack: []int{4, 3, 2, 1, 0}, want: seqRange(5, 20)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			broker := testenv.StartMosquitto(t)
			cfg := testConfig(broker.URL(), "edgeproc-redeliver-"+strconv.Itoa(i))
			rec := newRecorder()
			first := mustStart(t, cfg, rec.handle)
			waitSubscribed(t, first)
			pub := broker.Publisher(t, "")
			publishSeq(t, pub, "van-1", 0, 20)
			got := rec.waitLen(t, 20, 10*time.Second)
			for _, seq := range tt.ack {
				got[seq].Ack() // from the test goroutine, not the handler
			}
			mustClose(t, first)
			// Acks after the connection is gone are dropped, not sent.
			for _, m := range got {
				m.Ack()
			}
			if st, want := first.Stats(), uint64(20-len(tt.ack)); st.StaleAcks != want || st.Acked != uint64(len(tt.ack)) {
				t.Errorf("first run: got Acked=%d StaleAcks=%d, want %d and %d", st.Acked, st.StaleAcks, len(tt.ack), want)
			}

			rec2 := newRecorder()
			second := mustStart(t, cfg, func(m *Message) { rec2.handle(m); m.Ack() })
			again := rec2.waitLen(t, len(tt.want), 10*time.Second)
			time.Sleep(200 * time.Millisecond) // anything beyond want would show now
			again = rec2.snapshot()
			if len(again) != len(tt.want) {
				t.Fatalf("second run: got %d messages, want %d", len(again), len(tt.want))
			}
			for j, m := range again {
				if seq := seqOf(t, m); seq != tt.want[j] {
					t.Errorf("second run message %d: got seq %d, want %d", j, seq, tt.want[j])
				}
				if !m.Duplicate {
					t.Errorf("second run message %d: got Duplicate false, want true for a redelivery", j)
				}
			}
			if st := second.Stats(); st.Redelivered != uint64(len(tt.want)) {
				t.Errorf("second run: got Redelivered %d, want %d", st.Redelivered, len(tt.want))
			}
		})
	}
}

func TestSource_BrokerRestartMidStream(t *testing.T) {
	t.Parallel()
	broker := testenv.StartMosquitto(t)
	cfg := testConfig(broker.URL(), "edgeproc-restart")

	// Acks come from another goroutine, a little behind the handler, as
	// they would after a write-ahead-log fsync: at the restart some messages
	// are received but not acked yet.
	acks := make(chan *Message, 4096)
	var ackWG sync.WaitGroup
	ackWG.Add(1)
	go func() {
		defer ackWG.Done()
		for m := range acks {
			time.Sleep(200 * time.Microsecond)
			m.Ack()
		}
	}()
	t.Cleanup(func() { close(acks); ackWG.Wait() })

	rec := newRecorder()
	src := mustStart(t, cfg, func(m *Message) {
		rec.handle(m)
		time.Sleep(time.Millisecond) // slow consumer: the broker queues
		acks <- m
	})
	waitSubscribed(t, src)

	const half = 1000
	pub := broker.Publisher(t, "")
	publishSeq(t, pub, "van-1", 0, half)
	rec.waitLen(t, 100, 10*time.Second)
	pub.Close()

	broker.Restart() // mid-stream: hundreds still queued, some in flight
	testenv.WaitFor(t, 10*time.Second, "reconnection", func() bool { return src.Stats().Reconnects >= 1 && src.Stats().Subscribed })

	pub2 := broker.Publisher(t, "")
	publishSeq(t, pub2, "van-1", half, 2*half)

	seen := make(map[int]int)
	testenv.WaitFor(t, 30*time.Second, "every message after the restart", func() bool {
		for k := range seen {
			delete(seen, k)
		}
		for _, m := range rec.snapshot() {
			seen[seqOf(t, m)]++
		}
		return len(seen) == 2*half
	})
	for seq := range 2 * half {
		if seen[seq] == 0 {
			t.Errorf("seq %d lost across the broker restart", seq)
		}
	}
	st := src.Stats()
	dups := int(st.Received) - len(seen)
	t.Logf("received %d, unique %d, duplicates %d, redelivered flag %d, stale acks %d", st.Received, len(seen), dups, st.Redelivered, st.StaleAcks)
	if st.SessionsLost != 0 {
		t.Errorf("got SessionsLost %d, want 0: the broker persisted the session", st.SessionsLost)
	}
	// Redeliveries carry DUP; every duplicate we saw must be one of them.
	if dups > int(st.Redelivered) {
		t.Errorf("got %d duplicates but only %d flagged redelivered", dups, st.Redelivered)
	}
}

func TestSource_BackpressureBoundedByReceiveMaximum(t *testing.T) {
	t.Parallel()
	broker := testenv.StartMosquitto(t)
	cfg := testConfig(broker.URL(), "edgeproc-backpressure")
	cfg.ReceiveMaximum = 20

	// Nothing is acked: the broker must stop at ReceiveMaximum outstanding
	// messages, so what we hold never exceeds it.
	rec := newRecorder()
	src := mustStart(t, cfg, rec.handle)
	waitSubscribed(t, src)
	pub := broker.Publisher(t, "")
	const n = 300
	publishSeq(t, pub, "van-1", 0, n)

	rec.waitLen(t, int(cfg.ReceiveMaximum), 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	if got := rec.len(); got != int(cfg.ReceiveMaximum) {
		t.Fatalf("with nothing acked, got %d messages outstanding, want exactly ReceiveMaximum=%d", got, cfg.ReceiveMaximum)
	}
	if got := src.Stats().Outstanding; got != int(cfg.ReceiveMaximum) {
		t.Errorf("got Stats().Outstanding %d, want %d", got, cfg.ReceiveMaximum)
	}

	// Acking releases the flow; everything arrives, in order.
	acked := 0
	for acked < n {
		msgs := rec.waitLen(t, acked+1, 10*time.Second)
		for _, m := range msgs[acked:] {
			if outstanding := len(msgs) - acked; outstanding > int(cfg.ReceiveMaximum) {
				t.Fatalf("got %d messages outstanding, want at most %d", outstanding, cfg.ReceiveMaximum)
			}
			m.Ack()
			acked++
		}
		if o := src.Stats().Outstanding; o > int(cfg.ReceiveMaximum) {
			t.Fatalf("got Stats().Outstanding %d, want at most %d", o, cfg.ReceiveMaximum)
		}
	}
	for i, m := range rec.snapshot() {
		if seq := seqOf(t, m); seq != i {
			t.Fatalf("message %d: got seq %d, want %d", i, seq, i)
		}
	}
}

func TestSource_BlockingHandlerLosesNothing(t *testing.T) {
	t.Parallel()
	broker := testenv.StartMosquitto(t)
	cfg := testConfig(broker.URL(), "edgeproc-block")
	cfg.ReceiveMaximum = 10

	release := make(chan struct{})
	rec := newRecorder()
	src := mustStart(t, cfg, func(m *Message) {
		rec.handle(m)
		<-release // blocks the reading goroutine, as a full WAL queue would
		m.Ack()
	})
	waitSubscribed(t, src)
	pub := broker.Publisher(t, "")
	const n = 200
	publishSeq(t, pub, "van-1", 0, n)

	time.Sleep(300 * time.Millisecond)
	if got := rec.len(); got != 1 {
		t.Fatalf("with the handler blocked, got %d handler calls, want 1", got)
	}
	if !src.Connected() {
		t.Fatalf("a blocked handler dropped the connection")
	}
	close(release)
	got := rec.waitLen(t, n, 10*time.Second)
	for i, m := range got {
		if seq := seqOf(t, m); seq != i {
			t.Fatalf("message %d: got seq %d, want %d", i, seq, i)
		}
	}
}

func seqRange(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func TestSource_StartsBeforeBrokerAndCloses(t *testing.T) {
	t.Parallel()
	broker := testenv.StartMosquitto(t)
	broker.Stop()

	rec := newRecorder()
	src := mustStart(t, testConfig(broker.URL(), "edgeproc-late-broker"), func(m *Message) { rec.handle(m); m.Ack() })
	time.Sleep(200 * time.Millisecond)
	if st := src.Stats(); st.Connected || st.Connects != 0 {
		t.Fatalf("with the broker down, got stats %+v, want not connected", st)
	}

	broker.Restart() // same port: the retrying source finds it
	waitSubscribed(t, src)
	publishSeq(t, broker.Publisher(t, ""), "van-9", 0, 3)
	if got := rec.waitLen(t, 3, 10*time.Second); string(got[2].Payload) != "2" {
		t.Errorf("got last payload %q, want %q", got[2].Payload, "2")
	}

	mustClose(t, src)
	if src.Connected() {
		t.Errorf("after Close: got Connected true, want false")
	}
	mustClose(t, src) // a second Close is harmless
}

// TestSource_AckedAfterTheDropIsNotHandedOnAgain acks half of a
// connection's messages after the connection dropped (as a write-ahead
// log that was stalled on a full disk would): the broker, which never had
// those PUBACKs, resends every unacked message on the next connection;
// the ones acked late are acked at once and not handed on again, the
// others are. A broker restart afterwards redelivers nothing: the
// copies' acks reached it.
func TestSource_AckedAfterTheDropIsNotHandedOnAgain(t *testing.T) {
	t.Parallel()
	broker := testenv.StartMosquitto(t)
	var ackNow atomic.Bool
	rec := newRecorder()
	src := mustStart(t, testConfig(broker.URL(), "edgeproc-resent"), func(m *Message) {
		rec.handle(m)
		if ackNow.Load() {
			m.Ack()
		}
	})
	waitSubscribed(t, src)
	pub := broker.Publisher(t, "")
	publishSeq(t, pub, "van-1", 0, 20)
	first := rec.waitLen(t, 20, 10*time.Second)
	pub.Close()

	broker.Stop()
	testenv.WaitFor(t, 10*time.Second, "the connection to drop", func() bool { return !src.Connected() })
	for _, m := range first[:10] {
		m.Ack() // durable only now: the broker will not hear of it
	}
	if st := src.Stats(); st.StaleAcks != 10 {
		t.Fatalf("got StaleAcks %d, want 10", st.StaleAcks)
	}
	ackNow.Store(true)
	broker.Restart()
	again := rec.waitLen(t, 30, 10*time.Second)
	time.Sleep(300 * time.Millisecond) // a copy of 0..9 would show now
	again = rec.snapshot()[20:]
	if len(again) != 10 {
		t.Fatalf("after the reconnection got %d messages, want the 10 never acked", len(again))
	}
	for i, m := range again {
		if seq := seqOf(t, m); seq != 10+i || !m.Duplicate {
			t.Errorf("after the reconnection message %d: seq %d duplicate %v, want %d, true", i, seq, m.Duplicate, 10+i)
		}
		m.Ack() // the handler's ack, again: no-op
	}
	if st := src.Stats(); st.Resent != 10 || st.Redelivered != 10 {
		t.Errorf("got Resent %d Redelivered %d, want 10 and 10", st.Resent, st.Redelivered)
	}

	pub = broker.Publisher(t, "")
	publishSeq(t, pub, "van-1", 20, 25) // new: forgets what is left of the resends
	rec.waitLen(t, 35, 10*time.Second)
	pub.Close()
	testenv.WaitFor(t, 5*time.Second, "every PUBACK written", func() bool { return src.Stats().Outstanding == 0 })
	time.Sleep(2 * DefaultAckInterval)
	broker.Restart()
	testenv.WaitFor(t, 10*time.Second, "reconnection", func() bool { return src.Stats().Reconnects >= 2 && src.Stats().Subscribed })
	time.Sleep(500 * time.Millisecond)
	if n := rec.len(); n != 35 {
		t.Errorf("after a second restart got %d messages in all, want 35: something acked was redelivered", n)
	}
}

// TestSource_UnreachableBrokerLogsRateLimited: a broker that closes every
// connection before CONNACK makes the source retry about twice a second;
// the warnings name the cause and come at once, then one per doubling
// step with the count held back, not one per attempt.
func TestSource_UnreachableBrokerLogsRateLimited(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var attempts atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			attempts.Add(1)
			c.Close()
		}
	}()
	var logs testenv.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Start(ctx, testConfig("mqtt://"+ln.Addr().String(), "unreachable"), slog.New(slog.NewTextHandler(&logs, nil)), func(*Message) {})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	testenv.WaitFor(t, 60*time.Second, "12 connection attempts", func() bool { return attempts.Load() >= 12 })
	warnings := strings.Count(logs.String(), "mqtt: cannot connect to the broker")
	if warnings < 1 || warnings > 4 {
		t.Errorf("%d warnings for %d attempts, want the first and then about one per doubling second:\n%s", warnings, attempts.Load(), logs.String())
	}
	if !strings.Contains(logs.String(), "suppressed=") {
		t.Errorf("no warning says how many were held back:\n%s", logs.String())
	}
}

// MayConnect gates every connection attempt: while it refuses, the
// source does not connect (nor take the session from the client that
// has it); once it allows, the source connects and receives.
func TestSource_MayConnectGatesEveryAttempt(t *testing.T) {
	t.Parallel()
	broker := testenv.StartMosquitto(t)
	var allowed, asked atomic.Int64
	cfg := testConfig(broker.URL(), "edgeproc-gated")
	cfg.MayConnect = func() error {
		asked.Add(1)
		if allowed.Load() == 0 {
			return errors.New("not now")
		}
		return nil
	}
	rec := newRecorder()
	src := mustStart(t, cfg, func(m *Message) { rec.handle(m); m.Ack() })
	testenv.WaitFor(t, 10*time.Second, "two attempts refused", func() bool { return asked.Load() >= 2 })
	if st := src.Stats(); st.Connected || st.Connects != 0 {
		t.Fatalf("while MayConnect refuses, got stats %+v, want never connected", st)
	}
	allowed.Store(1)
	waitSubscribed(t, src)
	publishSeq(t, broker.Publisher(t, ""), "van-9", 0, 3)
	rec.waitLen(t, 3, 10*time.Second)
	mustClose(t, src)
}
