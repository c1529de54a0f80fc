package mqttsource

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/result"
)

func stateConfig(t *testing.T, dir, windows string) config.Config {
	t.Helper()
	y := fmt.Sprintf("market: girona\nwindows: {%s}\nstate: {dir: %q}\n", windows, dir)
	c, err := config.Parse(strings.NewReader(y), "girona.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writeState leaves in cfg's state.dir the checkpoint a market's engine
// writes, at tag 3, after a few positions.
func writeState(t *testing.T, cfg config.Config) {
	t.Helper()
	e := engine.New(market.EngineConfig(cfg), func([]result.Record) {})
	for i := range 3 {
		e.Push(&engine.Input{
			Payload: fmt.Appendf(nil, `{"courier":"c1","lat":41.98,"lon":2.82,"timestamp_ms":%d}`, 1_700_000_000_000+int64(i)*5000),
			Arrival: 1_700_000_000_000 + int64(i)*5000, HasArrival: true,
		})
	}
	var snap [][]byte
	e.Checkpoint(3, func(s [][]byte) { snap = s })
	e.Stop()
	d, err := checkpoint.Open(filepath.Join(cfg.State.Dir, checkpointDir), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Write(3, snap...); err != nil {
		t.Fatal(err)
	}
}

// CheckState refuses what recovery refuses, with recovery's own message,
// and passes what it restores.
func TestCheckState_AsRecoverySees(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "girona")
	saved := stateConfig(t, dir, "size: 5m")

	if got, err := CheckState(saved); err != nil || got != "" {
		t.Fatalf("no state dir: got %q, %v; want nothing", got, err)
	}
	writeState(t, saved)
	got, err := CheckState(saved)
	if err != nil || !strings.Contains(got, "(log index 3) agrees") {
		t.Fatalf("the same settings: got %q, %v", got, err)
	}

	for _, c := range []struct{ name, windows, differs string }{
		{"windows.size", "size: 10m", "windows.size differs"},
		{"windows.gap", "size: 5m, gap: 4m", "windows.gap differs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			changed := stateConfig(t, dir, c.windows)
			_, err := CheckState(changed)
			if !errors.Is(err, engine.ErrSnapshotConfig) || !strings.Contains(err.Error(), c.differs) {
				t.Fatalf("got %v, want %v naming %q", err, engine.ErrSnapshotConfig, c.differs)
			}
			var logs bytes.Buffer
			s := New(changed, slog.New(slog.NewTextHandler(&logs, nil)), Deps{})
			s.mkt = market.New(changed, s, market.Deps{})
			rerr := s.recover(market.EngineConfig(changed))
			if rerr == nil || rerr.Error() != err.Error() {
				t.Errorf("check:    %v\nrecovery: %v", err, rerr)
			}
		})
	}
}
