package market

import (
	"context"
	"fmt"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/engine"
)

// Recover starts an engine from the newest recovery point of store, or an
// empty one when the store has none, and returns the tag it reflects: the
// caller replays its log after it. Both sources recover through it, so
// the incremental chain a store returns is merged in one place. A
// snapshot this configuration cannot restore fails with an error wrapping
// engine.ErrSnapshotConfig, ErrSnapshotVersion or ErrSnapshotCorrupt (see
// engine.Refused); one whose tag is not its point's wraps
// checkpoint.ErrCorrupt.
func Recover(ctx context.Context, cfg engine.Config, sink engine.Sink, store checkpoint.Store) (*engine.Engine, uint64, error) {
	p, ok, err := store.Load(ctx)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		return engine.New(cfg, sink), 0, nil
	}
	snap, err := engine.Merge(cfg, p.Snapshot, p.Deltas...)
	if err != nil {
		return nil, 0, fmt.Errorf("restore %s: %w", p.Name, err)
	}
	eng, tag, err := engine.Restore(cfg, sink, snap)
	if err != nil {
		return nil, 0, fmt.Errorf("restore %s: %w", p.Name, err)
	}
	if tag != p.Tag {
		eng.Stop()
		return nil, 0, fmt.Errorf("restore %s: %w: it is stored as tag %d, its snapshot says %d", p.Name, checkpoint.ErrCorrupt, p.Tag, tag)
	}
	return eng, tag, nil
}

// Barrier sends the checkpoint barrier a checkpoint.Checkpointer planned
// through e: incremental on plan.Base (engine.CheckpointDelta), or whole
// (engine.Checkpoint). done gets the snapshot on the engine's merger
// goroutine.
func Barrier(e *engine.Engine, plan checkpoint.Plan, tag uint64, done func(snapshot [][]byte)) {
	if plan.Delta {
		e.CheckpointDelta(plan.Base, tag, done)
		return
	}
	e.Checkpoint(tag, done)
}
