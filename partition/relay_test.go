package partition

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/mqtt"
)

// TestPartitionOf_AgreesWithTheServersMapping: the relay's partition of a
// courier is the one nats-server's mapping partition(6, courier) gives,
// for plain ids and for one with a '.' (a "//" in its subject token).
func TestPartitionOf_AgreesWithTheServersMapping(t *testing.T) {
	const partitions = 6
	cl := testenv.StartNATSWithMappings(t, mapping(partitions))
	nc := cl.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MAPPED", Subjects: []string{"part.girona.*.*"}}); err != nil {
		t.Fatal(err)
	}
	tokens := []string{"van//3", "bike:7", "a", "Z-9_x"}
	for i := range 200 {
		tokens = append(tokens, fmt.Sprintf("courier-%d", i))
	}
	for _, tok := range tokens {
		if _, err := js.Publish(ctx, "km0.girona.positions."+tok, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range testenv.ReadStored(t, cl.URL(), "MAPPED") {
		parts := strings.SplitN(m.Subject, ".", 4)
		if want := fmt.Sprint(PartitionOf(parts[3], partitions)); parts[2] != want {
			t.Errorf("%s: the server's partition %s, PartitionOf %s", parts[3], parts[2], want)
		}
	}
}

// TestRelay_StreamLeaderLossLosesNoAckedPosition: with jetstream.ingest
// mqtt, two instances share the market broker's positions and store them
// in the partitioned stream (R3, three nodes). The node leading the
// positions stream is killed while the fleet publishes; every position
// the broker acknowledged to its phone must end up in the stream, once,
// each courier's in the order published (a batch sent again goes before
// the next of its partition), and the results equal the per-partition
// replay.
func TestRelay_StreamLeaderLossLosesNoAckedPosition(t *testing.T) {
	const partitions = 2
	cl := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3})
	mosq := testenv.StartMosquitto(t)
	cfg := testConfig(t, cl.URL(), partitions)
	cfg.JetStream.Ingest = "mqtt"
	cfg.MQTT.URL = mosq.URL()
	a := startInstance(t, cfg, cl.Connect(t), "a", nil)
	b := startInstance(t, cfg, cl.Connect(t), "b", nil)
	for _, in := range []*instance{a, b} {
		testenv.WaitFor(t, 60*time.Second, in.r.Instance()+" ready", func() bool { return in.r.NotReady() == "" })
	}
	nc := cl.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	msgs := testenv.FleetMessages("girona", 60, 10*time.Minute, 11, time.Now())
	pub := mosq.Publisher(t, "relay-phones")
	killed := false
	start := time.Now()
	for i, m := range msgs {
		if !killed && i >= len(msgs)/3 {
			s, err := js.Stream(ctx, cfg.JetStream.Stream)
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx)
			if err != nil || info.Cluster == nil {
				t.Fatalf("positions stream info: %v", err)
			}
			leader := info.Cluster.Leader
			t.Logf("killing %s, the positions stream's leader, after %d of %d positions", leader, i, len(msgs))
			cl.Kill(int(leader[1] - '1'))
			killed = true
		}
		if err := pub.Publish(ctx, m.Topic, m.Payload); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if wait := time.Duration(i+1)*time.Second/400 - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
	}
	t.Logf("%d positions acked by the broker in %v", len(msgs), time.Since(start).Round(time.Millisecond))
	sent := make([]string, len(msgs))
	for i, m := range msgs {
		sent[i] = string(m.Payload)
	}
	stored := storedAsSent(t, cl.URL(), cfg.JetStream.Stream, sent)
	var relayed, retries uint64
	for _, in := range []*instance{a, b} {
		relayed += in.r.lease.counts.stored.Load()
		retries += in.r.lease.counts.retries.Load()
	}
	t.Logf("%d positions stored (the fleet repeats a few as QoS 1 redeliveries); relayed %d, %d retries", len(stored), relayed, retries)
	last := lastSeqs(t, nc, cfg)
	testenv.WaitFor(t, 2*time.Minute, "every partition applied to its end and recorded", func() bool { return settled(last, statuses(a, b)...) })
	a.Stop()
	b.Stop()
	t.Logf("%d results, as the replay", equalsReplay(t, cl.URL(), cfg))
}

// TestRelay_OneRelayTakesOverInOrder: with jetstream.ingest mqtt, one of
// two instances relays the broker (the relay lease); it is killed while
// the fleet publishes. The other takes the lease within pin_ttl and a few
// seconds and the market's session with it; a third instance starts, and
// later the relay is stopped gracefully (it gives the lease up: the third
// takes it at once, and what the stopped relay stored and had not acked
// comes to it again). Every position the broker acked is stored, none
// more often than published, each courier's positions in the order they
// were published, each relayed about once (not once per instance), and
// the results equal the per-partition replay.
func TestRelay_OneRelayTakesOverInOrder(t *testing.T) {
	const partitions = 2
	ns := testenv.StartNATS(t)
	mosq := testenv.StartMosquitto(t)
	cfg := testConfig(t, ns.URL(), partitions)
	cfg.JetStream.Ingest = "mqtt"
	cfg.MQTT.URL = mosq.URL()
	// A gate holds an instance's relay between its stores and its acks.
	var gates [2]atomic.Pointer[chan struct{}]
	hold := func(k int) func(int) {
		return func(part int) {
			if g := gates[k].Load(); part == RelayAcks && g != nil {
				<-*g
			}
		}
	}
	a := startInstance(t, cfg, ns.Connect(t), "a", hold(0))
	b := startInstance(t, cfg, ns.Connect(t), "b", hold(1))
	for _, in := range []*instance{a, b} {
		testenv.WaitFor(t, 60*time.Second, in.r.Instance()+" ready", func() bool { return in.r.NotReady() == "" })
	}
	relaying := func(in *instance) bool { return in.r.lease.relayReady() == "" }
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	msgs := testenv.FleetMessages("girona", 40, 10*time.Minute, 5, time.Now())
	pub := mosq.Publisher(t, "relay-phones")
	var victim, third *instance
	var survivors []*instance
	var gate *chan struct{}
	stopped := false
	var killedAt time.Time
	takeover := make(chan time.Duration, 1)
	start := time.Now()
	for i, m := range msgs {
		if third != nil && !stopped && i >= 2*len(msgs)/3 {
			testenv.WaitFor(t, 30*time.Second, "instance c ready", func() bool { return third.r.NotReady() == "" })
			for _, in := range survivors {
				if relaying(in) {
					t.Logf("stop instance %s, the relay, after %d positions", in.r.Instance(), i)
					in.Stop()
					stopped = true
					break
				}
			}
		}
		if gate == nil && i >= len(msgs)/3-200 {
			// The relay stores the next 200 positions and acks none.
			k := 0
			if relaying(b) {
				k = 1
			}
			g := make(chan struct{})
			gate = &g
			gates[k].Store(gate)
			victim, survivors = a, []*instance{b}
			if k == 1 {
				victim, survivors = b, []*instance{a}
			}
			if !relaying(victim) {
				t.Fatal("neither instance relays")
			}
		}
		if killedAt.IsZero() && i >= len(msgs)/3 {
			t.Logf("kill instance %s, the relay, after %d of %d positions, its last acks held", victim.r.Instance(), i, len(msgs))
			killedAt = time.Now()
			victim.nc.Close()
			victim.cancel()
			close(*gate)
			victim.Stop()
			third = startInstance(t, cfg, ns.Connect(t), "c", nil)
			survivors = append(survivors, third)
			go func() {
				for !relaying(survivors[0]) && !relaying(survivors[1]) {
					time.Sleep(10 * time.Millisecond)
				}
				takeover <- time.Since(killedAt)
			}()
		}
		if err := pub.Publish(ctx, m.Topic, m.Payload); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if wait := time.Duration(i+1)*time.Second/400 - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
	}
	if !stopped {
		t.Fatal("no relay to stop gracefully")
	}
	select {
	case d := <-takeover:
		t.Logf("an instance relays %v after the kill (pin_ttl %v)", d.Round(time.Millisecond), cfg.JetStream.PinTTL)
		if d > cfg.JetStream.PinTTL+5*time.Second {
			t.Errorf("takeover after %v, want within pin_ttl %v + 5s", d, cfg.JetStream.PinTTL)
		}
	case <-time.After(cfg.JetStream.PinTTL + 30*time.Second):
		t.Fatal("no instance took the relay over")
	}
	var last1 *instance
	for _, in := range survivors {
		if in.done != nil {
			last1 = in
		}
	}
	sent := make([]string, len(msgs))
	for i, m := range msgs {
		sent[i] = string(m.Payload)
	}
	storedAsSent(t, ns.URL(), cfg.JetStream.Stream, sent)
	var relayed, skipped uint64
	for _, in := range []*instance{a, b, third} {
		relayed += in.r.lease.counts.stored.Load()
		skipped += in.r.lease.counts.skipped.Load()
	}
	t.Logf("%d redelivered positions found stored by a former relay, not stored again", skipped)
	if skipped == 0 {
		t.Error("no redelivered position was found stored: the takeover's dedup was not exercised")
	}
	batches := len(testenv.ReadStored(t, ns.URL(), cfg.JetStream.Stream))
	t.Logf("%d messages published, %d relayed (stored and acked) over both instances, in %d stream messages", len(msgs), relayed, batches)
	if relayed > uint64(len(msgs))+skipped+uint64(len(msgs))/10 {
		t.Errorf("relayed %d of %d messages: more than once each", relayed, len(msgs))
	}
	last := lastSeqs(t, ns.Connect(t), cfg)
	testenv.WaitFor(t, 2*time.Minute, "every partition applied to its end and recorded", func() bool { return settled(last, statuses(last1)...) })
	last1.Stop()
	t.Logf("%d results, as the replay", equalsReplay(t, ns.URL(), cfg))
}

// TestReadBackFrom: a relay taking the lease reads the stream back
// recentWindow before the former lease ended (before now when it was
// given up or has not ended), or from where the former relay read back
// itself when that is earlier: it had not acked past what the broker
// gave it again, and those positions come back once more.
func TestReadBackFrom(t *testing.T) {
	const ttl = 2 * time.Second
	now := time.UnixMilli(1_000_000_000)
	w := recentWindow(ttl)
	for _, c := range []struct {
		name   string
		former leaseRecord
		want   time.Time
	}{
		{"no former lease", leaseRecord{}, now.Add(-w)},
		{"given up", leaseRecord{Instance: "a"}, now.Add(-w)},
		{"ended 30 s ago", leaseRecord{UntilMs: now.Add(-30 * time.Second).UnixMilli()}, now.Add(-30*time.Second - w)},
		{"not ended", leaseRecord{UntilMs: now.Add(time.Second).UnixMilli()}, now.Add(-w)},
		{"ended, settled", leaseRecord{UntilMs: now.Add(-time.Second).UnixMilli()}, now.Add(-time.Second - w)},
		{"ended, its own read back earlier", leaseRecord{UntilMs: now.Add(-time.Second).UnixMilli(), SinceMs: now.Add(-45 * time.Second).UnixMilli()}, now.Add(-45 * time.Second)},
		{"ended, its own read back later", leaseRecord{UntilMs: now.Add(-30 * time.Second).UnixMilli(), SinceMs: now.Add(-time.Second).UnixMilli()}, now.Add(-30*time.Second - w)},
	} {
		if got := readBackFrom(c.former, now, ttl); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// With half the broker's window held in open batches the relay stores
// them at once rather than after their linger: the broker sends no more
// than its window unacked, so a linger-long wait would idle it. A
// window's worth of one courier's positions, all received before the
// batcher starts, goes out in batches of at most windowFlush positions
// (without the rule, one batch of all of them).
func TestRelay_HalfTheWindowHeldIsStoredAtOnce(t *testing.T) {
	r, ns, ctx := setUpRunner(t, 2)
	l := heldRelay(t, r, time.Minute)
	js, err := jetstream.New(ns.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	l.js = js
	l.ctx, l.cancel = context.WithCancel(ctx)
	const n = mqtt.DefaultReceiveMaximum
	for i := range n {
		m := &mqtt.Message{Topic: "km0/girona/positions/c1", Payload: fmt.Appendf(nil, `{"courier_id":"c1","ts":%d,"lat":41.98,"lon":2.82}`, 1_700_000_000_000+int64(i)*1000)}
		part, token := l.route(m.Topic)
		l.in <- inbound{part: part, token: token, m: m}
	}
	go func() {
		for range l.pending { // acked by nobody: the test reads the stream
		}
	}()
	l.batching.Go(l.run)
	defer func() { l.cancel(); l.batching.Wait() }()
	var stored []storedPosition
	testenv.WaitFor(t, time.Minute, "every position stored", func() bool {
		stored = storedPositions(t, ns.URL(), r.cfg.JetStream.Stream)
		return len(stored) == n
	})
	sizes := map[uint64]int{}
	for _, p := range stored {
		sizes[p.seq]++
	}
	for seq, size := range sizes {
		if size > n/2 {
			t.Errorf("batch at stream sequence %d holds %d positions, want at most %d (half the window)", seq, size, n/2)
		}
	}
}

// heldRelay is a relay of r, built but not started, under a lease of
// r's instance that ends in left (pin_ttl 4 s).
func heldRelay(t *testing.T, r *Runner, left time.Duration) *relay {
	t.Helper()
	if r.lease == nil { // testConfig's ingest is the gateway
		r.lease = &relayLease{r: r}
	}
	r.lease.ttl = 4 * time.Second
	r.lease.set(leaseRecord{Instance: r.inst, UntilMs: time.Now().Add(left).UnixMilli()}, 1)
	return newRelay(r)
}

// A relay whose lease has less than a quarter of pin_ttl left by its
// clock (its process paused past it: SIGSTOP, a stalled VM) stores no
// batch and stops: what it holds unacked, the broker gives its
// successor, which would store it again.
func TestRelay_LapsedLeaseStoresNothing(t *testing.T) {
	r, ns, ctx := setUpRunner(t, 2)
	l := heldRelay(t, r, 900*time.Millisecond) // under 4 s / 4
	js, err := jetstream.New(ns.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	l.js = js
	l.ctx, l.cancel = context.WithCancel(ctx)
	defer l.cancel()
	b := newBatch(0)
	b.add("c1", []byte(`{"courier_id":"c1","ts":1700000000000,"lat":41.98,"lon":2.82}`))
	l.store(b)
	select {
	case <-b.stored:
		t.Fatal("a batch stored under a lapsed lease")
	default:
	}
	if why := l.stoppedWhy(); why != errLeaseLapsed || l.ctx.Err() == nil {
		t.Errorf("stopped %v, relay context %v: want the relay stopped for its lapsed lease", why, l.ctx.Err())
	}
	if err := l.leaseLasts(); !errors.Is(err, errLeaseLapsed) {
		t.Errorf("leaseLasts (MayConnect) = %v, want errLeaseLapsed", err)
	}
	if got := storedPositions(t, ns.URL(), r.cfg.JetStream.Stream); len(got) != 0 {
		t.Errorf("%d positions stored, want none", len(got))
	}
}
