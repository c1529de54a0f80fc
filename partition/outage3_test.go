package partition

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/testenv"
)

// TestRelay_ClusterOutageKeepsBrokerOrder is the hostile network
// with jetstream.ingest mqtt: three NATS nodes, three instances of a
// market of six partitions, 40 phones publishing to the market's
// Mosquitto (QoS 1) every 250 ms, and all three NATS nodes killed for
// 25 s, then started again, while the phones go on publishing on the
// clock. The outage is far longer than gap + tolerated_delay (3 s + 1 s):
// the relay cannot store, its lease runs out, the broker keeps the
// market's session queue, and once the cluster is back an instance takes
// the lease and relays the backlog in the broker's order. Nothing of it
// may be applied as silence or out of order: every courier's only
// no_signal is the one after the fleet's final silence, no record is
// late, every position the broker acked is stored exactly once, and the
// results equal the per-partition replay.
func TestRelay_ClusterOutageKeepsBrokerOrder(t *testing.T) {
	relayFaultRun(t, 180, func(t *testing.T, cl *testenv.Cluster, _ []*instance, relayOf func() string) (time.Time, bool) {
		const outage = 25 * time.Second
		before := relayOf()
		var kills sync.WaitGroup
		for i := range 3 {
			kills.Go(func() { cl.Kill(i) })
		}
		kills.Wait()
		killed := time.Now()
		t.Logf("all three NATS nodes killed (instance %s was relaying)", before)
		time.Sleep(outage) // the fault's length, not a wait for an outcome
		for i := range 3 {
			cl.Restart(i)
		}
		restarted := time.Now()
		t.Logf("all three NATS nodes started again after %v", restarted.Sub(killed).Round(100*time.Millisecond))
		cl.WaitJetStream()
		return restarted, true
	})
}

// TestRelay_RelayAndOwnerKilledKeepBrokerOrder is that run with another
// fault: the instance that relays is killed (cut off NATS and the broker
// at once), and so is a second instance that owns partitions, while the
// phones go on publishing; the third takes the relay lease, the
// market's session and every partition over. No false no_signal, no
// late record, every acked position stored once, results equal to the
// replay.
func TestRelay_RelayAndOwnerKilledKeepBrokerOrder(t *testing.T) {
	relayFaultRun(t, 100, func(t *testing.T, _ *testenv.Cluster, ins []*instance, relayOf func() string) (time.Time, bool) {
		relay := relayOf()
		victims := []string{relay}
		for _, in := range ins {
			if in.r.Instance() == relay {
				in.Kill()
			}
		}
		for _, in := range ins {
			if in.r.Instance() != relay && in.r.shares.owned.Load() > 0 {
				victims = append(victims, in.r.Instance())
				in.Kill()
				break
			}
		}
		t.Logf("instances %v killed (%s was relaying)", victims, relay)
		return time.Now(), false
	})
}

// relayFaultRun is the fleet of TestRelay_ClusterOutageKeepsBrokerOrder,
// rounds of it 250 ms apart, around a fault: fault runs 5 s into the
// fleet, returns when it is over (its end, and whether it left every
// partition's stream a gap longer than gap + tolerated_delay to check),
// and the checks follow.
func relayFaultRun(t *testing.T, rounds int, fault func(t *testing.T, cl *testenv.Cluster, ins []*instance, relayOf func() string) (time.Time, bool)) {
	const (
		partitions = 6
		phones     = 40
		every      = 250 * time.Millisecond
		killAt     = 20 // round: 5 s in
	)
	cl := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3})
	mosq := testenv.StartMosquitto(t)
	cfg := testConfig(t, cl.URL(), partitions)
	if cfg.JetStream.Replicas != 3 {
		t.Fatalf("replicas %d, want 3", cfg.JetStream.Replicas)
	}
	cfg.JetStream.Ingest = "mqtt"
	cfg.MQTT.URL = mosq.URL()
	cfg.Windows.Size, cfg.Windows.Slide = 4*time.Second, 2*time.Second
	cfg.Windows.Gap, cfg.Windows.ToleratedDelay, cfg.Windows.IdleTimeout = 3*time.Second, time.Second, 2*time.Second
	ins := []*instance{
		startInstance(t, cfg, cl.Connect(t), "a", nil),
		startInstance(t, cfg, cl.Connect(t), "b", nil),
		startInstance(t, cfg, cl.Connect(t), "c", nil),
	}
	for _, in := range ins {
		testenv.WaitFor(t, 90*time.Second, in.r.Instance()+" ready", func() bool { return in.r.NotReady() == "" })
	}
	relayOf := func() string {
		for _, in := range ins {
			if in.r.lease.relayReady() == "" {
				return in.r.Instance()
			}
		}
		return ""
	}
	testenv.WaitFor(t, 30*time.Second, "an instance relaying", func() bool { return relayOf() != "" })
	t.Logf("instance %s relays", relayOf())

	ph := startPhones(mosq.Addr(), phones, rounds)
	down := make(chan struct{})
	fleet := make(chan map[string]int64, 1)
	go func() {
		fleet <- testenv.LiveFleet("girona", phones, rounds, every, func(round int) {
			if round == killAt {
				close(down)
			}
		}, ph.send)
	}()

	// The outage: every node killed at once, started again 25 s later.
	<-down
	restarted, gapped := fault(t, cl, ins, relayOf)
	testenv.WaitFor(t, 60*time.Second, "an instance relaying again", func() bool { return relayOf() != "" })
	t.Logf("instance %s relays %v after the fault", relayOf(), time.Since(restarted).Round(10*time.Millisecond))

	last := <-fleet
	acked := ph.stop()
	t.Logf("%d positions published by %d phones and acked by the broker; fleet ended %v after the restart",
		sumCounts(acked), phones, time.Since(restarted).Round(100*time.Millisecond))
	stored, times := storedOnce(t, cl.URL(), cfg.JetStream.Stream, acked)
	var relayed, retries, skipped, terms uint64
	for _, in := range ins {
		relayed += in.r.lease.counts.stored.Load()
		retries += in.r.lease.counts.retries.Load()
		skipped += in.r.lease.counts.skipped.Load()
		terms += in.r.lease.terms.Load()
	}
	t.Logf("%d positions stored (%d distinct), the stream holds %d messages (batches, ticks, wake-ups); relayed %d, %d batch stores sent again, %d redeliveries found stored, %d relay lease terms",
		len(stored), len(times), len(testenv.ReadStored(t, cl.URL(), cfg.JetStream.Stream)), relayed, retries, skipped, terms)

	// The fleet's final silence: every courier's no_signal, and its last
	// distance window fired (the idle rule fires it), so the ticks after
	// it change nothing. Three minutes, read twice a second: on a loaded
	// machine the restarted cluster can take a while to serve the owners
	// and the relay lease steadily, and every read of the results stream
	// is a consumer more for the cluster to assign.
	slide := cfg.Windows.Slide.Milliseconds()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		silent, fired := map[string]bool{}, map[string]bool{}
		for _, r := range outageResults(t, cl.URL(), cfg.NATS.Stream) {
			switch {
			case r.Type == "no_signal":
				silent[r.Courier] = true
			case r.Type == "distance" && r.WindowStart == last[r.Courier]/slide*slide:
				fired[r.Courier] = true
			}
		}
		if len(silent) == len(last) && len(fired) == len(last) {
			break
		}
		if time.Now().After(deadline) {
			waiting := map[int][]string{} // by partition
			for courier := range last {
				if !silent[courier] || !fired[courier] {
					n := PartitionOf(courier, partitions)
					waiting[n] = append(waiting[n], courier)
				}
			}
			for _, in := range ins {
				t.Logf("instance %s: counts %d owned, share %d; relay lease seen: %q", in.r.Instance(), in.r.shares.owned.Load(), in.r.shares.share(), in.r.lease.ready())
			}
			for n, couriers := range waiting {
				t.Logf("partition %d: couriers %v without their final results", n, couriers)
				for _, in := range ins {
					s := in.r.Status()[n]
					t.Logf("  instance %s: heard %v owned %v epoch %d processed %d checkpoint %d lag %d terms %d lost %d dropped %d",
						in.r.Instance(), in.r.heard(), s.Owned, s.Epoch, s.Processed, s.Checkpoint, s.LagMessages, s.Takeovers, s.Fenced, s.Dropped)
				}
			}
			t.Fatalf("3 minutes after the fleet ended, %d of %d couriers have a no_signal and %d their last window; relay: %q",
				len(silent), len(last), len(fired), relayOf())
		}
	}
	seqs := lastSeqs(t, cl.Connect(t), cfg)
	var alive []*instance // those the fault did not kill
	for _, in := range ins {
		if in.done != nil {
			alive = append(alive, in)
		}
	}
	testenv.WaitFor(t, 2*time.Minute, "every partition applied to its end and recorded", func() bool { return settled(seqs, statuses(alive...)...) })
	for _, in := range ins {
		var owned []int
		var takeovers, lost uint64
		for _, s := range in.r.Status() {
			if s.Owned {
				owned = append(owned, s.Partition)
			}
			takeovers, lost = takeovers+s.Takeovers, lost+s.Fenced
		}
		t.Logf("instance %s: owns partitions %v; %d terms started, %d lost", in.r.Instance(), owned, takeovers, lost)
	}
	var stops sync.WaitGroup
	for _, in := range ins {
		stops.Go(in.Stop)
	}
	stops.Wait()

	byType := map[string]int{}
	for _, r := range outageResults(t, cl.URL(), cfg.NATS.Stream) {
		byType[r.Type]++
	}
	t.Logf("results by type: %v", byType)
	if gapped {
		outageGaps(t, cl.URL(), cfg, restarted)
	}
	testenv.CheckOnlyFinalSilence(t, cl.URL(), cfg.NATS.Stream, last)
	t.Logf("%d results, as the replay", equalsReplay(t, cl.URL(), cfg))
}

// outageResult is what TestRelay_ClusterOutageKeepsBrokerOrder reads of
// a result.
type outageResult struct {
	Type        string `json:"type"`
	Courier     string `json:"courier"`
	WindowStart int64  `json:"window_start_ms"`
}

// outageResults reads the results stream.
func outageResults(t testing.TB, url, stream string) []outageResult {
	t.Helper()
	var out []outageResult
	for _, m := range testenv.ReadStream(t, url, stream) {
		var r outageResult
		if json.Unmarshal(m.Data, &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// outageGaps checks that every partition's stream has the outage as a
// gap longer than gap + tolerated_delay (else the test would check
// nothing), and logs it and what ended it.
func outageGaps(t testing.TB, url string, cfg config.Config, restarted time.Time) {
	t.Helper()
	for n := range cfg.JetStream.Partitions {
		msgs := testenv.ReadStored(t, url, cfg.JetStream.Stream, cfg.JetStream.PartitionSubject(n))
		at, gap := 0, time.Duration(0)
		for i := 1; i < len(msgs); i++ {
			if d := msgs[i].Time.Sub(msgs[i-1].Time); d > gap {
				at, gap = i, d
			}
		}
		if gap < cfg.Windows.Gap+cfg.Windows.ToleratedDelay {
			t.Errorf("partition %d: longest gap in the stream %v, not more than gap + tolerated_delay: no outage", n, gap)
			continue
		}
		kind := map[msgKind]string{msgPosition: "position", msgBatch: "batch", msgTick: "tick", msgWake: "wake-up"}[kindOf(msgs[at].Subject, msgs[at].Header)]
		t.Logf("partition %d: %v without a message, then a %s %v after the restart", n, gap.Round(10*time.Millisecond), kind, msgs[at].Time.Sub(restarted).Round(10*time.Millisecond))
	}
}

// TestRelay_TakeoverAfterLongOutageStoresNothingTwice: the relay stores
// positions and its acks to the broker are held (as behind a store that
// never got its answer when NATS went away); NATS is then down for longer
// than the relay's read-back window (pin_ttl + 10 s), so its lease runs
// out, and the relay that takes the lease once NATS is back gets those
// positions again from the market's session. It must find them stored,
// reading the stream back from the end of the former lease rather than
// from now, and store none twice.
func TestRelay_TakeoverAfterLongOutageStoresNothingTwice(t *testing.T) {
	ns := testenv.StartNATS(t)
	mosq := testenv.StartMosquitto(t)
	cfg := testConfig(t, ns.URL(), 2)
	cfg.JetStream.Ingest = "mqtt"
	cfg.MQTT.URL = mosq.URL()
	var gate atomic.Pointer[chan struct{}]
	a := startInstance(t, cfg, ns.Connect(t), "a", func(part int) {
		if g := gate.Load(); part == RelayAcks && g != nil {
			<-*g
		}
	})
	testenv.WaitFor(t, 60*time.Second, "a relaying", func() bool { return a.r.lease.relayReady() == "" })
	held := make(chan struct{})
	gate.Store(&held)
	pub := mosq.Publisher(t, "phones")
	const n = 20
	for i := range n {
		courier := fmt.Sprintf("c%d", i%5)
		pub.MustPublish(t, "km0/girona/positions/"+courier,
			fmt.Appendf(nil, `{"courier":%q,"lat":41.98,"lon":%.5f,"timestamp_ms":%d}`, courier, 2.82+float64(i)*1e-4, time.Now().UnixMilli()))
	}
	testenv.WaitFor(t, 30*time.Second, "the positions stored, their acks held", func() bool {
		return len(storedPositions(t, ns.URL(), cfg.JetStream.Stream)) == n
	})
	ns.Shutdown()
	testenv.WaitFor(t, 30*time.Second, "the relay stopped, its lease run out", func() bool { return a.r.lease.relayReady() == notRelaying })
	gate.Store(nil)
	close(held)
	outage := cfg.JetStream.PinTTL + relayAckWait + 10*time.Second // past the read-back window
	time.Sleep(outage)                                             // the fault's length
	ns.Restart()
	testenv.WaitFor(t, 60*time.Second, "the redelivered positions acked", func() bool { return a.r.lease.counts.stored.Load() == n })
	got := map[string]int{}
	for _, p := range storedPositions(t, ns.URL(), cfg.JetStream.Stream) {
		got[string(p.payload)]++
	}
	for p, k := range got {
		if k != 1 {
			t.Errorf("stored %d times: %s", k, p)
		}
	}
	if skipped := a.r.lease.counts.skipped.Load(); skipped != n {
		t.Errorf("%d redeliveries found stored, want %d", skipped, n)
	}
	t.Logf("%d positions, each stored once, after %v without NATS", len(got), outage)
}
