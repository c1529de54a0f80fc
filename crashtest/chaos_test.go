package crashtest

import (
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// chaosDuration is how long TestChaos_SeededSchedule publishes and draws
// faults: CHAOS_DURATION (a Go duration), default 2 minutes.
func chaosDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("CHAOS_DURATION")); err == nil && d > 0 {
		return d
	}
	return 2 * time.Minute
}

// chaosSeed is CHAOS_SEED, or one drawn from the clock (the test prints
// it: the same seed replays the same schedule).
func chaosSeed() int64 {
	if s, err := strconv.ParseInt(os.Getenv("CHAOS_SEED"), 10, 64); err == nil {
		return s
	}
	return time.Now().UnixNano() % 1_000_000
}

// fault is one drawn fault: its kind, when it starts (from the start of
// publishing) and how long it lasts.
type fault struct {
	kind  string
	at    time.Duration
	lasts time.Duration
}

func (f fault) String() string {
	return fmt.Sprintf("%v %s for %v", f.at.Round(100*time.Millisecond), f.kind, f.lasts.Round(100*time.Millisecond))
}

// faultKinds are the faults the schedule draws from: edgeproc killed (at
// a random moment, again while it recovers, right after a checkpoint),
// paused, the broker and NATS restarted, the state disk full. Not drawn:
// kill -9 of Mosquitto (it loses what it acked and had not saved yet, so
// there is nothing edgeproc could be held to), network faults (nftables)
// and the results stream deleted (what it held is gone: the comparison
// would have to know what).
var faultKinds = []string{"kill", "kill-in-recovery", "kill-after-checkpoint", "pause", "broker-restart", "nats-restart", "disk-full"}

// schedule draws faults at random times over d, one at a time: each
// starts 1-5 s after the previous one ended. A kill keeps edgeproc down
// up to 3 s; the others last 1-10 s, one in four up to longest (longer
// than gap + tolerated_delay and the idle timeout, so that a fault taken
// for silence would show).
func schedule(rng *rand.Rand, d, longest time.Duration) []fault {
	var out []fault
	for at := time.Duration(2+rng.Intn(4)) * time.Second; at < d; {
		f := fault{kind: faultKinds[rng.Intn(len(faultKinds))], at: at}
		switch {
		case strings.HasPrefix(f.kind, "kill"):
			f.lasts = time.Duration(rng.Int63n(int64(3 * time.Second)))
		case rng.Intn(4) == 0:
			f.lasts = longest/2 + time.Duration(rng.Int63n(int64(longest/2)))
		default:
			f.lasts = time.Second + time.Duration(rng.Int63n(int64(9*time.Second)))
		}
		out = append(out, f)
		at += f.lasts + time.Duration(1+rng.Intn(5))*time.Second
	}
	return out
}

// TestChaos_SeededSchedule publishes a fleet to Mosquitto for
// CHAOS_DURATION while faults drawn from CHAOS_SEED's schedule hit
// edgeproc, the broker, NATS and the state disk, one after another. At the
// end edgeproc must be ready and its stream must hold exactly the results
// of one uninterrupted engine run over the same positions: nothing lost
// (every valid position counts in a window), nothing twice, no
// no_signal for a courier that kept publishing (it would be a key the run
// does not have). `make chaos SEED=… DURATION=10m` runs a long one.
func TestChaos_SeededSchedule(t *testing.T) {
	seed, d := chaosSeed(), chaosDuration()
	rng := rand.New(rand.NewSource(seed))
	bin := testenv.BuildEdgeproc(t)
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	disk := testenv.Tmpfs(t, "256m")
	confPath, cfg := mustConfig(t, disk, mosq.URL(), ns.URL())
	longest := cfg.Windows.IdleTimeout + cfg.Windows.Gap + cfg.Windows.ToleratedDelay
	faults := schedule(rng, d, longest)
	var plan strings.Builder
	for _, f := range faults {
		fmt.Fprintf(&plan, "\n  %v", f)
	}
	t.Logf("chaos seed %d, %v, %d faults (CHAOS_SEED=%d CHAOS_DURATION=%v replays it):%s", seed, d, len(faults), seed, d, plan.String())

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
		time.Sleep(time.Until(start.Add(f.at)))
		select {
		case err := <-pubDone:
			t.Fatalf("publishing ended early: %v", err)
		default:
		}
		inject(t, f, sup, mosq, ns, disk)
		done[f.kind]++
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
func inject(t *testing.T, f fault, sup *supervisor, mosq *testenv.Mosquitto, ns *testenv.NATS, disk string) {
	t.Helper()
	switch f.kind {
	case "kill":
		sup.kill()
		time.Sleep(f.lasts)
		sup.start()
	case "kill-in-recovery":
		sup.kill()
		sup.start()
		time.Sleep(f.lasts / 10) // replaying its log, connecting
		sup.kill()
		time.Sleep(f.lasts)
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
		time.Sleep(f.lasts)
		sup.start()
	case "pause":
		_ = sup.cur.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(f.lasts)
		_ = sup.cur.cmd.Process.Signal(syscall.SIGCONT)
	case "broker-restart":
		mosq.Stop()
		time.Sleep(f.lasts)
		mosq.Restart()
	case "nats-restart":
		ns.Shutdown()
		time.Sleep(f.lasts)
		ns.Restart()
	case "disk-full":
		fill(t, disk)
		time.Sleep(f.lasts)
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
