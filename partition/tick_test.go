package partition

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/km0/edgeproc/internal/testenv"
)

// TestIdleTicks: when the whole fleet goes silent, the owner publishes
// ticks into the partition, the idle rule closes every courier's last
// session at a tick's stream timestamp, and the results equal the replay
// of the partition's stream, ticks included.
func TestIdleTicks(t *testing.T) {
	ns := testenv.StartNATS(t)
	cfg := testConfig(t, ns.URL(), 1)
	cfg.Windows.IdleTimeout = time.Second
	cfg.Windows.Gap = 8 * time.Second
	cfg.Windows.ToleratedDelay = time.Second
	cfg.Windows.Size, cfg.Windows.Slide = 20*time.Second, 10*time.Second
	a := startInstance(t, cfg, ns.Connect(t), "a", nil)
	testenv.WaitFor(t, 30*time.Second, "a ready", a.r.Ready)
	const couriers = 20
	msgs := onePartitionFleet(couriers, 2*time.Minute, 5)
	pub := ns.Connect(t)
	publishFleet(t, pub, msgs, 50000, nil)
	silentFrom := time.Now().UnixMilli()
	closed := func() map[string]bool {
		out := map[string]bool{}
		for _, m := range testenv.ReadStream(t, ns.URL(), cfg.NATS.Stream) {
			var r struct {
				Type      string `json:"type"`
				Courier   string `json:"courier"`
				EmittedAt int64  `json:"emitted_at_ms"`
			}
			if json.Unmarshal(m.Data, &r) == nil && r.Type == "no_signal" && r.EmittedAt >= silentFrom {
				out[r.Courier] = true
			}
		}
		return out
	}
	testenv.WaitFor(t, 60*time.Second, "every courier's last session closed by idle ticks", func() bool { return len(closed()) == couriers })
	checkHTTP(t, a.r)
	a.Stop()
	ticks := 0
	for _, m := range testenv.ReadStored(t, ns.URL(), cfg.JetStream.Stream, cfg.JetStream.PartitionSubject(0)) {
		if kindOf(m.Subject, m.Header) == msgTick {
			ticks++
		}
	}
	t.Logf("%d ticks in the partition", ticks)
	if ticks == 0 {
		t.Fatal("no tick in the partition")
	}
	equalsReplay(t, ns.URL(), cfg)
}

// checkHTTP reads the runner's partition status and metrics while it
// owns partition 0 of a single-partition market.
func checkHTTP(t *testing.T, r *Runner) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collector())
	mux := http.NewServeMux()
	mux.Handle("GET /partitions", r.StatusHandler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) (int, string) {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := get("/partitions")
	var ready struct {
		Ready      bool     `json:"ready"`
		Partitions []Status `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil || code != http.StatusOK || !ready.Ready ||
		len(ready.Partitions) != 1 || !ready.Partitions[0].Owned || ready.Partitions[0].Processed == 0 {
		t.Errorf("/partitions: %d %s (%v)", code, body, err)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{
		`edgeproc_partition_owned{instance="a",market="girona",partition="0"} 1`,
		`edgeproc_partition_checkpoint_sequence{instance="a",market="girona",partition="0"}`,
		`edgeproc_partition_lag_messages{instance="a",market="girona",partition="0"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
