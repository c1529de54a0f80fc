package service_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/service"
)

// waitGauge waits until a series reaches at least min.
func waitGauge(tb testing.TB, reg *prometheus.Registry, name, market string, min float64, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for gauge(tb, reg, name, market) < min {
		if time.Now().After(deadline) {
			tb.Fatalf("%s stayed at %v, want at least %v within %v", name, gauge(tb, reg, name, market), min, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// uniqueByLine keeps the first input of each log index: a recovery pushes
// the inputs after its checkpoint again, with the same index.
func uniqueByLine(tb testing.TB, inputs []engine.Input) []engine.Input {
	tb.Helper()
	seen := map[int64]bool{}
	var out []engine.Input
	for _, in := range inputs {
		if !seen[in.Line] {
			seen[in.Line] = true
			out = append(out, in)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	for i, in := range out {
		if i > 0 && in.Arrival < out[i-1].Arrival {
			tb.Fatalf("input %d (log index %d) arrived before the previous one: the log reordered entries", i, in.Line)
		}
	}
	return out
}

// TestRun_RestartFromStateEqualsUninterruptedRun stops the service half-way
// and starts it again on the same state directory. Whether it resumes from
// the final checkpoint or, that one lost, from the previous checkpoint plus
// the write-ahead log, the stream must hold exactly the results of one
// uninterrupted run over the same inputs. The previous checkpoint is a
// whole one with the incremental ones after it: the fallback restores
// them all.
func TestRun_RestartFromStateEqualsUninterruptedRun(t *testing.T) {
	tests := []struct {
		name       string
		dropNewest bool
	}{
		{"from the final checkpoint", false},
		{"newest checkpoint lost: previous one plus the log", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mosq := testenv.StartMosquitto(t)
			ns := testenv.StartNATS(t)
			cfg := mustConfig(t, "girona", mosq.URL(), ns.URL())
			cfg.State.CheckpointInterval = 100 * time.Millisecond
			rec := newRecorder()
			msgs := testenv.FleetMessages("girona", 20, 10*time.Minute, 17, time.Now().Add(-time.Minute))
			half := len(msgs) / 2
			pub := mosq.Publisher(t, "restart-state-pub")

			// First run: half the fleet, at least two checkpoints.
			reg := prometheus.NewRegistry()
			svc := startService(t, []config.Config{cfg}, service.Deps{Log: testLog(t), Record: rec.record, Registry: reg})
			waitReady(t, svc, 20*time.Second)
			published := map[string]bool{}
			// A whole checkpoint (the first of a process), then an
			// incremental one on it (the second, once more is applied),
			// then the whole one of the shutdown, which the newest is not:
			// two whole checkpoints whatever the timing.
			for i, m := range msgs[:half] {
				pub.MustPublish(t, m.Topic, m.Payload)
				published[string(m.Payload)] = true
				if i == half/2 {
					rec.waitSeen(t, published, 30*time.Second)
					waitGauge(t, reg, "edgeproc_checkpoints_total", "girona", 1, 10*time.Second)
				}
			}
			rec.waitSeen(t, published, 30*time.Second)
			waitGauge(t, reg, "edgeproc_checkpoints_incremental_total", "girona", 1, 10*time.Second)
			svc.stop(t, 15*time.Second)
			if got := gauge(t, reg, "edgeproc_checkpoint_size_bytes", "girona"); got <= 0 {
				t.Errorf("checkpoint size: got %v, want > 0", got)
			}

			ckdir := filepath.Join(cfg.State.Dir, "checkpoints")
			// From the final checkpoint nothing is replayed; from the
			// previous one, the log after the last incremental checkpoint
			// on it, up to the final one's tag.
			var wantReplayed uint64
			if tt.dropNewest {
				names := ckptFiles(t, ckdir)
				if len(names) != 2 {
					t.Fatalf("checkpoint files: got %v, want the newest and the previous", names)
				}
				prev, final := ckptTag(t, names[0]), ckptTag(t, names[1])
				chain := prev
				for _, d := range deltaTags(t, ckdir) {
					if d > prev && d <= final {
						chain = max(chain, d)
					}
				}
				wantReplayed = final - chain
				if err := os.Remove(filepath.Join(ckdir, names[1])); err != nil {
					t.Fatal(err)
				}
			}

			// Second run on the same state: the rest of the fleet.
			reg = prometheus.NewRegistry()
			svc = startService(t, []config.Config{cfg}, service.Deps{Log: testLog(t), Record: rec.record, Registry: reg})
			waitReady(t, svc, 20*time.Second)
			if got := gauge(t, reg, "edgeproc_recovery_replayed_entries", "girona"); got != float64(wantReplayed) {
				t.Errorf("entries replayed at start: got %v, want %d", got, wantReplayed)
			}
			for _, m := range msgs[half:] {
				pub.MustPublish(t, m.Topic, m.Payload)
				published[string(m.Payload)] = true
			}
			rec.waitSeen(t, published, 30*time.Second)
			svc.stop(t, 15*time.Second)

			inputs := uniqueByLine(t, rec.inputs["girona"])
			if len(inputs) < len(msgs) {
				t.Fatalf("got %d inputs, want at least the %d published", len(inputs), len(msgs))
			}
			compareResults(t, streamResults(t, ns.URL(), cfg.NATS.Stream), expectedResults(t, cfg, inputs))
		})
	}
}

// ckptTag is the tag of a whole checkpoint's file name.
func ckptTag(tb testing.TB, name string) uint64 {
	tb.Helper()
	var tag uint64
	if _, err := fmt.Sscanf(name, "checkpoint-%d.ckpt", &tag); err != nil {
		tb.Fatalf("checkpoint file %s: %v", name, err)
	}
	return tag
}

// deltaTags are the tags of the incremental checkpoints in dir
// (delta-TAG-BASE.ckpt).
func deltaTags(tb testing.TB, dir string) []uint64 {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var tags []uint64
	for _, e := range ents {
		var tag, base uint64
		if n, _ := fmt.Sscanf(e.Name(), "delta-%d-%d.ckpt", &tag, &base); n == 2 {
			tags = append(tags, tag)
		}
	}
	return tags
}

// ckptFiles lists the whole checkpoints in dir, not the incremental ones.
func ckptFiles(tb testing.TB, dir string) []string {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "checkpoint-") && strings.HasSuffix(e.Name(), ".ckpt") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// TestRun_UnusableStateDirNamesThePath: a state dir that cannot be created
// stops the market at start with an error naming it.
func TestRun_UnusableStateDirNamesThePath(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	cfg := mustConfig(t, "girona", mosq.URL(), ns.URL())
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.State.Dir = filepath.Join(file, "state")
	svc := startService(t, []config.Config{cfg}, service.Deps{Log: testLog(t)})
	select {
	case err := <-svc.done:
		if err == nil || !strings.Contains(err.Error(), cfg.State.Dir) {
			t.Errorf("Run: got %v, want an error naming %s", err, cfg.State.Dir)
		}
		svc.done <- nil
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not fail on an unusable state dir")
	}
}
