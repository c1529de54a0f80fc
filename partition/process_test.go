package partition

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/internal/testenv"
)

// proc is one `edgeproc run` process of market girona, seen through its
// /readyz.
type proc struct {
	name, listen string
	conf         string // its configuration file
	p            *testenv.Proc
	cpuReady     time.Duration // CPU time used by the end of set-up
}

// startProcs writes one config per name (testYAML with the instance name,
// max_owned and an HTTP port of its own) and starts `edgeproc run` on it.
func startProcs(t testing.TB, bin, url string, partitions, maxOwned int, names ...string) []*proc {
	t.Helper()
	return startProcsWindows(t, bin, url, partitions, maxOwned, "", names...)
}

// startProcsWindows is startProcs with the windows section's lines (two
// spaces in) replaced by windows, unless it is empty.
func startProcsWindows(t testing.TB, bin, url string, partitions, maxOwned int, windows string, names ...string) []*proc {
	t.Helper()
	var edit func(string) string
	if windows != "" {
		edit = func(y string) string {
			return strings.Replace(y, "windows:\n  idle_timeout: 0s\n", "windows:\n"+windows, 1)
		}
	}
	return startProcsEdit(t, bin, url, partitions, maxOwned, edit, names...)
}

// startProcsEdit is startProcs with each configuration passed through
// edit, unless it is nil.
func startProcsEdit(t testing.TB, bin, url string, partitions, maxOwned int, edit func(string) string, names ...string) []*proc {
	t.Helper()
	dir := t.TempDir()
	var out []*proc
	for _, name := range names {
		listen := testenv.FreeAddr(t)
		path := filepath.Join(dir, name+".yaml")
		y := testYAML(url, partitions, listen, fmt.Sprintf("  instance: %s\n  max_owned: %d\n", name, maxOwned))
		if edit != nil {
			y = edit(y)
		}
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		p := &proc{name: name, listen: listen, conf: path}
		p.start(t, bin)
		out = append(out, p)
	}
	return out
}

// start starts (or, after a kill, restarts) p's `edgeproc run`.
func (p *proc) start(t testing.TB, bin string) {
	t.Helper()
	p.p = testenv.StartProc(t, p.name, bin, "run", "--config", p.conf)
}

// readyzClient gives up quickly: a stopped process answers nothing.
var readyzClient = &http.Client{Timeout: time.Second}

// status reads the partitions from /partitions/girona; ready is /readyz's
// 200.
func (p *proc) status() (ready bool, parts []Status, err error) {
	rz, err := readyzClient.Get("http://" + p.listen + "/readyz")
	if err != nil {
		return false, nil, err
	}
	_ = rz.Body.Close()
	res, err := readyzClient.Get("http://" + p.listen + "/partitions/girona")
	if err != nil {
		return false, nil, err
	}
	defer res.Body.Close()
	var body struct {
		Partitions []Status `json:"partitions"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return false, nil, fmt.Errorf("%s /partitions/girona: %w", p.name, err)
	}
	return rz.StatusCode == http.StatusOK, body.Partitions, nil
}

func (p *proc) ready() bool {
	ok, _, _ := p.status()
	if ok {
		p.cpuReady, _ = p.p.CPU()
	}
	return ok
}

// owned lists the partitions p owns (none when it does not answer).
func (p *proc) owned() []int {
	_, parts, _ := p.status()
	var out []int
	for _, s := range parts {
		if s.Owned {
			out = append(out, s.Partition)
		}
	}
	return out
}

// procsCaughtUp is caughtUp over processes that all answer.
func procsCaughtUp(last []uint64, ps ...*proc) bool { return procsAll(caughtUp, last, ps...) }

// procsSettled is settled over processes that all answer.
func procsSettled(last []uint64, ps ...*proc) bool { return procsAll(settled, last, ps...) }

func procsAll(cond func([]uint64, ...[]Status) bool, last []uint64, ps ...*proc) bool {
	var all [][]Status
	for _, p := range ps {
		_, parts, err := p.status()
		if err != nil || len(parts) != len(last) {
			return false
		}
		all = append(all, parts)
	}
	return cond(last, all...)
}

// reportCPU logs p's CPU time (utime + stime) since it was first seen
// ready (since its start, if never) per message it applied, in every term and partition: pulls, catch-ups,
// checkpoints and idle pulls included, so an upper bound of its cost per
// position.
func reportCPU(t testing.TB, p *proc) {
	t.Helper()
	cpu, err := p.p.CPU()
	_, parts, serr := p.status()
	if err != nil || serr != nil {
		t.Logf("instance %s: no CPU figure: %v %v", p.name, err, serr)
		return
	}
	var applied uint64
	for _, s := range parts {
		applied += s.Applied
	}
	cpu -= p.cpuReady
	if applied > 0 {
		t.Logf("instance %s: %d messages applied, CPU %v, %.1f µs per message", p.name, applied, cpu,
			float64(cpu.Microseconds())/float64(applied))
	}
}

// TestProcesses_Kill9AndNodeLossEqualReplay is TestCluster_FailoverEqualsReplay
// with real processes: three `edgeproc run` on a three-node cluster (R3),
// a fleet published to the partitioned stream, SIGKILL of the instance
// owning the most partitions under load, then the loss of a NATS node. The
// survivors must own every partition, and the results stream must hold,
// once per key, exactly the replay of each partition. It logs the time
// from the kill to each moved partition's claim and first result. At the
// end it checks what an operator sees of each survivor
// (checkOperatorView): /metrics, the board, the courier bucket and the
// streams' retention, set away from their defaults (operatorYAML).
func TestProcesses_Kill9AndNodeLossEqualReplay(t *testing.T) {
	bin := testenv.BuildEdgeproc(t)
	const partitions = 4
	cl := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3, Mappings: mapping(partitions)})
	cfg := operatorConfig(t, cl.URL(), partitions)
	// max_owned ceil(4 / (3-1)): spread, and room for all on two. The
	// instances share a lake.
	lakeDir := t.TempDir()
	addLake := withLake(lakeDir)
	procs := startProcsEdit(t, bin, cl.URL(), partitions, 2, func(y string) string { return addLake(operatorYAML(y)) }, "a", "b", "c")
	for _, p := range procs {
		testenv.WaitFor(t, 90*time.Second, p.name+" ready", p.ready)
		t.Logf("instance %s ready after %v of CPU", p.name, p.cpuReady)
	}
	const couriers = 100
	msgs := testenv.FleetMessages("girona", couriers, 12*time.Minute, 11, time.Now())
	pub := cl.Connect(t)
	publishStart := time.Now()
	var (
		victim    *proc
		survivors []*proc
		moved     []int
		killedAt  time.Time
		nodeDown  bool
		takeovers = make(chan map[int]Status, 1)
	)
	publishFleet(t, pub, msgs, 1200, func(done int) {
		switch {
		case victim == nil && done >= len(msgs)/3:
			for _, p := range procs {
				if o := p.owned(); victim == nil || len(o) > len(moved) {
					victim, moved = p, o
				}
			}
			for _, p := range procs {
				if p != victim {
					survivors = append(survivors, p)
				}
			}
			if len(moved) == 0 {
				t.Fatal("no instance owns a partition under load")
			}
			reportCPU(t, victim)
			t.Logf("kill -9 instance %s (owns partitions %v) after %d of %d messages", victim.name, moved, done, len(msgs))
			victim.p.Kill()
			killedAt = time.Now()
			go watchTakeovers(killedAt, moved, survivors, takeovers)
		case victim != nil && !nodeDown && done >= 2*len(msgs)/3:
			t.Logf("killing NATS node n3 after %d messages", done)
			cl.Kill(2)
			nodeDown = true
		}
	})
	got := <-takeovers
	for _, n := range moved {
		s, ok := got[n]
		if !ok {
			t.Errorf("partition %d: no survivor claimed it and published within 30 s of the kill", n)
			continue
		}
		t.Logf("partition %d: claimed %v after the kill, first result %v after it (pin_ttl %v)",
			n, s.AcquiredAt.Sub(killedAt).Round(time.Millisecond), s.FirstResultAt.Sub(killedAt).Round(time.Millisecond), cfg.JetStream.PinTTL)
	}
	last := lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, 60*time.Second, "survivors own every partition, applied it all and recorded it", func() bool {
		return procsSettled(last, survivors...)
	})
	for _, p := range survivors {
		reportCPU(t, p)
		if _, parts, err := p.status(); err == nil {
			for _, s := range parts {
				t.Logf("instance %s partition %d: owned %v epoch %d processed %d checkpoint %d takeovers %d fenced %d dropped %d caught up %d",
					p.name, s.Partition, s.Owned, s.Epoch, s.Processed, s.Checkpoint, s.Takeovers, s.Fenced, s.Dropped, s.CaughtUp)
			}
		}
	}
	want := checkOperatorView(t, pub, cl.URL(), cfg, survivors, couriers, publishStart, killedAt)
	for _, p := range survivors {
		if err := p.p.Stop(30 * time.Second); err != nil {
			t.Errorf("instance %s after SIGTERM: %v", p.name, err)
		}
	}
	// That replay is the stream's unless a tick came since (a hand-over
	// for balance ticks the partition).
	if !slices.Equal(lastSeqs(t, pub, cfg), last) {
		want = reference(t, cl.URL(), cfg)
	}
	t.Logf("%d messages, %d results, as the replay", len(msgs), equalsReplayOf(t, cl.URL(), cfg, want))
	checkLakeEqualsReplay(t, lakeDir, cl.URL(), cfg)
}

// watchTakeovers polls the survivors until each of the partitions has a
// term that started after killedAt and published a result, or 30 s pass,
// and sends what it saw of each.
func watchTakeovers(killedAt time.Time, partitions []int, survivors []*proc, out chan<- map[int]Status) {
	seen := map[int]Status{}
	for deadline := time.Now().Add(30 * time.Second); len(seen) < len(partitions) && time.Now().Before(deadline); {
		for _, p := range survivors {
			_, parts, _ := p.status()
			for _, n := range partitions {
				if n < len(parts) {
					if s := parts[n]; s.Owned && s.AcquiredAt.After(killedAt) && !s.FirstResultAt.IsZero() {
						if _, ok := seen[n]; !ok {
							seen[n] = s
						}
					}
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	out <- seen
}

// TestProcesses_StoppedOwnerIsFenced pauses a partition's owner process
// with SIGSTOP under load, past the pin TTL: the second process takes the
// partition over. After SIGCONT the first must give the partition up
// (its /readyz says so, that its term ended, and that it handed no result
// to its bridge after SIGCONT), must not overwrite the successor's
// checkpoint record, and whatever it still sends on the results subjects must be byte for byte what the stream already holds
// under that key; the stream holds one record per key and equals the
// replay.
func TestProcesses_StoppedOwnerIsFenced(t *testing.T) {
	bin := testenv.BuildEdgeproc(t)
	ns := testenv.StartNATS(t)
	cfg := testConfig(t, ns.URL(), 1)
	a := startProcs(t, bin, ns.URL(), 1, 0, "a")[0]
	testenv.WaitFor(t, 60*time.Second, "a ready", a.ready)
	msgs := onePartitionFleet(40, 20*time.Minute, 3)
	pub := ns.Connect(t)
	half := len(msgs) / 2
	publishFleet(t, pub, msgs[:half], 20000, nil)
	last := lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, 30*time.Second, "a owns the partition and applied the first half", func() bool { return procsCaughtUp(last, a) })
	b := startProcs(t, bin, ns.URL(), 1, 0, "b")[0]
	testenv.WaitFor(t, 60*time.Second, "b ready", b.ready)

	var stoppedAt time.Time
	publishFleet(t, pub, msgs[half:], 2000, func(done int) {
		if stoppedAt.IsZero() && done >= len(msgs[half:])/4 {
			if err := a.p.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stoppedAt = time.Now()
		}
	})
	last = lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, 30*time.Second, "b took over, applied everything and recorded it", func() bool { return procsSettled(last, b) })
	_, bs, _ := b.status()
	t.Logf("b claimed the partition %v after SIGSTOP (pin_ttl %v), first result %v after it",
		bs[0].AcquiredAt.Sub(stoppedAt).Round(time.Millisecond), cfg.JetStream.PinTTL, bs[0].FirstResultAt.Sub(stoppedAt).Round(time.Millisecond))

	// Everything sent on the results subjects from now on can only come
	// from a (b is caught up and there are no idle ticks).
	late := watchResults(t, pub, cfg.NATS.Stream)
	resumedAt := time.Now()
	if err := a.p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "a says it no longer owns the partition", func() bool {
		_, parts, err := a.status()
		return err == nil && !parts[0].Owned && parts[0].Fenced > 0
	})
	time.Sleep(2 * cfg.JetStream.PinTTL) // room for anything a would still send
	_, as, _ := a.status()
	t.Logf("a after SIGCONT: owned %v, terms lost %d, results dropped %d", as[0].Owned, as[0].Fenced, as[0].Dropped)
	if as[0].LastResultAt.After(resumedAt) {
		t.Errorf("a handed results to its bridge at %v, after SIGCONT at %v", as[0].LastResultAt, resumedAt)
	}
	if _, bs, _ = b.status(); !bs[0].Owned {
		t.Error("b lost the partition when a resumed")
	}
	e, err := jetstreamKV(t, pub, cfg).Get(context.Background(), "p0")
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.Owner != "b" {
		t.Errorf("checkpoint record %s (%v); want b's", e.Value(), err)
	}
	for _, p := range []*proc{a, b} {
		if err := p.p.Stop(30 * time.Second); err != nil {
			t.Errorf("instance %s after SIGTERM: %v", p.name, err)
		}
	}
	stored := published(t, ns.URL(), cfg)
	sent := late()
	for _, m := range sent {
		k := m.Header.Get(jetstream.MsgIDHeader)
		if s, ok := stored[k]; !ok || s != string(m.Data) {
			t.Errorf("after SIGCONT a sent %s under key %s; the stream holds %q", m.Data, k, s)
		}
	}
	t.Logf("a sent %d results after SIGCONT, each identical to the stored one", len(sent))
	equalsReplay(t, ns.URL(), cfg)
}

// watchResults subscribes to the results stream's subjects (core NATS:
// it sees what the stream deduplicates too) and returns a function that
// ends the subscriptions and returns every message received.
func watchResults(t *testing.T, nc *nats.Conn, stream string) func() []*nats.Msg {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []*nats.Msg
	var subs []*nats.Subscription
	for _, subj := range s.CachedInfo().Config.Subjects {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, m)
		})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []*nats.Msg {
		_ = nc.Flush()
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}
