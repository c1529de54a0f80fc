package partition

import (
	"math/rand"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/result"
)

// chaosKinds are the faults of the partitioned source's schedule: an
// instance killed (at a random moment, or again while it takes its
// partitions back), paused (past the pin TTL, it is fenced), a NATS node
// down. One node at a time: the streams are R3.
var chaosKinds = []string{"kill", "kill-in-recovery", "pause", "node-down"}

// chaosWindows are the market's windows: event time runs 4 times faster
// than the clock, the idle rule on, so that a fault taken for silence
// would give no_signals.
const chaosWindows = "  size: 20s\n  slide: 10s\n  gap: 15s\n  tolerated_delay: 2s\n  idle_timeout: 10s\n"

// TestChaos_PartitionedSchedule is crashtest's seeded fault schedule for
// the partitioned source: three `edgeproc run` on a three-node cluster,
// four partitions, a fleet published for CHAOS_DURATION while faults drawn
// from CHAOS_SEED hit the instances and the nodes. At the end every
// partition is owned and recorded, the results stream holds once per key
// exactly the replay of each partition's stream, and its no_signals are
// the ones the couriers earned: those of a run over each partition's
// positions alone, without any clock (a fault taken for silence would add
// some).
func TestChaos_PartitionedSchedule(t *testing.T) {
	seed, d := testenv.ChaosSeed(), testenv.ChaosDuration()
	rng := rand.New(rand.NewSource(seed))
	bin := testenv.BuildEdgeproc(t)
	const partitions = 4
	cl := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3, Mappings: mapping(partitions)})
	cfg := testConfig(t, cl.URL(), partitions)
	cfg.Windows.Size, cfg.Windows.Slide, cfg.Windows.Gap, cfg.Windows.ToleratedDelay, cfg.Windows.IdleTimeout =
		20*time.Second, 10*time.Second, 15*time.Second, 2*time.Second, 10*time.Second
	procs := startProcsWindows(t, bin, cl.URL(), partitions, 0, chaosWindows, "a", "b", "c")
	for _, p := range procs {
		testenv.WaitFor(t, 90*time.Second, p.name+" ready", p.ready)
	}
	longest := cfg.Windows.IdleTimeout + cfg.Windows.Gap + cfg.Windows.ToleratedDelay
	faults := testenv.Schedule(rng, d, chaosKinds, longest)
	t.Logf("chaos seed %d, %v, %d faults (CHAOS_SEED=%d CHAOS_DURATION=%v replays it):%s", seed, d, len(faults), seed, d, testenv.Plan(faults))

	span := 4 * d
	msgs := testenv.FleetMessages("girona", 60, span, seed, time.Now().Add(-span))
	pub := cl.Connect(t)
	sent := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(sent)
		publishFleet(t, pub, msgs, int(float64(len(msgs))/d.Seconds())+1, nil)
	}()
	done := map[string]int{}
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
		}
		done[f.Kind]++
	}
	<-sent
	t.Logf("faults survived: %v", done)
	last := lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, 2*time.Minute, "every partition owned, applied and recorded", func() bool { return procsSettled(last, procs...) })
	// The idle rule fires what is left once the fleet is silent: event
	// time then follows the clock.
	time.Sleep(cfg.Windows.IdleTimeout + cfg.Windows.Size + cfg.Windows.Gap + cfg.Windows.ToleratedDelay + 5*time.Second)
	last = lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, time.Minute, "the final silence applied and recorded", func() bool { return procsSettled(last, procs...) })
	for _, p := range procs {
		if err := p.p.Stop(30 * time.Second); err != nil {
			t.Errorf("instance %s after SIGTERM: %v", p.name, err)
		}
	}
	t.Logf("%d results, as the replay", equalsReplay(t, cl.URL(), cfg))

	want := earnedNoSignals(cfg, msgs)
	got := map[string]bool{}
	for k := range published(t, cl.URL(), cfg) {
		if strings.HasPrefix(k, "no_signal|") {
			got[k] = true
			if !want[k] {
				t.Errorf("%s: a no_signal the courier did not earn", k)
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

// earnedNoSignals are the no_signal keys of a run over each partition's
// positions in publish order, without a clock: silence in event time only.
func earnedNoSignals(cfg config.Config, msgs []testenv.Message) map[string]bool {
	want := map[string]bool{}
	for n := range cfg.JetStream.Partitions {
		ecfg := EngineConfig(cfg, n)
		ecfg.Topic, ecfg.Shards, ecfg.DeafGap = "", 1, 0
		e := engine.New(ecfg, func(rs []result.Record) {
			for i := range rs {
				if rs[i].Type == result.NoSignal {
					want[rs[i].Key()] = true
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
	return want
}
