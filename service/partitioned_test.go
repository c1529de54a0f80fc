package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/service"
)

// partitionedConfig is a jetstream-source market of two partitions fed
// by the gateway way (tests publish straight into the partition
// subjects), with a short pin TTL so that a pull, hence a claim, follows
// a publish within half a second, a short checkpoint interval, and the
// idle rule off: no ticks, so a partition's stream holds only what the
// test publishes. extra holds more top-level lines.
func partitionedConfig(tb testing.TB, market, natsURL, extra string) config.Config {
	tb.Helper()
	y := fmt.Sprintf(`market: %s
source: jetstream
jetstream:
  partitions: 2
  pin_ttl: 2s
  replicas: 1
  instance: inst-a
  ingest: gateway
nats: {url: %q}
state: {dir: %q, checkpoint_interval: 200ms}
http: {listen: "127.0.0.1:0"}
%s`, market, natsURL, tb.TempDir(), extra)
	c, err := config.Parse(strings.NewReader(y), market+".yaml")
	if err != nil {
		tb.Fatalf("config: %v", err)
	}
	return c
}

// listenerBase waits for the service's HTTP listener and returns its base
// URL, without waiting for readiness.
func listenerBase(tb testing.TB, r *running, d time.Duration) string {
	tb.Helper()
	select {
	case a := <-r.addr:
		return "http://" + a.String()
	case <-time.After(d):
		tb.Fatalf("no HTTP listener within %v", d)
		return ""
	}
}

// partitionStatus is the part of /partitions/MARKET a test reads.
type partitionStatus struct {
	Partition  int    `json:"partition"`
	Owned      bool   `json:"owned"`
	Processed  uint64 `json:"processed_seq"`
	Checkpoint uint64 `json:"checkpoint_seq"`
}

func partitions(tb testing.TB, base, market string) []partitionStatus {
	tb.Helper()
	code, body := get(tb, base+"/partitions/"+market)
	if code != http.StatusOK {
		tb.Fatalf("/partitions/%s: %d %s", market, code, body)
	}
	var st struct {
		Partitions []partitionStatus `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		tb.Fatalf("/partitions/%s: %v in %s", market, err, body)
	}
	return st.Partitions
}

// claimEpoch is the epoch of partition n's checkpoint record (bucket
// edgeproc_ckpt_MARKET, key pN; docs/scale-out.md): every claim, refused
// or not, writes the next one, so it counts the attempts to take the
// partition over.
func claimEpoch(tb testing.TB, js jetstream.JetStream, market string, n int) uint64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "edgeproc_ckpt_"+market)
	if err != nil {
		tb.Fatalf("checkpoint bucket of %s: %v", market, err)
	}
	e, err := kv.Get(ctx, fmt.Sprintf("p%d", n))
	if err != nil {
		tb.Fatalf("checkpoint record p%d of %s: %v", n, market, err)
	}
	var rec struct {
		Epoch uint64 `json:"epoch"`
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		tb.Fatalf("checkpoint record p%d of %s: %v", n, market, err)
	}
	return rec.Epoch
}

// countLines counts the lines of logs holding every one of want.
func countLines(logs string, want ...string) int {
	n := 0
	for _, l := range strings.Split(logs, "\n") {
		ok := l != ""
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			n++
		}
	}
	return n
}

// TestRun_RefusedPartitionFailsReadyz: a partition whose checkpoint was
// taken under other windows cannot be taken over by an instance whose
// windows.size changed. That instance must say so where an operator looks
// (/readyz names the market and the partition, the log says it once and
// not at every attempt) without asking a supervisor to restart it
// (/healthz stays 200: a restart does not change the configuration), and
// leave the partition's positions in the stream, so that once the
// original windows are back the partition is taken over and every
// position published meanwhile is processed.
func TestRun_RefusedPartitionFailsReadyz(t *testing.T) {
	ns := testenv.StartNATS(t)
	js, err := jetstream.New(ns.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	const market = "harbour"
	orig := partitionedConfig(t, market, ns.URL(), "windows: {idle_timeout: 0s, size: 5m, slide: 1m}\n")
	changed := orig
	changed.Windows.Size = 10 * time.Minute

	// Only partition 0 gets positions, hence a checkpoint: partition 1
	// has nothing to restore and must not be named.
	subject := strings.TrimSuffix(orig.JetStream.PartitionSubject(0), "*")
	courier := 0
	publish := func() uint64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		courier++
		c := fmt.Sprintf("c%d", courier%4)
		payload := fmt.Appendf(nil, `{"courier":%q,"lat":41.98,"lon":2.82,"timestamp_ms":%d}`, c, time.Now().UnixMilli())
		ack, err := js.Publish(ctx, subject+c, payload)
		if err != nil {
			t.Fatalf("publish into partition 0: %v", err)
		}
		return ack.Sequence
	}
	waitPartition0 := func(base, what string, cond func(partitionStatus) bool) {
		t.Helper()
		testenv.WaitFor(t, 30*time.Second, what, func() bool {
			ps := partitions(t, base, market)
			return len(ps) == 2 && cond(ps[0])
		})
	}

	// 1. The original windows: partition 0 processed and checkpointed.
	svc := startService(t, []config.Config{orig}, service.Deps{Log: testLog(t), Shards: 1})
	base := waitReady(t, svc, 30*time.Second)
	var last uint64
	for range 6 {
		last = publish()
	}
	waitPartition0(base, "partition 0 checkpointed", func(p partitionStatus) bool { return p.Owned && p.Checkpoint >= last })
	svc.stop(t, 30*time.Second)

	// 2. windows.size changed: partition 0 is refused.
	var logs testenv.LogBuffer
	svc = startService(t, []config.Config{changed}, service.Deps{Log: slog.New(slog.NewTextHandler(&logs, nil)), Shards: 1})
	base = listenerBase(t, svc, 30*time.Second)
	last = publish() // a delivery is what makes the instance claim the partition
	ready := waitStatus(t, base+"/readyz", http.StatusServiceUnavailable, 30*time.Second,
		"harbour: partition 0 cannot be taken over", "windows.size")
	t.Logf("/readyz while refused: %s", strings.TrimSpace(ready))
	if strings.Contains(ready, "partition 1") {
		t.Errorf("/readyz names partition 1, which has no checkpoint: %q", ready)
	}
	if strings.Contains(ready, "dead") {
		t.Errorf("/readyz calls a refused partition dead: %q", ready)
	}
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while a partition is refused: %d %q, want 200: a restart under the same configuration cannot fix it", code, body)
	}

	// Each new position is delivered, so claimed and refused again: the
	// claim's epoch counts the attempts. Attempts e+1 and e+2 have
	// finished (logged or not) once attempt e+3 has claimed.
	refusedAt := claimEpoch(t, js, market, 0)
	for epoch := refusedAt; epoch < refusedAt+3; {
		last = publish()
		prev := epoch
		testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("another claim of partition 0 after epoch %d", prev), func() bool {
			epoch = claimEpoch(t, js, market, 0)
			return epoch > prev
		})
	}
	l := logs.String()
	if n := countLines(l, "level=ERROR", "market=harbour", "partition=0", "cannot be taken over", "windows.size"); n != 1 {
		t.Errorf("%d ERROR lines saying partition 0 cannot be taken over after %d attempts, want exactly 1:\n%s",
			n, claimEpoch(t, js, market, 0)-refusedAt+1, l)
	}
	waitStatus(t, base+"/readyz", http.StatusServiceUnavailable, 5*time.Second, "harbour: partition 0 cannot be taken over")
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after repeated refusals: %d %q, want 200", code, body)
	}
	if ps := partitions(t, base, market); ps[0].Owned || ps[0].Processed >= last {
		t.Errorf("partition 0 under the changed windows: %+v; want neither owned nor processed to sequence %d", ps[0], last)
	}
	svc.stop(t, 30*time.Second)

	// 3. The original windows again: the positions published while it was
	// refused are processed, and the instance is ready.
	svc = startService(t, []config.Config{orig}, service.Deps{Log: testLog(t), Shards: 1})
	base = listenerBase(t, svc, 30*time.Second)
	last = publish()
	waitPartition0(base, fmt.Sprintf("partition 0 owned and processed to sequence %d", last),
		func(p partitionStatus) bool { return p.Owned && p.Processed >= last })
	waitStatus(t, base+"/readyz", http.StatusOK, 30*time.Second, "ready")
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %q", code, body)
	}
	svc.stop(t, 30*time.Second)
}

// TestRun_DeadPartitionedMarketFailsHealthz: a jetstream-source market
// that hits an error no retry can fix at start must be dead as an MQTT
// market is (TestRun_MarketThatCannotStartIsLoudAndDead): /healthz fails
// naming it and the cause once, so that a supervisor restarts the process
// and an operator sees why; /readyz says it is dead; an ERROR is logged;
// a healthy market in the same process is neither named nor held back;
// and shutdown does not hang.
func TestRun_DeadPartitionedMarketFailsHealthz(t *testing.T) {
	t.Run("results stream the server will not update", func(t *testing.T) {
		mosq := testenv.StartMosquitto(t)
		ns := testenv.StartNATS(t)
		dead := partitionedConfig(t, "valencia", ns.URL(), "windows: {idle_timeout: 0s}\n")
		// The results stream exists in memory storage: JetStream cannot
		// change a stream's storage, so edgeproc's file-storage stream
		// can never be had without an operator deleting this one.
		js, err := jetstream.New(ns.Connect(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p := dead.NATS.SubjectPrefix
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name:     dead.NATS.Stream,
			Subjects: []string{p + ".dashboard.valencia.>", p + ".late.valencia", p + ".rejected.valencia"},
			Storage:  jetstream.MemoryStorage,
		}); err != nil {
			t.Fatalf("create the results stream beforehand: %v", err)
		}
		checkDead(t, mosq, ns, dead, "can not change storage type")
	})
	t.Run("mqtt ingest cannot start", func(t *testing.T) {
		mosq := testenv.StartMosquitto(t)
		ns := testenv.StartNATS(t)
		ca := filepath.Join(t.TempDir(), "missing-ca.pem")
		dead := partitionedConfig(t, "valencia", ns.URL(), fmt.Sprintf(`windows: {idle_timeout: 0s}
mqtt: {url: %q, ca_file: %q}
`, strings.Replace(mosq.URL(), "mqtt://", "mqtts://", 1), ca))
		dead.JetStream.Ingest = "mqtt"
		checkDead(t, mosq, ns, dead, "mqtt ingest: read ca_file")
	})
}

// checkDead runs dead, which must die with an error containing cause, next
// to a healthy MQTT market, and checks what
// TestRun_DeadPartitionedMarketFailsHealthz requires.
func checkDead(t *testing.T, mosq *testenv.Mosquitto, ns *testenv.NATS, dead config.Config, cause string) {
	t.Helper()
	good := mustConfig(t, "girona", mosq.URL(), ns.URL())
	var logs testenv.LogBuffer
	svc := startService(t, []config.Config{good, dead}, service.Deps{Log: slog.New(slog.NewTextHandler(&logs, nil)), Shards: 1})
	base := listenerBase(t, svc, 20*time.Second)
	defer func() {
		if t.Failed() {
			t.Logf("service log:\n%s", logs.String())
		}
	}()

	health := waitStatus(t, base+"/healthz", http.StatusServiceUnavailable, 20*time.Second, "dead: valencia: ", cause)
	t.Logf("/healthz: %s", strings.TrimSpace(health))
	if strings.Contains(health, "girona") {
		t.Errorf("/healthz names the healthy market: %q", health)
	}
	// As for an MQTT market: the endpoint names the market, the cause
	// need not name it again.
	if n := strings.Count(health, "valencia"); n != 1 {
		t.Errorf("/healthz names the dead market %d times, want once: %q", n, health)
	}
	if n := strings.Count(health, cause); n != 1 {
		t.Errorf("/healthz gives the cause %q %d times, want once: %q", cause, n, health)
	}
	waitStatus(t, base+"/readyz", http.StatusServiceUnavailable, 20*time.Second, "valencia: dead: ", cause)
	// The healthy market becomes ready and is not named.
	var ready string
	testenv.WaitFor(t, 30*time.Second, "/readyz naming valencia only", func() bool {
		_, ready = get(t, base+"/readyz")
		return strings.Contains(ready, "valencia: dead") && !strings.Contains(ready, "girona")
	})
	if l := logs.String(); countLines(l, "level=ERROR", "market=valencia", cause) == 0 {
		t.Errorf("no ERROR log line naming the market and %q while it is dead", cause)
	}

	svc.stopFailed(t, "valencia", 15*time.Second)
}
