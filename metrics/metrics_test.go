package metrics_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/mqtt"
)

// gather registers c on a fresh registry and returns every sample as
// "name{label=value,...}" -> value.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("register: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return math.NaN()
}

func TestCollector_ReadsSnapshots(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	full := metrics.Market{Name: "girona", Snapshot: func() metrics.Snapshot {
		return metrics.Snapshot{
			Engine: engine.Stats{
				Received: 10, Accepted: 7, Duplicates: 1, LateDistance: 2, LateSession: 3, MissedMemberships: 6, Revisions: 12, Recovered: 13, Couriers: 4, InFlight: 2, InFlightMax: 4,
				Rejected:  map[string]int64{"malformed_json": 2, "too_large": 1},
				Results:   map[string]int64{"distance": 5, "rejected": 3},
				Watermark: 940_000,
			},
			HasEngine:  true,
			Bridge:     bridge.Stats{Published: 8, Acked: 6, Duplicates: 1, Errors: 2, Retries: 2, Pending: 2, Connected: true, KVWrites: 9},
			HasBridge:  true,
			MQTT:       mqtt.Stats{Received: 11, Redelivered: 1, Resent: 2, Outstanding: 3, Connected: true, Reconnects: 1},
			HasMQTT:    true,
			QueueDepth: 5, QueueCapacity: 1024, StreamReady: true,
		}
	}}
	starting := metrics.Market{Name: "valencia", Snapshot: func() metrics.Snapshot {
		return metrics.Snapshot{Engine: engine.Stats{Watermark: math.MinInt64}, HasEngine: true, QueueCapacity: 1024}
	}}
	got := gather(t, metrics.NewCollector(func() time.Time { return now }, full, starting))

	cases := []struct {
		series string
		want   float64
	}{
		{"edgeproc_positions_received_total{market=girona}", 10},
		{"edgeproc_positions_accepted_total{market=girona}", 7},
		{"edgeproc_positions_rejected_total{market=girona,reason=malformed_json}", 2},
		{"edgeproc_positions_rejected_total{market=girona,reason=too_large}", 1},
		{"edgeproc_positions_duplicate_total{market=girona}", 1},
		{"edgeproc_positions_late_total{market=girona,operator=distance}", 2},
		{"edgeproc_positions_late_total{market=girona,operator=session}", 3},
		{"edgeproc_window_memberships_missed_total{market=girona}", 6},
		{"edgeproc_distance_revisions_total{market=girona}", 12},
		{"edgeproc_positions_late_recovered_total{market=girona}", 13},
		{"edgeproc_results_total{market=girona,type=distance}", 5},
		{"edgeproc_results_total{market=girona,type=rejected}", 3},
		{"edgeproc_couriers{market=girona}", 4},
		{"edgeproc_watermark_timestamp_seconds{market=girona}", 940},
		{"edgeproc_watermark_lag_seconds{market=girona}", 60},
		{"edgeproc_ingest_queue_depth{market=girona}", 5},
		{"edgeproc_engine_chunks_in_flight{market=girona}", 2},
		{"edgeproc_engine_chunks_in_flight_max{market=girona}", 4},
		{"edgeproc_ingest_queue_capacity{market=girona}", 1024},
		{"edgeproc_bridge_published_total{market=girona}", 8},
		{"edgeproc_bridge_acked_total{market=girona}", 6},
		{"edgeproc_bridge_errors_total{market=girona}", 2},
		{"edgeproc_bridge_pending{market=girona}", 2},
		{"edgeproc_kv_writes_total{market=girona}", 9},
		{"edgeproc_nats_connected{market=girona}", 1},
		{"edgeproc_stream_ready{market=girona}", 1},
		{"edgeproc_mqtt_connected{market=girona}", 1},
		{"edgeproc_mqtt_received_total{market=girona}", 11},
		{"edgeproc_mqtt_outstanding{market=girona}", 3},
		{"edgeproc_mqtt_resent_total{market=girona}", 2},
		{"edgeproc_mqtt_reconnects_total{market=girona}", 1},
		// A market still starting: connection gauges read 0.
		{"edgeproc_nats_connected{market=valencia}", 0},
		{"edgeproc_mqtt_connected{market=valencia}", 0},
		{"edgeproc_stream_ready{market=valencia}", 0},
	}
	for _, c := range cases {
		v, ok := got[c.series]
		if !ok {
			t.Errorf("%s: missing", c.series)
			continue
		}
		if v != c.want {
			t.Errorf("%s: got %v, want %v", c.series, v, c.want)
		}
	}
	// Before the first position there is no watermark: a -9.2e18 gauge
	// would wreck every dashboard graph.
	for _, absent := range []string{
		"edgeproc_watermark_timestamp_seconds{market=valencia}",
		"edgeproc_watermark_lag_seconds{market=valencia}",
		"edgeproc_bridge_pending{market=valencia}",
		"edgeproc_mqtt_received_total{market=valencia}",
	} {
		if v, ok := got[absent]; ok {
			t.Errorf("%s: got %v, want absent", absent, v)
		}
	}
}

func TestCollector_NoGlobalRegistration(t *testing.T) {
	// Two collectors of the same market on two registries must not clash,
	// as they would on a shared global registry.
	m := metrics.Market{Name: "girona", Snapshot: func() metrics.Snapshot { return metrics.Snapshot{} }}
	for range 2 {
		if got := gather(t, metrics.NewCollector(nil, m)); got["edgeproc_mqtt_connected{market=girona}"] != 0 {
			t.Fatalf("got mqtt_connected %v, want 0", got["edgeproc_mqtt_connected{market=girona}"])
		}
	}
}

func TestCollector_Durability(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	var h metrics.Histogram
	for _, d := range []time.Duration{50 * time.Microsecond, 2 * time.Millisecond, 3 * time.Second} {
		h.Observe(d)
	}
	m := metrics.Market{Name: "girona", Snapshot: func() metrics.Snapshot {
		return metrics.Snapshot{HasDurability: true, Durability: metrics.Durability{
			LastCheckpoint: now.Add(-1500 * time.Millisecond), CheckpointDuration: 250 * time.Millisecond,
			CheckpointBytes: 4096, Checkpoints: 3, CheckpointFailures: 1, CheckpointsSkipped: 2, CheckpointsIncremental: 2,
			WALBytes: 1 << 20, WALRepairs: 1, Fsync: h.Snapshot(), Replayed: 77, RecoveryDuration: 2 * time.Second,
		}}
	}}
	fresh := metrics.Market{Name: "valencia", Snapshot: func() metrics.Snapshot {
		return metrics.Snapshot{HasDurability: true}
	}}
	got := gather(t, metrics.NewCollector(func() time.Time { return now }, m, fresh))
	cases := []struct {
		series string
		want   float64
	}{
		{"edgeproc_checkpoint_age_seconds{market=girona}", 1.5},
		{"edgeproc_checkpoint_duration_seconds{market=girona}", 0.25},
		{"edgeproc_checkpoint_size_bytes{market=girona}", 4096},
		{"edgeproc_checkpoints_total{market=girona}", 3},
		{"edgeproc_checkpoints_incremental_total{market=girona}", 2},
		{"edgeproc_checkpoint_failures_total{market=girona}", 1},
		{"edgeproc_checkpoints_skipped_total{market=girona}", 2},
		{"edgeproc_wal_size_bytes{market=girona}", 1 << 20},
		{"edgeproc_wal_repairs_total{market=girona}", 1},
		{"edgeproc_wal_fsync_seconds{market=girona}", 3},
		{"edgeproc_recovery_replayed_entries{market=girona}", 77},
		{"edgeproc_recovery_duration_seconds{market=girona}", 2},
	}
	for _, c := range cases {
		if v, ok := got[c.series]; !ok || v != c.want {
			t.Errorf("%s: got %v (present %v), want %v", c.series, v, ok, c.want)
		}
	}
	if v, ok := got["edgeproc_checkpoint_age_seconds{market=valencia}"]; ok {
		t.Errorf("checkpoint age before the first checkpoint: got %v, want absent", v)
	}
}

func TestHistogram_Buckets(t *testing.T) {
	var h metrics.Histogram
	for _, d := range []time.Duration{0, 100 * time.Microsecond, 101 * time.Microsecond, time.Millisecond, 2 * time.Second} {
		h.Observe(d)
	}
	s := h.Snapshot()
	tests := []struct {
		le   float64
		want uint64
	}{{0.0001, 2}, {0.00025, 3}, {0.001, 4}, {1, 4}}
	for _, tt := range tests {
		if got := s.Buckets[tt.le]; got != tt.want {
			t.Errorf("bucket le=%v: got %d, want %d", tt.le, got, tt.want)
		}
	}
	if s.Count != 5 {
		t.Errorf("count: got %d, want 5", s.Count)
	}
	if want := 2.001201; math.Abs(s.Sum-want) > 1e-9 {
		t.Errorf("sum: got %v, want %v", s.Sum, want)
	}
}

func TestCollector_BuildInfoAndResultLatency(t *testing.T) {
	var h metrics.Histogram
	for _, d := range []time.Duration{3 * time.Millisecond, 40 * time.Millisecond} {
		h.Observe(d)
	}
	m := metrics.Market{Name: "girona", Snapshot: func() metrics.Snapshot {
		return metrics.Snapshot{HasResultLatency: true, ResultLatency: h.Snapshot()}
	}}
	none := metrics.Market{Name: "valencia", Snapshot: func() metrics.Snapshot { return metrics.Snapshot{} }}
	got := gather(t, metrics.NewCollector(nil, m, none))
	if v := got["edgeproc_result_ack_latency_seconds{market=girona}"]; v != 2 {
		t.Errorf("result_ack_latency_seconds count: got %v, want 2", v)
	}
	if v, ok := got["edgeproc_result_ack_latency_seconds{market=valencia}"]; ok {
		t.Errorf("latency of a market without it: got %v, want absent", v)
	}
	found := 0
	for k, v := range got {
		if strings.HasPrefix(k, "edgeproc_build_info{") {
			found++
			if v != 1 || !strings.Contains(k, "version="+metrics.Version) || !strings.Contains(k, "goversion=go") {
				t.Errorf("build info %s = %v", k, v)
			}
		}
	}
	if found != 1 {
		t.Errorf("got %d build_info series, want 1 (no market label)", found)
	}
}
