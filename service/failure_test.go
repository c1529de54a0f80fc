package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/service"
)

// waitStatus polls url until it answers code with a body containing every
// want, and returns the body.
func waitStatus(tb testing.TB, url string, code int, d time.Duration, want ...string) string {
	tb.Helper()
	deadline := time.Now().Add(d)
	var body string
	var got int
	for {
		got, body = get(tb, url)
		ok := got == code
		for _, w := range want {
			ok = ok && strings.Contains(body, w)
		}
		if ok {
			return body
		}
		if time.Now().After(deadline) {
			tb.Fatalf("GET %s: got %d %q, want %d with %q within %v", url, got, body, code, want, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRun_MarketThatCannotStartIsLoudAndDead: a market whose MQTT source
// cannot start (its CA file is unreadable) is logged at once with the
// cause, /healthz fails naming it so that a supervisor restarts the
// process, /readyz names it and why, the other market keeps running, and
// shutdown does not hang.
func TestRun_MarketThatCannotStartIsLoudAndDead(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	good := mustConfig(t, "girona", mosq.URL(), ns.URL())
	bad := mustConfig(t, "valencia", mosq.URL(), ns.URL())
	bad.MQTT.URL = strings.Replace(mosq.URL(), "mqtt://", "mqtts://", 1)
	bad.MQTT.CAFile = filepath.Join(t.TempDir(), "missing-ca.pem")
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	svc := startService(t, []config.Config{good, bad}, service.Deps{Log: log})

	var base string
	select {
	case a := <-svc.addr:
		base = "http://" + a.String()
	case <-time.After(20 * time.Second):
		t.Fatalf("no HTTP listener")
	}
	health := waitStatus(t, base+"/healthz", http.StatusServiceUnavailable, 20*time.Second, "valencia", "missing-ca.pem")
	if strings.Contains(health, "girona") {
		t.Errorf("/healthz names the healthy market: %q", health)
	}
	if n := strings.Count(health, "valencia"); n != 1 {
		t.Errorf("/healthz names the dead market %d times, want once: %q", n, health)
	}
	ready := waitStatus(t, base+"/readyz", http.StatusServiceUnavailable, 20*time.Second, "valencia: dead: start mqtt")
	// The healthy market becomes ready and is not named.
	deadline := time.Now().Add(20 * time.Second)
	for strings.Contains(ready, "girona") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		_, ready = get(t, base+"/readyz")
	}
	if strings.Contains(ready, "girona") {
		t.Errorf("/readyz: %q, want only valencia named", ready)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "market=valencia") || !strings.Contains(l, "missing-ca.pem") {
		t.Errorf("no ERROR log naming the market and the CA file:\n%s", l)
	}

	svc.stopFailed(t, "valencia", 15*time.Second)
}

// TestRun_SilentMarketWritesNothing: with the idle rule on, a market that
// hears nothing appends no ticks and writes no checkpoints until a tick
// would fire something (flash wear on an edge box).
func TestRun_SilentMarketWritesNothing(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	c := mustConfig(t, "girona", mosq.URL(), ns.URL())
	c.Windows.IdleTimeout = 300 * time.Millisecond
	c.State.CheckpointInterval = 100 * time.Millisecond
	reg := prometheus.NewRegistry()
	svc := startService(t, []config.Config{c}, service.Deps{Log: testLog(t), Registry: reg})
	waitReady(t, svc, 20*time.Second)

	quiet := func(what string) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // what was due is written
		wal0, ck0 := gauge(t, reg, "edgeproc_wal_size_bytes", "girona"), gauge(t, reg, "edgeproc_checkpoints_total", "girona")
		time.Sleep(1500 * time.Millisecond) // five idle timeouts, fifteen checkpoint intervals
		wal1, ck1 := gauge(t, reg, "edgeproc_wal_size_bytes", "girona"), gauge(t, reg, "edgeproc_checkpoints_total", "girona")
		if wal1 != wal0 || ck1 != ck0 {
			t.Errorf("%s: in 1.5 s of silence the log grew %v → %v bytes and checkpoints went %v → %v; want no writes", what, wal0, wal1, ck0, ck1)
		}
	}
	quiet("before any position")
	if got := gauge(t, reg, "edgeproc_checkpoints_total", "girona"); got != 0 {
		t.Errorf("%v checkpoints written for a market that never heard a position, want 0", got)
	}

	// One position: checkpointed once; its window ends minutes ahead, so
	// the silence after it writes nothing either.
	pub := mosq.Publisher(t, "silent-pub")
	pub.MustPublish(t, "km0/girona/positions/c1", []byte(fmt.Sprintf(`{"courier":"c1","lat":41.98,"lon":2.82,"timestamp_ms":%d}`, time.Now().UnixMilli())))
	deadline := time.Now().Add(10 * time.Second)
	for gauge(t, reg, "edgeproc_checkpoints_total", "girona") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the position was never checkpointed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	quiet("after one position")
}

// TestRun_FullStateDiskStallsThenResumes: when the state disk fills up the
// market stops acking (the broker keeps the rest), stays up (/healthz 200)
// and says why it is not ready; once space returns it resumes by itself,
// and every published position reaches the engine.
func TestRun_FullStateDiskStallsThenResumes(t *testing.T) {
	disk := testenv.Tmpfs(t, "1m")
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	c := mustConfig(t, "girona", mosq.URL(), ns.URL())
	c.State.Dir = filepath.Join(disk, "girona")
	rec := newRecorder()
	svc := startService(t, []config.Config{c}, service.Deps{Log: testLog(t), Record: rec.record})
	base := waitReady(t, svc, 20*time.Second)

	// About 2 MB of positions, twice the disk: padding in an unknown field
	// keeps them valid.
	pub := mosq.Publisher(t, "disk-pub")
	pad := strings.Repeat("x", 900)
	published := map[string]bool{}
	start := time.Now().UnixMilli()
	for i := 0; i < 2000; i++ {
		p := fmt.Sprintf(`{"courier":"c%d","lat":41.98,"lon":2.82,"timestamp_ms":%d,"pad":%q}`, i%50, start+int64(i), pad)
		pub.MustPublish(t, fmt.Sprintf("km0/girona/positions/c%d", i%50), []byte(p))
		published[p] = true
	}
	ready := waitStatus(t, base+"/readyz", http.StatusServiceUnavailable, 30*time.Second, "girona: disk: write-ahead log stalled")
	t.Logf("while the disk is full: /readyz %q", strings.TrimSpace(ready))
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while the disk is full: %d %q, want 200: the process must stay up", code, body)
	}

	testenv.ResizeTmpfs(t, disk, "64m")
	rec.waitSeen(t, published, 60*time.Second)
	waitStatus(t, base+"/readyz", http.StatusOK, 30*time.Second, "ready")
	svc.stop(t, 15*time.Second)
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(target, disk) {
			t.Errorf("file still open after shutdown: %s", target)
		}
	}
}

// TestRun_DeletedStreamIsRecreated: a stream lost on the server (deleted,
// or NATS restarted on an empty store) is recreated and delivery goes on.
func TestRun_DeletedStreamIsRecreated(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	c := mustConfig(t, "girona", mosq.URL(), ns.URL())
	c.Windows.Size, c.Windows.Slide, c.Windows.Gap, c.Windows.ToleratedDelay = time.Second, time.Second, time.Second, 0
	var logs testenv.LogBuffer
	svc := startService(t, []config.Config{c}, service.Deps{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	waitReady(t, svc, 20*time.Second)

	nc := ns.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, c.NATS.Stream); err != nil {
		t.Fatalf("delete the stream: %v", err)
	}
	// Positions a second apart, in the past (a position counts for the
	// watermark at most at its arrival): each closes the previous window,
	// whose result must land in the recreated stream.
	pub := mosq.Publisher(t, "stream-pub")
	now := time.Now().UnixMilli() - 10_000
	for i := 0; i < 5; i++ {
		pub.MustPublish(t, "km0/girona/positions/c1", []byte(fmt.Sprintf(`{"courier":"c1","lat":41.98,"lon":2.82,"timestamp_ms":%d}`, now+int64(i)*1000)))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := js.Stream(sctx, c.NATS.Stream)
		scancel()
		var n uint64
		if err == nil {
			n = st.CachedInfo().State.Msgs
		}
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			for name := range js.StreamNames(context.Background()).Name() {
				t.Logf("stream on the server: %s", name)
			}
			t.Fatalf("%d results in the recreated stream within 30 s, want 3 or more (err %v)\n%s", n, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "recreat") {
		t.Errorf("no WARN saying the stream was recreated:\n%s", l)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "recreat") {
			t.Logf("log: %s", line)
		}
	}
	svc.stop(t, 15*time.Second)
}
