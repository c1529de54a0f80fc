package partition

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/result"
)

// chaosKinds are the faults of the partitioned source's schedule: an
// instance killed (at a random moment, or again while it takes its
// partitions back), paused (past the pin TTL, it is fenced; the relay
// among them gives its lease up), a NATS node down; the network between
// a node and the instances connected to it, by nftables rules on that
// node's client port only (its routes and the test's own connections
// are untouched): packets silently dropped for 3-15 s (net-drop: a
// half-open connection neither side notices at once), or every
// connection reset and new ones refused for 0.5-3 s (net-cut); the
// market's MQTT broker stopped and started again (the phones keep their
// positions meanwhile, the relay is deaf); and the results stream
// deleted (the instances recreate it). One node at a time: the streams
// are R3.
var chaosKinds = []string{"kill", "kill-in-recovery", "pause", "node-down", "net-drop", "net-cut", "broker-down", "results-stream-deleted"}

// chaosWindows are the market's windows: event time runs 4 times faster
// than the clock, the idle rule on, so that a fault taken for silence
// would give no_signals.
const chaosWindows = "  size: 20s\n  slide: 10s\n  gap: 15s\n  tolerated_delay: 2s\n  idle_timeout: 10s\n"

// TestChaos_PartitionedSchedule is crashtest's seeded fault schedule for
// the partitioned source as deployed by default (jetstream.ingest mqtt):
// three `edgeproc run` on a three-node cluster, four partitions, a fleet
// published to the market's Mosquitto for CHAOS_DURATION, relayed into
// the partitions by whichever instance holds the relay lease, while
// faults drawn from CHAOS_SEED hit the instances, the nodes and the
// broker. At the end every position the broker acked is in the
// positions stream, none more often than published, each courier's in
// the order published; every partition is owned and recorded; the
// results stream holds once per key exactly the replay of each
// partition's stream; and its no_signals are the ones the couriers
// earned: those of a run over each partition's positions alone, in the
// order they were published, without any clock (a fault taken for
// silence would add some, a relay that reordered positions would add or
// move some); every instance is healthy and exits cleanly on SIGTERM.
// When the schedule deleted the results stream, "the results stream" is
// the union of what each incarnation of it held (see
// equalsReplayIncarnations).
func TestChaos_PartitionedSchedule(t *testing.T) {
	seed, d := testenv.ChaosSeed(), testenv.ChaosDuration()
	rng := rand.New(rand.NewSource(seed))
	bin := testenv.BuildEdgeproc(t)
	const partitions = 4
	cl := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3})
	mosq := testenv.StartMosquitto(t)
	nf := testenv.StartNetFaults(t)
	nodeURLs := strings.Split(cl.URL(), ",")
	edit := func(y string) string {
		y = strings.Replace(y, "  ingest: gateway\n", "  ingest: mqtt\n", 1)
		y = strings.Replace(y, "windows:\n  idle_timeout: 0s\n", "windows:\n"+chaosWindows, 1)
		return y + fmt.Sprintf("mqtt:\n  url: %q\n", mosq.URL())
	}
	cfg, err := config.Parse(strings.NewReader(edit(testYAML(cl.URL(), partitions, "127.0.0.1:0", ""))), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	procs := startProcsEdit(t, bin, cl.URL(), partitions, 0, edit, "a", "b", "c")
	for _, p := range procs {
		testenv.WaitFor(t, 90*time.Second, p.name+" ready", p.ready)
	}
	longest := cfg.Windows.IdleTimeout + cfg.Windows.Gap + cfg.Windows.ToleratedDelay
	faults := testenv.Schedule(rng, d, chaosKinds, longest)
	t.Logf("chaos seed %d, %v, %d faults (CHAOS_SEED=%d CHAOS_DURATION=%v replays it):%s", seed, d, len(faults), seed, d, testenv.Plan(faults))

	span := 4 * d
	msgs := testenv.FleetMessages("girona", 60, span, seed, time.Now().Add(-span))
	pub := cl.Connect(t)
	var sent []string // the payloads in the order the broker acked them, a resend listed again
	published := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(published)
		sent = publishToBroker(mosq.Addr(), msgs, int(float64(len(msgs))/d.Seconds())+1)
	}()
	done := map[string]int{}
	var held [][]testenv.Stored // what each deleted incarnation of the results stream held
	for _, f := range faults {
		time.Sleep(time.Until(start.Add(f.At)))
		p, node := procs[rng.Intn(len(procs))], rng.Intn(3)
		switch f.Kind {
		case "kill":
			p.p.Kill()
			time.Sleep(f.Lasts)
			p.start(t, bin)
		case "kill-in-recovery":
			p.p.Kill()
			p.start(t, bin)
			time.Sleep(f.Lasts / 10)
			p.p.Kill()
			time.Sleep(f.Lasts)
			p.start(t, bin)
		case "pause":
			_ = p.p.Signal(syscall.SIGSTOP)
			time.Sleep(f.Lasts)
			_ = p.p.Signal(syscall.SIGCONT)
		case "node-down":
			cl.Kill(node)
			time.Sleep(f.Lasts)
			cl.Restart(node)
		case "broker-down":
			mosq.Stop()
			time.Sleep(f.Lasts)
			mosq.Restart()
		case "net-drop", "net-cut":
			port := testenv.PortOf(t, nodeURLs[node])
			// The test's own connections (the reads of the checks) are
			// left alone.
			except := testenv.ClientPorts(t, port)
			t.Logf("%v: node n%d, client port %d, but the test's own connections from ports %v", f, node+1, port, except)
			fault := nf.Drop
			if f.Kind == "net-cut" {
				fault = nf.Cut
			}
			restore := fault(port, except...)
			time.Sleep(f.Lasts)
			restore()
		case "results-stream-deleted":
			h := testenv.DeleteStream(t, cl.URL(), cfg.NATS.Stream)
			held = append(held, h)
			deleted := time.Now()
			if !testenv.WaitStream(t, cl.URL(), cfg.NATS.Stream, time.Minute) {
				t.Errorf("%v: no instance recreated the results stream within a minute", f)
			}
			t.Logf("%v: deleted holding %d results, recreated %v later", f, len(h), time.Since(deleted).Round(100*time.Millisecond))
			time.Sleep(time.Until(deleted.Add(f.Lasts)))
		}
		done[f.Kind]++
	}
	<-published
	t.Logf("faults survived: %v", done)
	stored := storedAsSent(t, cl.URL(), cfg.JetStream.Stream, sent)
	t.Logf("%d positions sent (%d published, the rest sent again after a broker restart), %d stored", len(sent), len(msgs), len(stored))
	last := lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, 2*time.Minute, "every partition owned, applied and recorded", func() bool { return procsSettled(last, procs...) })
	// The idle rule fires what is left once the fleet is silent: event
	// time then follows the clock.
	time.Sleep(cfg.Windows.IdleTimeout + cfg.Windows.Size + cfg.Windows.Gap + cfg.Windows.ToleratedDelay + 5*time.Second)
	last = lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, time.Minute, "the final silence applied and recorded", func() bool { return procsSettled(last, procs...) })
	for _, p := range procs {
		if resp, err := readyzClient.Get("http://" + p.listen + "/healthz"); err != nil {
			t.Errorf("instance %s /healthz after the schedule: %v", p.name, err)
		} else {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("instance %s /healthz after the schedule: %s, want 200", p.name, resp.Status)
			}
		}
	}
	for _, p := range procs {
		if err := p.p.Stop(30 * time.Second); err != nil {
			t.Errorf("instance %s after SIGTERM: %v", p.name, err)
		}
	}
	incs := equalsReplayIncarnations(t, cl.URL(), cfg, held)

	want := earnedNoSignals(cfg, msgs)
	got := map[string]bool{}
	for _, inc := range incs {
		for k := range inc {
			if strings.HasPrefix(k, "no_signal|") {
				got[k] = true
			}
		}
	}
	explained := 0
	for k := range got {
		if !want[k] {
			t.Errorf("%s: a no_signal the courier did not earn", k)
			if explained < 2 {
				explained++
				explainNoSignal(t, cl.URL(), cfg, k)
			}
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("%s: missing from the stream", k)
		}
	}
	t.Logf("%d no_signals, each earned", len(got))
}

// equalsReplayIncarnations is equalsReplay for a results stream the
// schedule may have deleted: held are the messages each deleted
// incarnation held (testenv.DeleteStream reads them after sealing the
// stream, so none was stored unseen), the stream now is the last
// incarnation. It returns every incarnation by key.
//
// What a deleted incarnation held is gone from the stream, and a result
// re-emitted after the stream was recreated (a successor re-deriving a
// fenced term's results, say) is no longer deduplicated against it: so the
// stream alone cannot equal the replay, and comparing only what was
// published after the re-creation would leave everything before it
// unchecked. The check is on the union of the incarnations instead
// (testenv.DiffIncarnations), as strict as equalsReplay (with no deletion
// it is the same check): every key of the replay is stored in some
// incarnation and no other key in any, the first copy of a key is the
// replay's first record, a later incarnation's copy is one of the
// replay's records of that key, and no key is stored twice within one
// incarnation.
func equalsReplayIncarnations(t *testing.T, url string, cfg config.Config, held [][]testenv.Stored) []map[string]string {
	t.Helper()
	want, variants := replayVariants(t, url, cfg)
	if len(want) == 0 {
		t.Fatal("no results: the test checks nothing")
	}
	var incs []map[string]string
	parts := market.BridgeConfig(cfg).Subject(bridge.KindZonePart)
	for i, h := range held {
		inc := map[string]string{}
		for _, m := range h {
			if m.Subject == parts {
				continue // the dead zones they make are results (published)
			}
			k := m.Header.Get(jetstream.MsgIDHeader)
			if _, dup := inc[k]; dup {
				t.Errorf("key %s stored twice in incarnation %d of the results stream", k, i+1)
			}
			inc[k] = string(m.Data)
		}
		incs = append(incs, inc)
	}
	incs = append(incs, published(t, url, cfg))
	if diffs := testenv.DiffIncarnations(incs, want, variants, "the per-partition replay"); len(diffs) > 0 {
		t.Errorf("%d differences, first ones:", len(diffs))
		for _, d := range diffs[:min(len(diffs), 10)] {
			t.Error(d)
		}
	}
	t.Logf("%d results, as the replay, over %d incarnations of the results stream (the last one: %d)", len(want), len(incs), len(incs[len(incs)-1]))
	return incs
}

// replayVariants is replay's run (helpers_test.go) keeping, besides the
// first record of each key (the one a stream keeps), every record emitted
// under each key: a late position sent twice gives two late records with
// one key, and a stream recreated between them keeps the second too.
func replayVariants(t testing.TB, url string, cfg config.Config) (first map[string]string, all map[string]map[string]bool) {
	t.Helper()
	first, all = map[string]string{}, map[string]map[string]bool{}
	zones := newZoneMerger(cfg.Market, cfg.DeadZones.Window.Milliseconds(), cfg.JetStream.Partitions, cfg.DeadZones.MaxCells)
	for n := range cfg.JetStream.Partitions {
		ecfg := EngineConfig(cfg, n)
		ecfg.Shards = 1
		var mu sync.Mutex
		e := engine.New(ecfg, zonesApart(func(rs []result.Record) {
			mu.Lock()
			defer mu.Unlock()
			for i := range rs {
				k, v := rs[i].Key(), string(rs[i].AppendJSON(nil))
				if first[k] == "" {
					first[k] = v
				}
				if all[k] == nil {
					all[k] = map[string]bool{}
				}
				all[k][v] = true
			}
		}, zones))
		applyStored(t, url, cfg, n, e)
		e.Stop()
	}
	return first, all
}

// earnedNoSignals are the no_signal keys of a run over each partition's
// positions in the order they were published (the broker's order, which
// the relay keeps: storedAsSent checks it), without a clock: silence in
// event time only. A no_signal the clock adds (the idle rule taking a
// fault for silence) is not earned, nor is one a reordering would make.
func earnedNoSignals(cfg config.Config, msgs []testenv.Message) map[string]bool {
	earned := map[string]bool{}
	for n := range cfg.JetStream.Partitions {
		ecfg := EngineConfig(cfg, n)
		ecfg.Topic, ecfg.Shards, ecfg.DeafGap = "", 1, 0
		e := engine.New(ecfg, func(rs []result.Record) {
			for i := range rs {
				if rs[i].Type == result.NoSignal {
					earned[rs[i].Key()] = true
				}
			}
		})
		for _, m := range msgs {
			courier := m.Topic[strings.LastIndexByte(m.Topic, '/')+1:]
			if PartitionOf(courier, cfg.JetStream.Partitions) == n {
				e.Push(&engine.Input{Payload: m.Payload})
			}
		}
		e.EndOfInput()
	}
	return earned
}

// publishToBroker publishes msgs to the MQTT broker at addr as the
// market's phones do, QoS 1, perSecond at most, each kept until the
// broker acks it: a publish that fails (the broker stopped) is sent again
// on a new connection, so it may reach the broker twice (its ack lost).
// It returns the payloads in the order sent, a resend listed again.
func publishToBroker(addr string, msgs []testenv.Message, perSecond int) []string {
	var pub *testenv.Publisher
	defer func() {
		if pub != nil {
			pub.Close()
		}
	}()
	var sent []string
	start := time.Now()
	for i, m := range msgs {
		for {
			if pub == nil {
				var err error
				if pub, err = testenv.DialPublisher(addr, "chaos-phones"); err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
			}
			sent = append(sent, string(m.Payload))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := pub.Publish(ctx, m.Topic, m.Payload)
			cancel()
			if err == nil {
				break
			}
			pub.Close()
			pub = nil
		}
		if wait := time.Duration(i+1)*time.Second/time.Duration(perSecond) - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
	}
	return sent
}

// explainNoSignal logs, for an unearned no_signal, the courier's
// positions around its last one in its partition's stream order: stream
// sequence, stream time, event time, and the ticks and wake-ups stored
// since the courier's previous position.
func explainNoSignal(t *testing.T, url string, cfg config.Config, key string) {
	f := strings.Split(key, "|") // no_signal|MARKET|COURIER|LAST_SEEN
	if len(f) != 4 {
		return
	}
	courier := f[2]
	n := PartitionOf(courier, cfg.JetStream.Partitions)
	var lines []string
	from, ticks := -1, 0
	for _, m := range testenv.ReadStored(t, url, cfg.JetStream.Stream, cfg.JetStream.PartitionSubject(n)) {
		switch kindOf(m.Subject, m.Header) {
		case msgTick, msgWake:
			ticks++
			continue
		}
		c, ts, _, _, ok := fleetPosition(natsToMQTT(m.Subject), m.Data)
		if !ok || c != courier {
			continue
		}
		if strconv.FormatInt(ts, 10) == f[3] && from < 0 {
			from = len(lines)
		}
		lines = append(lines, fmt.Sprintf("seq %d stored %s event %s (%d ticks before)", m.Seq, m.Time.Format("15:04:05.000"), time.UnixMilli(ts).UTC().Format("15:04:05.000"), ticks))
		ticks = 0
	}
	if from < 0 {
		t.Logf("%s: its last position is not in partition %d's stream", key, n)
		return
	}
	lo, hi := max(0, from-3), min(len(lines), from+6)
	t.Logf("%s: partition %d, the courier's positions around it:\n\t%s", key, n, strings.Join(lines[lo:hi], "\n\t"))
}
