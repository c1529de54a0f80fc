package crashtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/oracle"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/result"
)

// faultKinds are the faults the schedule draws from: edgeproc killed (at
// a random moment, again while it recovers, right after a checkpoint),
// paused, the broker and NATS restarted, the state disk full; network
// faults between edgeproc and Mosquitto (net-drop, net-cut) or NATS
// (net-drop-nats, net-cut-nats): packets to and from the server's port
// silently dropped for 3-15 s (a half-open connection neither side
// notices at once), or every connection reset and new ones refused for
// 0.5-3 s, by nftables rules on that port only, but for the test's own
// connections (the fleet's publisher, the phones: their path to the
// broker is not the one at fault, and cutting it would be a true silence
// of the fleet, no_signals earned); and the results stream deleted
// (edgeproc recreates it). Not drawn: kill -9 of Mosquitto (it loses what
// it acked and had not saved yet, so there is nothing edgeproc could be
// held to).
var faultKinds = []string{"kill", "kill-in-recovery", "kill-after-checkpoint", "pause", "broker-restart", "nats-restart", "disk-full",
	"net-drop", "net-cut", "net-drop-nats", "net-cut-nats", "results-stream-deleted"}

// TestChaos_SeededSchedule publishes a fleet to Mosquitto for
// CHAOS_DURATION while faults drawn from CHAOS_SEED's schedule hit
// edgeproc, the broker, NATS and the state disk, one after another. At the
// end edgeproc must be ready and its stream must hold exactly the results
// of one uninterrupted engine run over the same positions: nothing lost
// (every valid position counts in a window), nothing twice, no
// no_signal for a courier that kept publishing (it would be a key the run
// does not have); and it must exit cleanly on SIGTERM. When the schedule
// deleted the results stream, "its stream" is the union of what each
// incarnation of it held (settleAndCompareIncarnations says how it is
// checked).
// `make chaos SEED=… DURATION=10m` runs a long one.
func TestChaos_SeededSchedule(t *testing.T) {
	seed, d := testenv.ChaosSeed(), testenv.ChaosDuration()
	rng := rand.New(rand.NewSource(seed))
	bin := testenv.BuildEdgeproc(t)
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	disk := testenv.Tmpfs(t, "256m")
	nf := testenv.StartNetFaults(t)
	confPath, cfg := mustConfig(t, disk, mosq.URL(), ns.URL())
	longest := cfg.Windows.IdleTimeout + cfg.Windows.Gap + cfg.Windows.ToleratedDelay
	faults := testenv.Schedule(rng, d, faultKinds, longest)
	t.Logf("chaos seed %d, %v, %d faults (CHAOS_SEED=%d CHAOS_DURATION=%v replays it):%s", seed, d, len(faults), seed, d, testenv.Plan(faults))

	// Event time runs 4 times faster than the clock and ends at the
	// start: every position arrives after its timestamp.
	span := 4 * d
	msgs := testenv.FleetMessages(marketName, couriers, span, seed, time.Now().Add(-span))
	wantByKey, wantRejected := expected(t, cfg, msgs)
	variants := expectedVariants(t, cfg, msgs)
	wantLake := expectedLake(t, cfg, msgs, false)
	t.Logf("fleet: %d messages; reference run: %d keyed results, %d rejected inputs", len(msgs), len(wantByKey), len(wantRejected))

	sup := supervise(t, bin, confPath, cfg.HTTP.Listen)
	pubDone := make(chan error, 1)
	start := time.Now()
	go publishFleet(mosq.Addr(), msgs, d, pubDone)

	c := &chaos{t: t, sup: sup, mosq: mosq, ns: ns, disk: disk, nf: nf, stream: cfg.NATS.Stream}
	done := map[string]int{}
	for _, f := range faults {
		time.Sleep(time.Until(start.Add(f.At)))
		select {
		case err := <-pubDone:
			t.Fatalf("publishing ended early: %v", err)
		default:
		}
		c.inject(f)
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
	settleAndCompareIncarnations(t, sup, ns.URL(), cfg, wantByKey, variants, wantRejected, c.held)
	// The schedule's variants change late judgements: the positions alone.
	checkLake(t, cfg, wantLake, false)
}

// chaos is what the faults act on.
type chaos struct {
	t      *testing.T
	sup    *supervisor
	mosq   *testenv.Mosquitto
	ns     *testenv.NATS
	disk   string
	nf     *testenv.NetFaults
	stream string // the results stream
	// held is what each deleted incarnation of the results stream held.
	held [][]testenv.Stored
}

// inject applies one fault and returns once it is over.
func (c *chaos) inject(f testenv.Fault) {
	t, sup, mosq, ns, disk := c.t, c.sup, c.mosq, c.ns, c.disk
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
	case "net-drop", "net-cut", "net-drop-nats", "net-cut-nats":
		addr := mosq.Addr()
		if strings.HasSuffix(f.Kind, "-nats") {
			addr = ns.URL()
		}
		port := testenv.PortOf(t, addr)
		restore := c.nf.Drop
		if strings.HasPrefix(f.Kind, "net-cut") {
			restore = c.nf.Cut
		}
		// The test's own connections (the fleet's publisher: the phones)
		// are left alone: the fault is between edgeproc and the server.
		except := testenv.ClientPorts(t, port)
		t.Logf("%v: port %d (%s), but the test's own connections from ports %v", f, port, addr, except)
		end := restore(port, except...)
		time.Sleep(f.Lasts)
		end()
	case "results-stream-deleted":
		held := testenv.DeleteStream(t, ns.URL(), c.stream)
		c.held = append(c.held, held)
		deleted := time.Now()
		if !testenv.WaitStream(t, ns.URL(), c.stream, time.Minute) {
			t.Errorf("%v: edgeproc did not recreate the results stream within a minute", f)
		}
		t.Logf("%v: deleted holding %d messages, recreated %v later", f, len(held), time.Since(deleted).Round(100*time.Millisecond))
		time.Sleep(time.Until(deleted.Add(f.Lasts)))
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

// expectedVariants is expected's run again, keeping every record of each
// key (emitted_at_ms removed; rejected inputs left out: they are compared
// as (reason, raw) pairs), not only the first: a position sent twice gives
// a late record twice, with one key and the watermark of each arrival.
func expectedVariants(tb testing.TB, cfg config.Config, msgs []testenv.Message) map[string]map[string]bool {
	tb.Helper()
	ecfg := market.EngineConfig(cfg)
	ecfg.Topic = cfg.MQTT.Topic
	all := map[string]map[string]bool{}
	var buf []byte
	eng := engine.New(ecfg, func(rs []result.Record) {
		for i := range rs {
			if rs[i].Type == result.Rejected {
				continue
			}
			buf = rs[i].AppendJSON(buf[:0])
			k := rs[i].Key()
			if all[k] == nil {
				all[k] = map[string]bool{}
			}
			all[k][oracle.EmittedRe.ReplaceAllString(string(buf), "")] = true
		}
	})
	pushAsLive(eng, msgs) // as expected() does
	return all
}

// incarnation is one incarnation of the results stream by key (JSON with
// emitted_at_ms removed; rejected inputs apart, as (reason, raw) pairs),
// with what was wrong in it: a message id other than the key, a key stored
// twice (the duplicate window failed), an end_of_input in a live run.
func incarnation(tb testing.TB, msgs []testenv.Stored) (byKey map[string]string, rejected map[string]bool, problems []string) {
	tb.Helper()
	x := oracle.NewResults(oracle.EmittedRe, true)
	seen := map[string]bool{}
	for _, m := range msgs {
		var r rec
		if err := json.Unmarshal(m.Data, &r); err != nil {
			tb.Fatalf("stream message %q: %v", m.Data, err)
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != r.Key {
			problems = append(problems, fmt.Sprintf("message id %q, want the key %q", id, r.Key))
		}
		if seen[r.Key] && r.Type != "rejected" {
			problems = append(problems, fmt.Sprintf("key %s stored twice: the duplicate window did not drop a re-emission", r.Key))
		}
		seen[r.Key] = true
		if bytes.Contains(m.Data, []byte(`"end_of_input":true`)) {
			problems = append(problems, r.Key+" carries end_of_input in a live run")
		}
		x.Add(m.Data)
	}
	return x.ByKey(tb), x.Rejected(), problems
}

// settleAndCompareIncarnations is settleAndCompare for a results stream
// that the schedule may have deleted: held are the messages each deleted
// incarnation held (DeleteStream reads them after sealing the stream, so
// none was stored unseen), and the stream now is the last incarnation.
//
// What a deleted incarnation held is gone from the stream, and a result
// edgeproc re-emits after recreating it is no longer deduplicated against
// it (runbook, "Stream or bucket lost"): so the stream alone cannot equal
// the reference run, and comparing only the keys published after the
// re-creation would leave every result before it unchecked. The check is
// on the union of the incarnations instead, and loses nothing of
// settleAndCompare's strictness (with no deletion it is the same check):
// every key of the reference run is stored in some incarnation and no
// other key in any (a lost result, or a no_signal a courier did not earn,
// still fails); the first copy of a key is the reference run's first
// record; a copy in a later incarnation is one of the reference run's
// records of that key; no key is stored twice within one incarnation (its
// duplicate window holds); the rejected (reason, raw) pairs of all
// incarnations are the reference run's.
func settleAndCompareIncarnations(t *testing.T, sup *supervisor, natsURL string, cfg config.Config, wantByKey map[string]string, variants map[string]map[string]bool, wantRejected map[string]bool, held [][]testenv.Stored) {
	t.Helper()
	var incs []map[string]string
	gotRejected := map[string]bool{}
	var problems []string
	for _, h := range held {
		byKey, rej, p := incarnation(t, h)
		incs = append(incs, byKey)
		for r := range rej {
			gotRejected[r] = true
		}
		problems = append(problems, p...)
	}
	// What the stream must still receive: the reference's keys and pairs
	// that no deleted incarnation holds.
	var minMsgs uint64
	for k := range wantByKey {
		if !inAny(incs, k) {
			minMsgs++
		}
	}
	for r := range wantRejected {
		if !gotRejected[r] {
			minMsgs++
		}
	}
	// As settleAndCompare: wait until edgeproc is idle, the stream holding
	// at least what is still wanted and no longer growing (or no longer
	// growing for longer). A re-emission in the recreated stream may make
	// up the count early, so with deletions, the union must also be
	// complete.
	complete := func() bool {
		if len(held) == 0 {
			return true
		}
		byKey, rej, _ := incarnation(t, testenv.ReadStored(t, natsURL, cfg.NATS.Stream))
		for k := range wantByKey {
			if _, ok := byKey[k]; !ok && !inAny(incs, k) {
				return false
			}
		}
		for r := range wantRejected {
			if !rej[r] && !gotRejected[r] {
				return false
			}
		}
		return true
	}
	idle := cfg.Windows.IdleTimeout
	settle := idle + cfg.Windows.Size + cfg.Windows.Gap + 10*time.Second
	deadline := time.Now().Add(settle + 60*time.Second)
	var last uint64
	stable := 0
	for stable < int(settle/time.Second) && time.Now().Before(deadline) {
		if stable >= 3 && last >= minMsgs && complete() {
			break
		}
		time.Sleep(time.Second)
		n := streamCount(t, natsURL, cfg.NATS.Stream)
		if n == last {
			stable++
		} else {
			stable = 0
		}
		last = n
	}
	t.Logf("stream holds %d messages, want at least %d (%d deleted incarnations held %d)", last, minMsgs, len(held), heldCount(held))
	sup.stop()

	byKey, rej, p := incarnation(t, testenv.ReadStored(t, natsURL, cfg.NATS.Stream))
	incs = append(incs, byKey)
	for r := range rej {
		gotRejected[r] = true
	}
	for _, pr := range append(problems, p...) {
		t.Error(pr)
	}
	diffs := testenv.DiffIncarnations(incs, wantByKey, variants, "the reference run")
	for r := range wantRejected {
		if !gotRejected[r] {
			diffs = append(diffs, fmt.Sprintf("rejected input missing from the stream: %q", r))
		}
	}
	for r := range gotRejected {
		if !wantRejected[r] {
			diffs = append(diffs, fmt.Sprintf("rejected input not in the reference run: %q", r))
		}
	}
	types := map[string]int{}
	for k := range wantByKey {
		types[strings.SplitN(k, "|", 2)[0]]++
	}
	t.Logf("compared %d keyed results %v and %d rejected inputs over %d incarnations of the stream (the last one: %d keys)", len(wantByKey), types, len(wantRejected), len(incs), len(byKey))
	if len(diffs) > 0 {
		t.Errorf("%d differences; first ones:", len(diffs))
		for _, d := range diffs[:min(15, len(diffs))] {
			t.Errorf("  %s", d)
		}
	}
}

func inAny(incs []map[string]string, k string) bool {
	for _, inc := range incs {
		if _, ok := inc[k]; ok {
			return true
		}
	}
	return false
}

func heldCount(held [][]testenv.Stored) int {
	n := 0
	for _, h := range held {
		n += len(h)
	}
	return n
}
