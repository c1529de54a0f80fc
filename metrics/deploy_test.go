package metrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/mqtt"
)

// exposedNames returns every metric family the collector exposes with every
// part present, histograms with their _bucket, _sum and _count series.
func exposedNames(t *testing.T) map[string]bool {
	t.Helper()
	var h metrics.Histogram
	h.Observe(time.Millisecond)
	full := metrics.Market{Name: "girona", Snapshot: func() metrics.Snapshot {
		return metrics.Snapshot{
			Engine:    engine.Stats{Watermark: 1, Rejected: map[string]int64{"bad_json": 1}, Results: map[string]int64{"distance": 1}},
			HasEngine: true, Bridge: bridge.Stats{}, HasBridge: true, MQTT: mqtt.Stats{}, HasMQTT: true,
			Durability: metrics.Durability{LastCheckpoint: time.Now(), Fsync: h.Snapshot()}, HasDurability: true,
			ResultLatency: h.Snapshot(), HasResultLatency: true, HasLake: true,
		}
	}}
	names := map[string]bool{}
	for series := range gather(t, metrics.NewCollector(nil, full)) {
		name, _, _ := strings.Cut(series, "{")
		names[name] = true
	}
	for name := range names {
		if name == "edgeproc_wal_fsync_seconds" || name == "edgeproc_result_ack_latency_seconds" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = true
			}
		}
	}
	return names
}

var metricRe = regexp.MustCompile(`\bedgeproc_[a-z0-9_]+`)

// checkNames fails for every edgeproc_ name in text that is not exposed.
func checkNames(t *testing.T, where, text string, exposed map[string]bool) int {
	t.Helper()
	found := metricRe.FindAllString(text, -1)
	for _, n := range found {
		if !exposed[n] {
			t.Errorf("%s uses %s, which edgeproc does not expose", where, n)
		}
	}
	return len(found)
}

func TestGrafanaDashboard_UsesExistingMetrics(t *testing.T) {
	data, err := os.ReadFile("../deploy/grafana/edgeproc.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID, Title    string
		SchemaVersion int
		Panels        []struct {
			ID      int
			Type    string
			Title   string
			GridPos struct{ X, Y, W, H int }
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 || len(d.Panels) == 0 {
		t.Fatalf("dashboard lacks uid, title, schemaVersion or panels")
	}
	exposed := exposedNames(t)
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d missing or repeated", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" || p.Type == "" || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %d: title %q, type %q, grid %+v", p.ID, p.Title, p.Type, p.GridPos)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if checkNames(t, "panel "+p.Title, tg.Expr, exposed) == 0 {
				t.Errorf("panel %q: query %q names no edgeproc metric", p.Title, tg.Expr)
			}
		}
	}
}

func TestAlertRules_UseExistingMetrics(t *testing.T) {
	data, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	exprs := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		exprs += checkNames(t, "alerts.yml", line, exposedNames(t))
	}
	if exprs < 10 {
		t.Errorf("alerts.yml names %d edgeproc metrics, want the rules of the runbook", exprs)
	}
}
