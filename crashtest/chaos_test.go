package crashtest

import (
	"errors"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// faultKinds are the faults the schedule draws from: edgeproc killed (at
// a random moment, again while it recovers, right after a checkpoint),
// paused, the broker and NATS restarted, the state disk full. Not drawn:
// kill -9 of Mosquitto (it loses what it acked and had not saved yet, so
// there is nothing edgeproc could be held to), network faults (nftables)
// and the results stream deleted (what it held is gone: the comparison
// would have to know what).
var faultKinds = []string{"kill", "kill-in-recovery", "kill-after-checkpoint", "pause", "broker-restart", "nats-restart", "disk-full"}

// TestChaos_SeededSchedule publishes a fleet to Mosquitto for
// CHAOS_DURATION while faults drawn from CHAOS_SEED's schedule hit
// edgeproc, the broker, NATS and the state disk, one after another. At the
// end edgeproc must be ready and its stream must hold exactly the results
// of one uninterrupted engine run over the same positions: nothing lost
// (every valid position counts in a window), nothing twice, no
// no_signal for a courier that kept publishing (it would be a key the run
// does not have). `make chaos SEED=… DURATION=10m` runs a long one.
func TestChaos_SeededSchedule(t *testing.T) {
	seed, d := testenv.ChaosSeed(), testenv.ChaosDuration()
	rng := rand.New(rand.NewSource(seed))
	bin := testenv.BuildEdgeproc(t)
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	disk := testenv.Tmpfs(t, "256m")
	confPath, cfg := mustConfig(t, disk, mosq.URL(), ns.URL())
	longest := cfg.Windows.IdleTimeout + cfg.Windows.Gap + cfg.Windows.ToleratedDelay
	faults := testenv.Schedule(rng, d, faultKinds, longest)
	t.Logf("chaos seed %d, %v, %d faults (CHAOS_SEED=%d CHAOS_DURATION=%v replays it):%s", seed, d, len(faults), seed, d, testenv.Plan(faults))

	// Event time runs 4 times faster than the clock and ends at the
	// start: every position arrives after its timestamp.
	span := 4 * d
	msgs := testenv.FleetMessages(market, couriers, span, seed, time.Now().Add(-span))
	wantByKey, wantRejected := expected(t, cfg, msgs)
	t.Logf("fleet: %d messages; reference run: %d keyed results, %d rejected inputs", len(msgs), len(wantByKey), len(wantRejected))

	sup := supervise(t, bin, confPath, cfg.HTTP.Listen)
	pubDone := make(chan error, 1)
	start := time.Now()
	go publishFleet(mosq.Addr(), msgs, d, pubDone)

	done := map[string]int{}
	for _, f := range faults {
		time.Sleep(time.Until(start.Add(f.At)))
		select {
		case err := <-pubDone:
			t.Fatalf("publishing ended early: %v", err)
		default:
		}
		inject(t, f, sup, mosq, ns, disk)
		done[f.Kind]++
	}
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	t.Logf("faults survived: %v; %d edgeproc runs", done, sup.runs)
	waitReady(t, cfg.HTTP.Listen, 60*time.Second)
	if resp, err := http.Get("http://" + cfg.HTTP.Listen + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz after the schedule: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	settleAndCompare(t, sup, ns.URL(), cfg, wantByKey, wantRejected)
}

// inject applies one fault and returns once it is over.
func inject(t *testing.T, f testenv.Fault, sup *supervisor, mosq *testenv.Mosquitto, ns *testenv.NATS, disk string) {
	t.Helper()
	switch f.Kind {
	case "kill":
		sup.kill()
		time.Sleep(f.Lasts)
		sup.start()
	case "kill-in-recovery":
		sup.kill()
		sup.start()
		time.Sleep(f.Lasts / 10) // replaying its log, connecting
		sup.kill()
		time.Sleep(f.Lasts)
		sup.start()
	case "kill-after-checkpoint":
		select {
		case <-sup.ckpt: // a stale signal
		default:
		}
		select {
		case <-sup.ckpt:
		case <-time.After(10 * time.Second):
			t.Errorf("no checkpoint written within 10 s")
		}
		sup.kill()
		time.Sleep(f.Lasts)
		sup.start()
	case "pause":
		_ = sup.cur.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(f.Lasts)
		_ = sup.cur.cmd.Process.Signal(syscall.SIGCONT)
	case "broker-restart":
		mosq.Stop()
		time.Sleep(f.Lasts)
		mosq.Restart()
	case "nats-restart":
		ns.Shutdown()
		time.Sleep(f.Lasts)
		ns.Restart()
	case "disk-full":
		fill(t, disk)
		time.Sleep(f.Lasts)
		if err := os.Remove(filepath.Join(disk, "filler")); err != nil {
			t.Errorf("free the disk: %v", err)
		}
	}
}

// fill writes a file on disk until it is full.
func fill(t *testing.T, disk string) {
	t.Helper()
	f, err := os.Create(filepath.Join(disk, "filler"))
	if err != nil {
		t.Errorf("fill the disk: %v", err)
		return
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("fill the disk: %v", err)
			}
			return
		}
	}
}
