package partition

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCheckMapping_PositionsPastThePartitionsAreReported: a position on
// the subject of partition jetstream.partitions (a mapping with more
// partitions than the configuration) makes the instance not ready, with
// the reason, and sets the mismatch gauge; once the stream holds none
// there, it is ready again.
func TestCheckMapping_PositionsPastThePartitionsAreReported(t *testing.T) {
	r, _, ctx := setUpRunner(t, 2)
	close(r.ready)
	subject := r.cfg.JetStream.PartitionSubject(2)
	r.checkMapping(ctx, subject)
	if why := r.NotReady(); strings.Contains(why, "mapping") || strings.Contains(why, subject) {
		t.Fatalf("reported before any position past the partitions: %q", why)
	}
	if _, err := r.js.Publish(ctx, "part.girona.2.c1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	r.checkMapping(ctx, subject)
	if why := r.NotReady(); !strings.Contains(why, "part.girona.2.*") || !strings.Contains(why, "jetstream.partitions 2") {
		t.Errorf("NotReady = %q, want the mismatch on part.girona.2.*", why)
	}
	if got := gauge(t, r, "edgeproc_partition_mapping_mismatch"); got != 1 {
		t.Errorf("mismatch gauge %v, want 1", got)
	}
	s, err := r.js.Stream(ctx, r.cfg.JetStream.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	r.checkMapping(ctx, subject)
	if why := r.NotReady(); strings.Contains(why, subject) {
		t.Errorf("NotReady = %q after the purge, want no mismatch", why)
	}
	if got := gauge(t, r, "edgeproc_partition_mapping_mismatch"); got != 0 {
		t.Errorf("mismatch gauge %v after the purge, want 0", got)
	}
}

// gauge reads one metric of the runner's per-partition collector.
func gauge(t *testing.T, r *Runner, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not gathered", name)
	return 0
}
