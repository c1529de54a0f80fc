package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/mqttsource"
	"github.com/km0/edgeproc/result"
)

// check-config refuses a windows.size change against the saved state, as
// run would at recovery (engine.ErrSnapshotConfig), before anything starts.
func TestCheckConfig_RefusesWhatTheStateRefuses(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	file := func(size string) string {
		p := filepath.Join(dir, "girona-"+size+".yaml")
		src := fmt.Sprintf("market: girona\nwindows:\n  size: %s\nstate:\n  dir: %s\n", size, state)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	saved, changed := file("5m"), file("10m")

	// The state a market of saved leaves: its engine's checkpoint.
	cfg, err := config.Load(saved)
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(market.EngineConfig(cfg), func([]result.Record) {})
	e.Push(&engine.Input{Payload: []byte(`{"courier":"c1","lat":41.98,"lon":2.82,"timestamp_ms":1700000000000}`), Arrival: 1_700_000_000_000, HasArrival: true})
	var snap [][]byte
	e.Checkpoint(1, func(s [][]byte) { snap = s })
	e.Stop()
	d, err := checkpoint.Open(mqttsource.CheckpointDir(state), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Write(1, snap...); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runCLI(t, "check-config", saved)
	if code != 0 || !strings.Contains(out, saved+": state "+state+": the newest checkpoint (log index 1) agrees") {
		t.Errorf("the saved settings: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = runCLI(t, "check-config", changed)
	want := "edgeproc check-config: " + changed + ": restore " + filepath.Join(mqttsource.CheckpointDir(state), "checkpoint-00000000000000000001.ckpt") +
		": snapshot taken with another configuration: windows.size differs (snapshot 300000, configured 600000); restore the old configuration, or start from an empty state directory (move " + state + " aside)\n"
	if code != 1 || errs != want || out != "" {
		t.Errorf("windows.size changed: exit %d, stdout %q, stderr\n%s\nwant\n%s", code, out, errs, want)
	}
	code, out, errs = runCLI(t, "check-config", "--state=false", changed)
	if code != 0 || !strings.Contains(out, "ok (market girona)") || strings.Contains(out, "state") {
		t.Errorf("--state=false: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
