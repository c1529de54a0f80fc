package mqttsource

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/market"
)

// CheckState checks cfg against the state its market saved in state.dir,
// as run would restore it, without starting or changing anything: it
// reads the newest checkpoint that checks out (as recovery does, passing
// over a damaged newer one) and its header only (engine.CheckSnapshot).
// It returns the error run would fail with (wrapping
// engine.ErrSnapshotConfig for a change of window settings,
// engine.ErrSnapshotVersion or checkpoint.ErrVersion for another format),
// and otherwise a line saying what it checked, "" when there is no saved
// state. A market with source jetstream keeps its checkpoints in NATS:
// nothing local is checked for it.
func CheckState(cfg config.Config) (string, error) {
	if cfg.Source == "jetstream" {
		return "", nil
	}
	dir := cfg.State.Dir
	c, ok, _, err := checkpoint.Newest(CheckpointDir(dir))
	if err != nil || !ok {
		return "", err
	}
	if err := engine.CheckSnapshot(market.EngineConfig(cfg), c.Snapshot); err != nil {
		err = fmt.Errorf("restore %s: %w", c.Path, err)
		if errors.Is(err, engine.ErrSnapshotConfig) {
			err = fmt.Errorf("%w; restore the old configuration, or start from an empty state directory (move %s aside)", err, dir)
		}
		return "", err
	}
	return fmt.Sprintf("state %s: the newest checkpoint (log index %d) agrees", dir, c.Tag), nil
}

// CheckpointDir is where a market with state.dir stateDir keeps its
// checkpoints (package checkpoint's files).
func CheckpointDir(stateDir string) string { return filepath.Join(stateDir, checkpointDir) }
