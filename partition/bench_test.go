package partition

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/testenv"
)

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backlog starts a NATS node with the gateway's mapping, has an instance
// set up the market's streams, and stores a city fleet (2000 couriers, one
// position every ~5 s each, 4 minutes) in the partitions; it returns the
// node, the market, the messages and each partition's last sequence.
func backlog(b *testing.B, partitions int) (*testenv.Cluster, config.Config, []testenv.Message, []uint64) {
	b.Helper()
	ns := testenv.StartNATSWithMappings(b, mapping(partitions))
	cfg := testConfig(b, ns.URL(), partitions)
	// The stream first (an instance creates it; this one only sets up).
	setup := startInstance(b, cfg, ns.Connect(b), "setup", nil)
	testenv.WaitFor(b, 30*time.Second, "set-up", setup.r.Ready)
	setup.Stop()
	msgs := testenv.FleetMessages("girona", 2000, 4*time.Minute, 11, time.Now())
	pub := ns.Connect(b)
	publishFleet(b, pub, msgs, 1_000_000, nil)
	return ns, cfg, msgs, lastSeqs(b, pub, cfg)
}

// BenchmarkInstances: a backlog of a city fleet (2000 couriers, one
// position every ~5 s each) stored in six partitions of one embedded NATS
// node, then drained by 1, 2 or 3 instances of the market in this process
// (max_owned ceil(6/k)). It reports positions/s from the first instance's
// start to the last partition applied, and CPU per position of the whole
// process (instances and NATS server together). Run with -benchtime=1x.
func BenchmarkInstances(b *testing.B) {
	const partitions = 6
	for _, k := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("instances=%d", k), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ns, cfg, msgs, last := backlog(b, partitions)
				cfg.State.CheckpointInterval = 5 * time.Second
				if k > 1 {
					cfg.JetStream.MaxOwned = (partitions + k - 1) / k
				}

				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime()
				var ins []*instance
				for i := range k {
					ins = append(ins, startInstance(b, cfg, ns.Connect(b), fmt.Sprintf("i%d", i), nil))
				}
				var owned time.Time // every partition owned: the drain runs at full width
				var processedThen uint64
				testenv.WaitFor(b, 5*time.Minute, "every partition applied", func() bool {
					if owned.IsZero() && allOwned(ins, partitions) {
						owned = time.Now()
						processedThen = processed(ins)
					}
					return caughtUp(last, statuses(ins...)...)
				})
				end := time.Now()
				elapsed, cpu := end.Sub(start), cpuTime()-cpu0
				b.StopTimer()
				for _, in := range ins {
					in.Stop()
				}
				b.ReportMetric(float64(len(msgs))/elapsed.Seconds(), "positions/s")
				if d := end.Sub(owned).Seconds(); d > 0 && processedThen < uint64(len(msgs)) {
					b.ReportMetric(float64(uint64(len(msgs))-processedThen)/d, "owned-positions/s")
				}
				b.ReportMetric(float64(cpu.Microseconds())/float64(len(msgs)), "cpu-µs/position")
			}
		})
	}
}

// BenchmarkTakeover: two instances, two partitions, a fleet published at
// 2000 positions/s with event time running 20 times faster than the clock
// (so that windows fire every few seconds); the owner of partition 0 is
// killed (cut off NATS) and the benchmark reports the time from the kill
// to the survivor's claim and to its first published result, with pin_ttl
// 2s. Run with -benchtime=1x.
func BenchmarkTakeover(b *testing.B) {
	for range b.N {
		b.StopTimer()
		ns := testenv.StartNATSWithMappings(b, mapping(2))
		cfg := testConfig(b, ns.URL(), 2)
		ins := []*instance{
			startInstance(b, cfg, ns.Connect(b), "a", nil),
			startInstance(b, cfg, ns.Connect(b), "b", nil),
		}
		for _, in := range ins {
			testenv.WaitFor(b, 30*time.Second, "ready", in.r.Ready)
		}
		msgs := testenv.FleetMessages("girona", 200, 20*time.Minute, 13, time.Now())
		pub := ns.Connect(b)
		var killed time.Time
		var victim, survivor *instance
		publishFleet(b, pub, msgs, 2000, func(done int) {
			if victim == nil && done >= len(msgs)/2 {
				victim, survivor = ins[0], ins[1]
				if !victim.r.Status()[0].Owned {
					victim, survivor = survivor, victim
				}
				killed = time.Now()
				victim.Kill()
			}
		})
		testenv.WaitFor(b, 60*time.Second, "survivor's first result on partition 0", func() bool {
			s := survivor.r.Status()[0]
			return s.Owned && !s.FirstResultAt.IsZero() && s.AcquiredAt.After(killed)
		})
		s := survivor.r.Status()[0]
		b.ReportMetric(s.AcquiredAt.Sub(killed).Seconds(), "s-to-claim")
		b.ReportMetric(s.FirstResultAt.Sub(killed).Seconds(), "s-to-first-result")
		survivor.Stop()
	}
}

func allOwned(ins []*instance, partitions int) bool {
	n := 0
	for _, in := range ins {
		n += ownedBy(in)
	}
	return n == partitions
}

// processed is the messages the instances applied so far.
func processed(ins []*instance) uint64 {
	var n uint64
	for _, in := range ins {
		for _, s := range in.r.Status() {
			n += s.Applied
		}
	}
	return n
}

// BenchmarkProcesses is BenchmarkInstances with 1, 2 or 3 `edgeproc run`
// processes: it reports positions/s from their start to the last
// partition applied, the processes' CPU (utime + stime from /proc, start-up
// included) per position, and this process's (the NATS server's, with the
// polling of /readyz) per position. Run with -benchtime=1x.
func BenchmarkProcesses(b *testing.B) {
	bin := testenv.BuildEdgeproc(b)
	const partitions = 6
	for _, k := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("processes=%d", k), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ns, _, msgs, last := backlog(b, partitions)

				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime()
				names := []string{"a", "b", "c"}[:k]
				procs := startProcs(b, bin, ns.URL(), partitions, (partitions+k-1)/k, names...)
				testenv.WaitFor(b, 5*time.Minute, "every partition applied", func() bool { return procsCaughtUp(last, procs...) })
				elapsed, natsCPU := time.Since(start), cpuTime()-cpu0
				b.StopTimer()
				var cpu time.Duration
				for _, p := range procs {
					c, err := p.p.CPU()
					if err != nil {
						b.Fatal(err)
					}
					cpu += c
					reportCPU(b, p)
					if err := p.p.Stop(30 * time.Second); err != nil {
						b.Errorf("%s: %v", p.name, err)
					}
				}
				b.ReportMetric(float64(len(msgs))/elapsed.Seconds(), "positions/s")
				b.ReportMetric(float64(cpu.Microseconds())/float64(len(msgs)), "edgeproc-cpu-µs/position")
				b.ReportMetric(float64(natsCPU.Microseconds())/float64(len(msgs)), "nats-cpu-µs/position")
			}
		})
	}
}
