package market

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/lake"
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

// Checkpoints drives the checkpoints of one engine over one store, the
// same for both sources: Start sends a barrier through the engine (from
// the goroutine that feeds it), the snapshot is handed off without
// blocking the engine's merger, and Run saves it (a goroutine of its own)
// once every result before the barrier is acked (checkpoint.Checkpointer:
// one checkpoint at a time, the incremental chain, the figures). At
// shutdown Final sends a last, whole barrier and SaveFinal saves it
// within the drain.
type Checkpoints struct {
	*checkpoint.Checkpointer
	log *slog.Logger
	// SaveTimeout, when > 0, bounds each save (the wait for acks and the
	// store): a partition's owner gives a checkpoint up rather than hold
	// its term. Default 0: a save waits as long as NATS is away, which
	// only delays checkpoints.
	SaveTimeout time.Duration
	// Lake, when set, is the market's lake feed: each barrier cuts it at
	// its tag (on the merger, after the rows before the barrier), and a
	// checkpoint is saved only once those rows are staged, so that none
	// between the lake's last file and the checkpoint is lost in a crash.
	Lake *lake.Feed
	// LakeIndex, when set, maps a checkpoint's tag to the lake's row
	// index space (the last row a tag covers), where the source's log
	// lines are not its tags (a partition's batches). Default: the same.
	LakeIndex func(tag uint64) uint64
	// saving is the tag of the checkpoint being saved, for flush.
	saving uint64
	// jobs has capacity 1 and the Checkpointer admits one checkpoint from
	// its barrier until it is saved, so the merger's hand-off never
	// blocks: a checkpoint due while one is in progress is skipped.
	jobs chan ckptJob
	// idle is closed when no checkpoint is in progress (Idle).
	idle atomic.Pointer[chan struct{}]
	// final is set by the merger with the shutdown snapshot, and read
	// once the engine has stopped.
	final *ckptJob
}

// ckptJob is a snapshot on its way from the engine's merger to the store.
type ckptJob struct {
	plan  checkpoint.Plan
	tag   uint64
	snap  [][]byte  // its parts (see engine.Checkpoint)
	start time.Time // when the barrier was sent
	after func()    // called once it is saved or given up; may be nil
}

// NewCheckpoints returns the driver that saves snapshots over store once
// flush (the sink's wait for the acks of every result handed over so far)
// returns nil; tag is the recovery point the engine was restored from.
func NewCheckpoints(flush func(context.Context) error, store checkpoint.Saver, tag uint64, log *slog.Logger) *Checkpoints {
	c := &Checkpoints{log: log, jobs: make(chan ckptJob, 1)}
	c.Checkpointer = checkpoint.NewCheckpointer(func(ctx context.Context) error {
		if err := flush(ctx); err != nil || c.Lake == nil {
			return err
		}
		return c.Lake.Staged(ctx, c.lakeIndex(c.saving))
	}, store, tag)
	idle := make(chan struct{})
	close(idle)
	c.idle.Store(&idle)
	return c
}

// Start sends a checkpoint barrier at tag through e, unless one is still
// being saved (then it reports false, counted as skipped). after, when
// set, is called once the snapshot is saved or given up. Call it from
// the goroutine that feeds e.
func (c *Checkpoints) Start(e *engine.Engine, tag uint64, after func()) bool {
	plan, ok := c.Begin()
	if !ok {
		return false
	}
	busy := make(chan struct{})
	c.idle.Store(&busy)
	job := ckptJob{plan: plan, tag: tag, start: time.Now(), after: after}
	c.log.Debug("checkpoint started", "tag", tag, "incremental", plan.Delta)
	Barrier(e, plan, tag, func(snap [][]byte) {
		c.cut(tag)
		job.snap = snap
		c.jobs <- job // never blocks: Begin admits one job at a time
	})
	return true
}

// Idle is closed once no checkpoint is in progress: one begun is saved
// or given up.
func (c *Checkpoints) Idle() <-chan struct{} { return *c.idle.Load() }

// Run saves the snapshots Start hands over until ctx ends.
func (c *Checkpoints) Run(ctx context.Context) {
	for {
		select {
		case job := <-c.jobs:
			c.save(ctx, job, "checkpoint failed; the log keeps everything since the previous one")
		case <-ctx.Done():
			return
		}
	}
}

func (c *Checkpoints) save(ctx context.Context, job ckptJob, failed string) error {
	idle := c.idle.Load()
	defer func() {
		if job.after != nil {
			job.after()
		}
		if idle != nil {
			select {
			case <-*idle:
			default:
				close(*idle)
			}
		}
	}()
	if c.SaveTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.SaveTimeout)
		defer cancel()
	}
	c.saving = job.tag
	err := c.Save(ctx, job.plan, job.tag, job.snap, job.start)
	switch {
	case err == nil:
		c.log.Debug("checkpoint written", "tag", job.tag, "took", time.Since(job.start).Round(time.Microsecond))
	case failed != "" && ctx.Err() == nil && !errors.Is(err, checkpoint.ErrSuperseded):
		c.log.Error(failed, "tag", job.tag, "err", err)
	}
	return err
}

// Final sends the shutdown barrier through e: a whole snapshot at tag
// (a periodic one still being saved, which a delta would build on, may
// never be stored), unless the newest recovery point is a whole one at
// tag already. Whole, so that the next start restores one snapshot
// rather than merging a chain, and a lost newest checkpoint falls back to
// the whole one before it. The snapshot is there for SaveFinal once e has
// stopped.
func (c *Checkpoints) Final(e *engine.Engine, tag uint64) {
	if tag == c.Tag() && c.Whole() {
		return
	}
	job := ckptJob{tag: tag, start: time.Now()}
	e.Checkpoint(tag, func(snap [][]byte) {
		c.cut(tag)
		job.snap = snap
		c.final = &job
	})
}

// SaveFinal saves the shutdown snapshot, if one was taken, once every
// result is acked (bounded by ctx); if they are not, the log keeps the
// inputs and the next start replays them.
func (c *Checkpoints) SaveFinal(ctx context.Context) {
	if c.final == nil {
		return
	}
	if err := c.save(ctx, *c.final, ""); err != nil {
		c.log.Warn("final checkpoint not written; the next start replays the log", "tag", c.final.tag, "err", err)
	}
}

// cut ends the lake's staging segment at a barrier's tag.
func (c *Checkpoints) cut(tag uint64) {
	if c.Lake != nil {
		c.Lake.Cut(c.lakeIndex(tag))
	}
}

func (c *Checkpoints) lakeIndex(tag uint64) uint64 {
	if c.LakeIndex == nil {
		return tag
	}
	return c.LakeIndex(tag)
}
