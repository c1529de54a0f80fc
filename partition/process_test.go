package partition

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/internal/tmath"
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
	// max_owned ceil(4 / (3-1)): spread, and room for all on two.
	procs := startProcsEdit(t, bin, cl.URL(), partitions, 2, operatorYAML, "a", "b", "c")
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

// The operator's settings of TestProcesses_Kill9AndNodeLossEqualReplay,
// each away from its default so that a key not applied shows: the
// retention of the results stream (nats.max_age, nats.max_bytes) and of
// the positions stream (jetstream.max_age, jetstream.max_bytes), and a
// courier bucket interval short enough to check the bucket in a second.
const (
	opResultsMaxAge     = 90 * time.Minute
	opResultsMaxBytes   = 96 << 20
	opPositionsMaxAge   = 3 * time.Hour
	opPositionsMaxBytes = 48 << 20
	opKVInterval        = 500 * time.Millisecond
)

// operatorYAML sets the op* values in a testYAML configuration.
func operatorYAML(y string) string {
	y = strings.Replace(y, "nats:\n", "nats:\n  max_age: 90m\n  max_bytes: 96MiB\n  kv_interval: 500ms\n", 1)
	return strings.Replace(y, "jetstream:\n", "jetstream:\n  max_age: 3h\n  max_bytes: 48MiB\n", 1)
}

// operatorConfig is testConfig with operatorYAML's settings.
func operatorConfig(t testing.TB, url string, partitions int) config.Config {
	t.Helper()
	c, err := config.Parse(strings.NewReader(operatorYAML(testYAML(url, partitions, "127.0.0.1:0", ""))), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.MaxAge != opResultsMaxAge || c.NATS.MaxBytes != opResultsMaxBytes || c.NATS.KVInterval != opKVInterval ||
		c.JetStream.MaxAge != opPositionsMaxAge || c.JetStream.MaxBytes != opPositionsMaxBytes {
		t.Fatalf("operatorYAML not applied: nats %v %d %v, jetstream %v %d", c.NATS.MaxAge, c.NATS.MaxBytes, c.NATS.KVInterval,
			c.JetStream.MaxAge, c.JetStream.MaxBytes)
	}
	return c
}

// newestPosition is a courier's valid position of greatest timestamp in
// the positions stream: what its courier bucket entry and board dot must
// show (courier.Place: the newest timestamp wins).
type newestPosition struct {
	ts        int64
	lat, lon  float64
	partition int
	stored    time.Time // when the stream stored it (its first copy)
}

// fleetPosition decodes a payload the contract accepts (§2) for the
// courier of topic (km0-style, '/' between levels): the members present
// and typed, the courier that of the topic, coordinates in range, a
// positive timestamp, at most 4 KiB. The fleet's malformed payloads each
// carry the timestamp of a valid one, so a bad one taken as valid would
// not change a courier's newest timestamp.
func fleetPosition(topic string, payload []byte) (courier string, ts int64, lat, lon float64, ok bool) {
	var v struct {
		Courier  *string  `json:"courier"`
		Lat      *float64 `json:"lat"`
		Lon      *float64 `json:"lon"`
		TS       *int64   `json:"timestamp_ms"`
		Accuracy *float64 `json:"accuracy_m"`
	}
	if len(payload) > 4096 || json.Unmarshal(payload, &v) != nil || v.Courier == nil || v.Lat == nil || v.Lon == nil || v.TS == nil {
		return "", 0, 0, 0, false
	}
	courier = topic[strings.LastIndexByte(topic, '/')+1:]
	if *v.Courier != courier || *v.TS <= 0 || *v.Lat < -90 || *v.Lat > 90 || *v.Lon < -180 || *v.Lon > 180 {
		return "", 0, 0, 0, false
	}
	return courier, *v.TS, *v.Lat, *v.Lon, true
}

// checkOperatorView checks, at the end of a run whose survivors are
// settled (every partition owned once, applied and checkpointed to its
// last message), what an operator sees of each live instance against
// what the fleet published: its /metrics against the positions and
// results streams and the per-partition replay, its board page and event
// stream, the courier bucket, and the two streams' retention. killedAt is
// when the instance that is gone was killed, publishStart when the fleet
// started publishing. It returns the replay's results by key (reference),
// for equalsReplayOf once the fleet is done.
func checkOperatorView(t *testing.T, nc *nats.Conn, url string, cfg config.Config, survivors []*proc, couriers int, publishStart, killedAt time.Time) map[string]string {
	t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Nothing the killed process sent is stored later than this (it was
	// sent before the kill; the margin covers what the server had still
	// to read).
	after := killedAt.Add(3 * time.Second)

	// What the fleet published, as the positions stream holds it.
	newest := map[string]newestPosition{}
	byPartition := make([][]string, cfg.JetStream.Partitions)
	positionsAfter := 0
	ticks := make([]uint64, cfg.JetStream.Partitions) // an instance handing a partition over for balance ticks it
	for _, m := range testenv.ReadStored(t, url, cfg.JetStream.Stream) {
		levels := strings.SplitN(m.Subject, ".", 4) // part.MARKET.N.COURIER
		if len(levels) != 4 {
			t.Fatalf("positions stream: message on %s, outside the partitions", m.Subject)
		}
		n, err := strconv.Atoi(levels[2])
		if err != nil || n >= cfg.JetStream.Partitions {
			t.Fatalf("positions stream: message on %s, outside the partitions", m.Subject)
		}
		if kindOf(m.Subject, m.Header) != msgPosition {
			ticks[n]++
			continue
		}
		if m.Time.After(after) {
			positionsAfter++
		}
		c, ts, lat, lon, ok := fleetPosition(natsToMQTT(m.Subject), m.Data)
		if !ok {
			continue
		}
		old, seen := newest[c]
		if !seen {
			byPartition[n] = append(byPartition[n], c)
		} else if old.partition != n {
			t.Errorf("courier %s in partitions %d and %d", c, old.partition, n)
		}
		if !seen || ts > old.ts {
			newest[c] = newestPosition{ts: ts, lat: lat, lon: lon, partition: n, stored: m.Time}
		}
	}
	if len(newest) != couriers {
		t.Fatalf("positions stream: valid positions of %d couriers, the fleet has %d", len(newest), couriers)
	}
	results := testenv.ReadStored(t, url, cfg.NATS.Stream)
	resultsAfter := 0
	for _, m := range results {
		if m.Time.After(after) {
			resultsAfter++
		}
	}
	want, whole := replay(t, url, cfg) // each partition's engine, applied whole
	replayed := time.Now()

	// Each survivor's partitions (/partitions/girona) and /metrics.
	type view struct {
		p        *proc
		parts    []Status
		owned    []int
		m        scrape
		from, to time.Time // the scrape began and ended
	}
	var views []view
	for _, p := range survivors {
		_, parts, err := p.status()
		if err != nil || len(parts) != cfg.JetStream.Partitions {
			t.Fatalf("instance %s: /partitions/girona: %d partitions, %v", p.name, len(parts), err)
		}
		from := time.Now()
		m := scrapeMetrics(t, p.listen)
		views = append(views, view{p: p, parts: parts, m: m, from: from, to: time.Now()})
	}
	owner := make([]*view, cfg.JetStream.Partitions)
	for i := range views {
		for _, s := range views[i].parts {
			if s.Owned {
				if owner[s.Partition] != nil {
					t.Fatalf("partition %d owned by %s and %s", s.Partition, owner[s.Partition].p.name, views[i].p.name)
				}
				owner[s.Partition] = &views[i]
				views[i].owned = append(views[i].owned, s.Partition)
			}
		}
	}
	for n, v := range owner {
		if v == nil {
			t.Fatalf("partition %d owned by no survivor", n)
		}
	}
	// onlyOwner reports whether no survivor but v ever owned partition n.
	onlyOwner := func(v *view, n int) bool {
		for i := range views {
			if &views[i] != v && views[i].parts[n].Takeovers > 0 {
				return false
			}
		}
		return true
	}

	// The checkpoint records: each names its writer and, when its snapshot
	// was written in the record's own epoch, a checkpoint that writer
	// took in its current term.
	kv := jetstreamKV(t, nc, cfg)
	ownCkpts := map[string]int{}
	for n := range cfg.JetStream.Partitions {
		e, err := kv.Get(ctx, "p"+strconv.Itoa(n))
		if err != nil {
			t.Fatalf("checkpoint record p%d: %v", n, err)
		}
		var rec record
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.Fatalf("checkpoint record p%d: %v", n, err)
		}
		if rec.Owner != owner[n].p.name {
			t.Errorf("checkpoint record p%d is %s's; /partitions says %s owns the partition", n, rec.Owner, owner[n].p.name)
		}
		if rec.Object == fmt.Sprintf("p%d-e%d-s%d", n, rec.Epoch, rec.Seq) {
			ownCkpts[rec.Owner]++
		}
	}

	// /metrics of each survivor: the market's metrics (those of the MQTT
	// source, summed over the instance's partitions) against its own
	// partitions and the replay, and added up against the streams.
	var sumReceived, sumAcked, sumStored, sumCouriers float64
	wmOf := map[string]int64{} // each survivor's market watermark, ms
	for i := range views {
		v := &views[i]
		name, m := v.p.name, v.m
		get := func(metric string, labels ...string) float64 {
			t.Helper()
			x, ok := m.get(metric, append([]string{"market", cfg.Market}, labels...)...)
			if !ok {
				t.Errorf("instance %s: /metrics has no %s%v", name, metric, labels)
			}
			return x
		}
		for _, g := range []string{"edgeproc_market_ready", "edgeproc_market_failed", "edgeproc_nats_connected", "edgeproc_stream_ready"} {
			want := 1.0
			if g == "edgeproc_market_failed" {
				want = 0
			}
			if x := get(g); x != want {
				t.Errorf("instance %s: %s %v, want %v", name, g, x, want)
			}
		}
		var applied, dropped, tickTerms uint64
		var takeovers, wholeTerms int
		owned := v.owned
		for _, s := range v.parts {
			applied += s.Applied
			dropped += s.Dropped
			takeovers += int(s.Takeovers)
			tickTerms += s.Takeovers * ticks[s.Partition]
			if x, ok := m.get("edgeproc_partition_owned", "market", cfg.Market, "instance", name, "partition", strconv.Itoa(s.Partition)); !ok || (x == 1) != s.Owned {
				t.Errorf("instance %s partition %d: edgeproc_partition_owned %v (present %v), /partitions says owned %v", name, s.Partition, x, ok, s.Owned)
			}
		}

		// Received: every message applied, in every term (a takeover's
		// replay since the checkpoint counted again, as /partitions does),
		// but the ticks: each term applied each at most once.
		received := get("edgeproc_positions_received_total")
		if received > float64(applied) || received < float64(applied-tickTerms) {
			t.Errorf("instance %s: edgeproc_positions_received_total %v; it applied %d messages in every term (/partitions/girona), at most %d of them ticks",
				name, received, applied, tickTerms)
		}
		sumReceived += received

		// The results bridge: at rest, every result it accepted acked;
		// every one it accepted or dropped was counted by an engine.
		published, acked := get("edgeproc_bridge_published_total"), get("edgeproc_bridge_acked_total")
		dups, pending := get("edgeproc_bridge_duplicates_total"), get("edgeproc_bridge_pending")
		if pending != 0 || acked != published || dups > acked {
			t.Errorf("instance %s at rest: bridge published %v, acked %v (%v duplicates), pending %v; want all acked, none pending", name, published, acked, dups, pending)
		}
		emitted, series := m.sum("edgeproc_results_total", "market", cfg.Market)
		if series == 0 || emitted < published+float64(dropped) {
			t.Errorf("instance %s: edgeproc_results_total sums to %v over %d types, below the %v results its bridge accepted and %d it dropped", name, emitted, series, published, dropped)
		}
		sumAcked += acked
		sumStored += acked - dups

		// Gauges of the partitions it owns now, each applied to its last
		// message: as the replay of those partitions.
		var wantCouriers int64
		wm := int64(tmath.Never)
		for _, n := range owned {
			wantCouriers += whole[n].Couriers
			if w := whole[n].Watermark; w != tmath.Never && (wm == tmath.Never || w < wm) {
				wm = w
			}
		}
		wmOf[name] = wm
		c := get("edgeproc_couriers")
		if c != float64(wantCouriers) {
			t.Errorf("instance %s: edgeproc_couriers %v, want %d: the couriers of partitions %v it owns", name, c, wantCouriers, owned)
		}
		sumCouriers += c
		if x, ok := m.get("edgeproc_watermark_timestamp_seconds", "market", cfg.Market); wm == tmath.Never {
			if ok {
				t.Errorf("instance %s: edgeproc_watermark_timestamp_seconds %v with no position in partitions %v", name, x, owned)
			}
		} else if !ok || x != float64(wm)/1000 {
			t.Errorf("instance %s: edgeproc_watermark_timestamp_seconds %v (present %v), want %v: the lowest of partitions %v after the replay", name, x, ok, float64(wm)/1000, owned)
		} else if lag, ok := m.get("edgeproc_watermark_lag_seconds", "market", cfg.Market); !ok ||
			lag < float64(v.from.UnixMilli()-wm-1)/1000 || lag > float64(v.to.UnixMilli()-wm+1)/1000 {
			t.Errorf("instance %s: edgeproc_watermark_lag_seconds %v (present %v); the clock minus the watermark was %v to %v during the scrape",
				name, lag, ok, v.from.Sub(time.UnixMilli(wm)), v.to.Sub(time.UnixMilli(wm)))
		}

		// Counters: at least those of the partitions it applied whole in
		// one term (the partition's first: epoch 1, from no checkpoint,
		// never lost since); exactly those when it had no other term.
		var lo engine.Stats
		for _, n := range owned {
			if s := v.parts[n]; s.Epoch == 1 && s.Takeovers == 1 {
				lo.Add(whole[n])
				wholeTerms++
			}
		}
		exact := wholeTerms == takeovers
		counter := func(metric string, want int64, labels ...string) {
			t.Helper()
			x := get(metric, labels...)
			if x < float64(want) || exact && x != float64(want) {
				t.Errorf("instance %s: %s%v %v; the replay of the %d partitions it applied whole gives %d (exact: %v)", name, metric, labels, x, wholeTerms, want, exact)
			}
		}
		counter("edgeproc_positions_received_total", lo.Received)
		counter("edgeproc_positions_accepted_total", lo.Accepted)
		counter("edgeproc_positions_duplicate_total", lo.Duplicates)
		counter("edgeproc_positions_late_total", lo.LateDistance, "operator", "distance")
		counter("edgeproc_positions_late_total", lo.LateSession, "operator", "session")
		for reason, want := range lo.Rejected {
			counter("edgeproc_positions_rejected_total", want, "reason", reason)
		}
		for typ, want := range lo.Results {
			counter("edgeproc_results_total", want, "type", typ)
		}

		// Checkpoints: at least one per partition whose record it wrote in
		// its current term.
		if x := get("edgeproc_checkpoints_total"); x < float64(ownCkpts[name]) {
			t.Errorf("instance %s: edgeproc_checkpoints_total %v; the checkpoint records hold %d it wrote", name, x, ownCkpts[name])
		} else if x > 0 {
			if age, ok := m.get("edgeproc_checkpoint_age_seconds", "market", cfg.Market); !ok || age < 0 || age > time.Since(publishStart).Seconds() {
				t.Errorf("instance %s: edgeproc_checkpoint_age_seconds %v (present %v) after %v checkpoints", name, age, ok, x)
			}
		}
		t.Logf("instance %s /metrics: owns %v, received %v, results %v, bridge published %v acked %v (%v duplicates), couriers %v, watermark %v, checkpoints %v; %d of %d terms applied a partition whole",
			name, owned, received, emitted, published, acked, dups, c, time.UnixMilli(wm).UTC().Format(time.TimeOnly), get("edgeproc_checkpoints_total"), wholeTerms, takeovers)
	}
	// Added up over the survivors: every partition owned once, every
	// courier counted once, and the streams' messages since the kill
	// (only survivors could have stored them) applied and acked by them.
	for n := range cfg.JetStream.Partitions {
		var sum float64
		for _, v := range views {
			x, _ := v.m.get("edgeproc_partition_owned", "partition", strconv.Itoa(n))
			sum += x
		}
		if sum != 1 {
			t.Errorf("partition %d: edgeproc_partition_owned sums to %v over the survivors, want 1", n, sum)
		}
	}
	if sumCouriers != float64(couriers) {
		t.Errorf("edgeproc_couriers sums to %v over the survivors; the fleet has %d couriers", sumCouriers, couriers)
	}
	if sumReceived < float64(positionsAfter) {
		t.Errorf("edgeproc_positions_received_total sums to %v over the survivors, below the %d positions stored after the kill", sumReceived, positionsAfter)
	}
	if sumAcked < float64(resultsAfter) || sumStored > float64(len(results)) {
		t.Errorf("survivors' bridges acked %v results (%v stored by them), the results stream holds %d, %d of them stored after the kill",
			sumAcked, sumStored, len(results), resultsAfter)
	}
	t.Logf("survivors: received %v (%d positions stored after the kill), acked %v results, %v of them new (the stream holds %d, %d stored after the kill)",
		sumReceived, positionsAfter, sumAcked, sumStored, len(results), resultsAfter)

	// The courier bucket: an entry per courier, never ahead of its newest
	// position, and exactly that position (newest timestamp wins) for
	// the couriers whose newest position was stored after the kill in a
	// partition no other survivor ever owned: it was applied by the
	// partition's owner, whose writer keeps the newest state of each
	// courier and writes it within 1.25 nats.kv_interval, and nobody
	// wrote the courier since but that owner.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := js.KeyValue(ctx, defaults.CourierBucket(cfg.Market))
	if err != nil {
		t.Fatalf("courier bucket: %v", err)
	}
	exactly := map[string]bool{}
	for c, w := range newest {
		if w.stored.After(after) && onlyOwner(owner[w.partition], w.partition) {
			exactly[c] = true
		}
	}
	if len(exactly) < couriers/4 {
		t.Errorf("only %d of %d couriers to check exactly in the courier bucket", len(exactly), couriers)
	}
	for deadline := time.Now().Add(5*opKVInterval + 5*time.Second); ; {
		var wrong []string
		for c, w := range newest {
			e, err := bucket.Get(ctx, bridge.CourierKey(c))
			if err != nil {
				wrong = append(wrong, fmt.Sprintf("%s: %v", c, err))
				continue
			}
			var cs bridge.CourierState
			if err := json.Unmarshal(e.Value(), &cs); err != nil || cs.Courier != c || cs.TS > w.ts ||
				exactly[c] && (cs.TS != w.ts || cs.Lat != w.lat || cs.Lon != w.lon) {
				wrong = append(wrong, fmt.Sprintf("%s: %s (%v); its newest position %d at %v,%v, stored %v, partition %d (check exactly: %v)",
					c, e.Value(), err, w.ts, w.lat, w.lon, w.stored.Format(time.StampMilli), w.partition, exactly[c]))
			}
		}
		if len(wrong) == 0 {
			t.Logf("courier bucket: an entry for each of %d couriers, %d of them at their newest position (the others not ahead of it)", couriers, len(exactly))
			break
		}
		if time.Now().After(deadline) {
			sort.Strings(wrong)
			t.Errorf("courier bucket %s: %d of %d couriers wrong (%d to check at their newest position), first ones:\n%s",
				bucket.Bucket(), len(wrong), couriers, len(exactly), strings.Join(wrong[:min(10, len(wrong))], "\n"))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, v := range views {
		// Writes since start: each courier it applied a position of after
		// the claim of its current term is one it had never seen before
		// or one that moved on since, written at least once.
		var seen int
		for _, n := range v.owned {
			for _, c := range byPartition[n] {
				if newest[c].stored.After(v.parts[n].AcquiredAt) {
					seen++
				}
			}
		}
		if x, _ := scrapeMetrics(t, v.p.listen).get("edgeproc_kv_writes_total", "market", cfg.Market); x < float64(seen) {
			t.Errorf("instance %s: edgeproc_kv_writes_total %v, below the %d couriers whose newest position it applied", v.p.name, x, seen)
		}
	}

	// The board: the pages, and the event stream's snapshot with the
	// market's watermark and the couriers of the partitions it owns at
	// their newest position (those it applied that position of: stored
	// after its current term began).
	for _, v := range views {
		checkBoard(t, v.p, cfg.Market, wmOf[v.p.name], func(yield func(string, newestPosition) bool) {
			for _, n := range v.owned {
				for _, c := range byPartition[n] {
					if w := newest[c]; w.stored.After(v.parts[n].AcquiredAt) && !yield(c, w) {
						return
					}
				}
			}
		})
	}

	// Retention as configured, on both streams.
	for _, st := range []struct {
		name     string
		maxAge   time.Duration
		maxBytes int64
	}{{cfg.NATS.Stream, opResultsMaxAge, opResultsMaxBytes}, {cfg.JetStream.Stream, opPositionsMaxAge, opPositionsMaxBytes}} {
		s, err := js.Stream(ctx, st.name)
		if err != nil {
			t.Fatalf("stream %s: %v", st.name, err)
		}
		if sc := s.CachedInfo().Config; sc.MaxAge != st.maxAge || sc.MaxBytes != st.maxBytes {
			t.Errorf("stream %s: max_age %v, max_bytes %d; configured %v, %d", st.name, sc.MaxAge, sc.MaxBytes, st.maxAge, st.maxBytes)
		}
	}
	t.Logf("operator's view checked in %v (replay %v)", time.Since(began).Round(time.Millisecond), replayed.Sub(began).Round(time.Millisecond))
	return want
}

// sample is one series of a /metrics scrape (Prometheus text format).
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is every series of one /metrics answer.
type scrape []sample

// metricsClient reads /metrics and the board's pages.
var metricsClient = &http.Client{Timeout: 10 * time.Second}

// scrapeMetrics reads and parses the /metrics of the process listening
// on listen.
func scrapeMetrics(t testing.TB, listen string) scrape {
	t.Helper()
	res, err := metricsClient.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics of %s: %v", listen, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics of %s: %d, %v", listen, res.StatusCode, err)
	}
	var out scrape
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			t.Fatalf("/metrics of %s: %v", listen, err)
		}
		out = append(out, s)
	}
	return out
}

// parseSample parses `name{label="value",…} value [timestamp]`.
func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("no value in %q", line)
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, ",")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.IndexByte(line, '=')
			if eq <= 0 {
				return s, fmt.Errorf("bad labels in %q", line)
			}
			key := line[:eq]
			q, err := strconv.QuotedPrefix(line[eq+1:])
			if err != nil {
				return s, fmt.Errorf("bad label %s in %q: %w", key, line, err)
			}
			if s.labels[key], err = strconv.Unquote(q); err != nil {
				return s, fmt.Errorf("bad label %s in %q: %w", key, line, err)
			}
			line = line[eq+1+len(q):]
		}
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return s, fmt.Errorf("no value for %s", s.name)
	}
	var err error
	s.value, err = strconv.ParseFloat(f[0], 64)
	return s, err
}

// match reports whether s is a series of name with every label of want
// (name, value pairs).
func (s *sample) match(name string, want []string) bool {
	if s.name != name {
		return false
	}
	for i := 0; i+1 < len(want); i += 2 {
		if v, ok := s.labels[want[i]]; !ok || v != want[i+1] {
			return false
		}
	}
	return true
}

// get returns the value of the one series of name with the labels of
// want, and whether there is exactly one.
func (sc scrape) get(name string, want ...string) (float64, bool) {
	v, n := sc.sum(name, want...)
	return v, n == 1
}

// sum adds up the series of name with the labels of want, and counts
// them.
func (sc scrape) sum(name string, want ...string) (float64, int) {
	var v float64
	n := 0
	for i := range sc {
		if sc[i].match(name, want) {
			v += sc[i].value
			n++
		}
	}
	return v, n
}

// checkBoard checks p's fleet board: the page of every market and of
// market answer, and its event stream's snapshot shows the market
// connected, at watermark wm (ms), and every courier of mine at its newest
// position. mine must not be empty: the snapshot must hold a courier of a
// partition p owns. The snapshot is taken up to three times, 0.6 s apart:
// the market's status is sampled once per board interval (0.5 s).
func checkBoard(t *testing.T, p *proc, market string, wm int64, mine iter.Seq2[string, newestPosition]) {
	t.Helper()
	for path, want := range map[string]string{"/board/": "all markets", "/board/" + market: `data-market="` + market + `"`} {
		res, err := metricsClient.Get("http://" + p.listen + path)
		if err != nil {
			t.Errorf("instance %s: GET %s: %v", p.name, path, err)
			continue
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), want) {
			t.Errorf("instance %s: GET %s: %d %s (%v), %d bytes; want 200, the page with %q", p.name, path, res.StatusCode, res.Header.Get("Content-Type"), err, len(body), want)
		}
	}
	var problem string
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(600 * time.Millisecond)
		}
		var shown int
		if problem, shown = boardProblem(p.listen, market, wm, mine); problem == "" {
			t.Logf("instance %s: board snapshot shows %d couriers of its partitions at their newest position", p.name, shown)
			return
		}
	}
	t.Errorf("instance %s: board: %s", p.name, problem)
}

// boardProblem reads the first message (the snapshot) of p's board event
// stream for market and says what is wrong with it, "" if nothing, with
// the number of couriers of mine it showed.
func boardProblem(listen, market string, wm int64, mine iter.Seq2[string, newestPosition]) (string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+listen+"/board/events?market="+market, nil)
	if err != nil {
		return err.Error(), 0
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error(), 0
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusOK || ct != "text/event-stream" {
		return fmt.Sprintf("/board/events: %d %s", res.StatusCode, ct), 0
	}
	u, _, err := board.NewStream(res.Body).Next()
	switch {
	case err != nil:
		return "/board/events: " + err.Error(), 0
	case !u.Full || len(u.Markets) != 1 || u.Markets[0].Name != market:
		return fmt.Sprintf("/board/events: first message full %v, markets %+v; want the snapshot of %s", u.Full, u.Markets, market), 0
	}
	m := u.Markets[0]
	if !m.NATS || !m.MQTT {
		return fmt.Sprintf("market %s shown with NATS %v and its source %v; want both connected", market, m.NATS, m.MQTT), 0
	}
	if m.LagMS == nil {
		return fmt.Sprintf("market %s shown with no watermark; want %d", market, wm), 0
	}
	if u.Now-*m.LagMS != wm {
		return fmt.Sprintf("market %s shown at watermark %d (lag %d ms at %d); want %d", market, u.Now-*m.LagMS, *m.LagMS, u.Now, wm), 0
	}
	shown := map[string]board.CourierUpdate{}
	for _, c := range u.Couriers {
		shown[c.ID] = c
	}
	n := 0
	var wrong []string
	for c, w := range mine {
		n++
		// A courier's events the board's mailbox dropped (counted) may
		// leave it behind, never ahead.
		if got, ok := shown[c]; !ok || got.TS > w.ts || u.Dropped == 0 && (got.TS != w.ts || got.Lat != w.lat || got.Lon != w.lon) {
			wrong = append(wrong, fmt.Sprintf("%s: shown %v %+v; newest position %d at %v,%v (partition %d)", c, ok, got, w.ts, w.lat, w.lon, w.partition))
		}
	}
	switch {
	case n == 0:
		return "no courier of the partitions it owns had a position since it took them: nothing to look for", 0
	case len(wrong) > 0:
		sort.Strings(wrong)
		return fmt.Sprintf("%d of %d couriers of its partitions wrong in the snapshot (%d shown, %d events dropped), first ones:\n%s",
			len(wrong), n, len(u.Couriers), u.Dropped, strings.Join(wrong[:min(10, len(wrong))], "\n")), n
	}
	return "", n
}
