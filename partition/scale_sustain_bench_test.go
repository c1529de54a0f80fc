package partition

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// BenchmarkScaleOutSustained is the highest rate a deployment keeps up
// with on this machine. The fleet publishes at stepped rates (scaleSteps,
// each for scaleStep: a fleet of rate × 5 couriers each sending every
// 5 s, the same couriers continuing from step to step, event time too,
// every minute of it holding one firing of every courier's window). A
// step is kept up when the instances have received
// (edgeproc_positions_received_total) every distinct position published
// in it within scaleKeepUp of the broker's last ack, and the publisher
// reached 95 % of the rate. It stops at the first step not kept up and
// reports the highest kept up; per step it logs the rates, how far
// behind the instances were at most (sampled each second), and the CPU
// of each process in % of one core: each edgeproc (the relay holder
// marked), nats-server (all nodes), Mosquitto, this process (the
// publisher). Cases: the single `source: mqtt` process, 3 instances of
// `source: jetstream` (ingest mqtt) on one node (R1) and on the 3-node
// cluster (R3). Everything shares this machine's cores. Run with
// -benchtime=1x, one case a command (the package's tests stop after 12
// minutes, testenv.Main):
//
//	go test -run '^$' -bench 'ScaleOutSustained/mqtt' -benchtime 1x -timeout 30m ./partition
//	go test -run '^$' -bench 'ScaleOutSustained/jetstream-3$' -benchtime 1x -timeout 30m ./partition
//	go test -run '^$' -bench 'ScaleOutSustained/jetstream-3-r3' -benchtime 1x -timeout 30m ./partition
//
// With -scale.cpu each edgeproc process may use that share of a core and
// no more (testenv.LimitCPU), as if each ran on a machine of its own of
// that size, while nats-server, Mosquitto and the publisher share the
// rest; each step logs how long each instance was held back by its
// quota ("throttled", in % of the step). That compares what one machine
// takes with what three take, on one machine:
//
//	go test -run '^$' -bench 'ScaleOutSustained/(mqtt|jetstream-3)$' -benchtime 1x -timeout 40m ./partition -scale.cpu 0.25 -scale.steps 10000,15000,20000,25000,30000,35000,40000
//
// Between steps the next fleet is generated (up to about 15 s at
// 60 000/s): a pause well below windows.idle_timeout (30 s), so the
// watermark stays with the fleet's event time (each step logs the
// positions found late, which a pause past it would make many).
func BenchmarkScaleOutSustained(b *testing.B) {
	bin := testenv.BuildEdgeproc(b)
	natsBin := buildNATSServer(b)
	for _, c := range []struct {
		scaleCase
		steps string // the rates unless -scale.steps
	}{
		{scaleCase{"mqtt", 0, 1, 1, ""}, "30000,40000,50000,60000"},
		{scaleCase{"jetstream-3", 3, 1, 1, "mqtt"}, "30000,40000,50000,60000"},
		// Three nodes storing every batch share the machine too.
		{scaleCase{"jetstream-3-r3", 3, 3, 3, "mqtt"}, "12000,18000,24000,30000,36000"},
	} {
		b.Run(c.name, func(b *testing.B) {
			if *scaleSteps != "" {
				c.steps = *scaleSteps
			}
			steps, err := parseSteps(c.steps)
			if err != nil {
				b.Fatal(err)
			}
			for range b.N {
				sustainRun(b, bin, natsBin, c.scaleCase, steps)
			}
		})
	}
}

var (
	scaleSteps  = flag.String("scale.steps", "", "BenchmarkScaleOutSustained: the offered rates, positions/s, comma-separated (default: each case's own)")
	scaleStep   = flag.Duration("scale.step", time.Minute, "BenchmarkScaleOutSustained: how long each rate is offered, in whole minutes")
	scaleKeepUp = flag.Duration("scale.keepup", 2*time.Second, "BenchmarkScaleOutSustained: a step is kept up when its positions are all received within this of the broker's last ack")
	scaleCores  = flag.Float64("scale.cpu", 0, "the scale-out benchmarks: the CPU each edgeproc process may use, in cores (a cgroup quota of its own, as if each ran on a machine of that size; needs root); 0: no limit")
)

func parseSteps(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-scale.steps: %q is not a rate", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func sustainRun(b *testing.B, bin, natsBin string, c scaleCase, steps []int) {
	b.StopTimer()
	// Each step's event time follows the one before, whole minutes long
	// from 5 s before a minute (fleetStart): each minute of a step holds
	// one firing of every courier's window.
	span := max(time.Minute, scaleStep.Round(time.Minute))
	from := fleetStart()
	couriers := 0
	for _, r := range steps {
		couriers = max(couriers, r*5)
	}
	env := startScale(b, bin, natsBin, c, from, couriers)
	defer env.stop()
	best := 0
	for k, rate := range steps {
		couriers := rate * 5
		msgs := scaleFleet(couriers, span, from.Add(time.Duration(k)*span))
		want := distinctCount(msgs)
		distinctShare := float64(want) / float64(len(msgs))
		base := receivedPositions(env.listens)
		late0 := sumMetric(env.listens, "edgeproc_positions_late_total{")
		cpu0 := env.cpu(b)
		thr0 := env.throttled(b)
		var acked atomic.Int64
		start := time.Now()
		b.StartTimer()
		// The backlog (acked by the broker, not yet received) each second.
		stopSampling := make(chan struct{})
		sampled := make(chan int64)
		go func() {
			var most int64
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stopSampling:
					sampled <- most
					return
				case <-tick.C:
					if got := receivedPositions(env.listens); got > 0 {
						// Acked counts resends the relay may drop.
						most = max(most, int64(float64(acked.Load())*distinctShare)-int64(got-base))
					}
				}
			}
		}()
		took, err := publishMQTT(env.pubAddrs, msgs, span, &acked)
		close(stopSampling)
		mostBehind := <-sampled
		if err != nil {
			b.Fatal(err)
		}
		pubRate := float64(len(msgs)) / took.Seconds()
		atEnd := receivedPositions(env.listens) - base
		var got uint64
		var catchUp time.Duration
		for end := time.Now(); ; time.Sleep(50 * time.Millisecond) {
			got = receivedPositions(env.listens) - base
			catchUp = time.Since(end)
			if got >= want || catchUp > *scaleKeepUp {
				break
			}
		}
		b.StopTimer()
		wall := time.Since(start)
		d := env.cpu(b).sub(cpu0)
		thr := env.throttled(b)
		late := sumMetric(env.listens, "edgeproc_positions_late_total{") - late0
		pubOK := pubRate >= 0.95*float64(len(msgs))/span.Seconds()
		kept := got >= want && pubOK
		pct := func(x time.Duration) string { return fmt.Sprintf("%.0f%%", 100*x.Seconds()/wall.Seconds()) }
		var inst []string
		relay := relayHolder(env.listens)
		for i, x := range d.inst {
			s := pct(x)
			if i == relay {
				s += " (relay)"
			}
			if thr != nil {
				s += fmt.Sprintf(" throttled %s", pct(thr[i]-thr0[i]))
			}
			inst = append(inst, s)
		}
		per := func(x time.Duration) float64 { return float64(x.Microseconds()) / float64(len(msgs)) }
		verdict := "kept up"
		switch {
		case !pubOK:
			verdict = "publisher held back (below 95 % of the rate)"
		case !kept:
			verdict = fmt.Sprintf("NOT kept up: %d of %d received %v after the last ack", got, want, *scaleKeepUp)
		}
		b.Logf("%s %d/s (%d couriers): published %.0f/s, most behind %.1f s, received %.1f%% by the last ack, all %v after it; CPU %% of a core: edgeproc %s [%s], nats-server %s, mosquitto %s, publisher %s; µs/pos edgeproc %.1f nats %.1f mosquitto %.1f; %.0f late; load %s: %s",
			c.name, rate, couriers, pubRate, float64(mostBehind)/pubRate, 100*float64(atEnd)/float64(want), catchUp.Round(10*time.Millisecond),
			pct(d.edgeproc()), strings.Join(inst, ", "), pct(d.nats), pct(d.mosq), pct(d.self),
			per(d.edgeproc()), per(d.nats), per(d.mosq), late, testenv.LoadAvg(), verdict)
		if !kept {
			break
		}
		best = rate
		// Let stragglers (redelivered copies) in before the next base.
		time.Sleep(time.Second)
	}
	b.ReportMetric(float64(best), "sustained-pos/s")
}
