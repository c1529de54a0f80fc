package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrSuperseded is wrapped by a Saver's error when the recovery point is
// no longer this writer's to move (another instance owns the partition):
// the checkpoint is given up, and not counted as a failure.
var ErrSuperseded = errors.New("recovery point owned by another writer")

// A Saver makes a snapshot the recovery point: after a crash, the state
// is restored from it and the log replayed after tag (a write-ahead-log
// index, or a partition's stream sequence). edgeproc has two: the local
// state directory (a checkpoint file, then the write-ahead log truncated
// up to the oldest checkpoint kept; package service) and JetStream (an
// object, then the partition's checkpoint record by compare-and-set;
// package partition).
type Saver interface {
	// Save stores the snapshot made of parts and returns its size in
	// bytes.
	Save(ctx context.Context, tag uint64, parts [][]byte) (int64, error)
}

// A DeltaSaver is a Saver that also keeps incremental snapshots: one that
// holds what changed since the recovery point of base, which it builds on
// (engine.CheckpointDelta). Load then returns the point with its deltas.
type DeltaSaver interface {
	SaveDelta(ctx context.Context, base, tag uint64, parts [][]byte) (int64, error)
}

// The size rule of incremental checkpoints: a checkpoint is whole when
// the deltas since the last whole one add up to DeltaRatio times its size
// or number MaxDeltas, so that a recovery reads at most about DeltaRatio+1
// whole snapshots' bytes and merges at most MaxDeltas deltas, and the
// bytes written per checkpoint average about (1 + DeltaRatio) / n whole
// ones over a chain of n.
const (
	DeltaRatio = 2
	MaxDeltas  = 60
)

// A Plan is what the next checkpoint writes: with Delta, only what changed
// since the recovery point of Base (engine.CheckpointDelta); else the
// whole state (engine.Checkpoint).
type Plan struct {
	Delta bool
	Base  uint64
}

// A Store holds a source's recovery points: Save makes a snapshot one,
// Load reads the newest back. edgeproc has two: the local state directory
// (package service) and JetStream (package partition). Recovery is the
// same over both (engine.Recover), and so is checkpointing (Checkpointer).
type Store interface {
	Saver
	// Load returns the newest recovery point this store can read, and ok
	// false when it has none (a market's first start).
	Load(ctx context.Context) (p Point, ok bool, err error)
}

// A Point is a recovery point as a Store reads it back.
type Point struct {
	// Tag is the log position the snapshot reflects: the log is replayed
	// after it.
	Tag uint64
	// Snapshot is the engine's snapshot (engine.Restore reads it).
	Snapshot []byte
	// Name says where it is stored, for messages: a file's path, an
	// object's name.
	Name string
	// Deltas are incremental snapshots that build on Snapshot, in order
	// (engine.Merge); Tag is the last one's.
	Deltas [][]byte
}

// Checkpointer is the checkpoint protocol both sources share: one
// checkpoint at a time, and a snapshot stored only once every result
// emitted before its barrier is acknowledged, so that the log after a
// recovery point is the outbox of the results not yet delivered; and the
// figures an operator watches. Its methods are safe for concurrent use.
type Checkpointer struct {
	flush func(context.Context) error
	saver Saver

	busy                     atomic.Bool
	written, failed, skipped atomic.Uint64

	mu       sync.Mutex // guards the fields below
	tag      uint64     // of the newest recovery point
	last     time.Time
	duration time.Duration
	bytes    int64
	deltas   uint64 // incremental checkpoints written
	// The chain a delta may build on: whether the last checkpoint this
	// process began was saved (a delta builds on the barrier before it),
	// the last whole one's size, and the deltas since.
	chained    bool
	wholeBytes int64
	sinceBytes int64
	since      int
}

// NewCheckpointer returns the checkpointer that stores snapshots with s
// once flush (waiting, bounded by its context, for the acknowledgement of
// every result handed over so far, and for anything else the checkpoint
// must not get ahead of) returns nil. tag is the recovery point
// the state was restored from (0: none).
func NewCheckpointer(flush func(context.Context) error, s Saver, tag uint64) *Checkpointer {
	c := &Checkpointer{flush: flush, saver: s}
	c.tag = tag
	return c
}

// Begin reserves the checkpointer for one checkpoint, whose barrier the
// caller then sends as the plan says; Save ends it. It reports false,
// counted as skipped, while the previous one is still being saved.
//
// The plan is incremental when the saver keeps deltas and the previous
// checkpoint this process began was saved, unless the size rule
// (DeltaRatio, MaxDeltas) asks for a whole one: the first checkpoint of a
// process, and the one after a failure, are whole.
func (c *Checkpointer) Begin() (Plan, bool) {
	if !c.busy.CompareAndSwap(false, true) {
		c.skipped.Add(1)
		return Plan{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, deltas := c.saver.(DeltaSaver)
	if deltas && c.chained && c.sinceBytes < DeltaRatio*c.wholeBytes && c.since < MaxDeltas {
		return Plan{Delta: true, Base: c.tag}, true
	}
	return Plan{}, true
}

// Save makes the snapshot taken at tag (its barrier sent at start) the
// recovery point: it waits for the acknowledgement of every result before
// it, then stores it. It ends the checkpoint Begin reserved, if any, and
// counts a failure unless the error wraps ErrSuperseded.
//
// A snapshot taken without Begin (a whole one at shutdown) is saved with
// the zero Plan.
func (c *Checkpointer) Save(ctx context.Context, plan Plan, tag uint64, parts [][]byte, start time.Time) error {
	defer c.busy.Store(false)
	err := c.save(ctx, plan, tag, parts, start)
	if err != nil {
		c.mu.Lock()
		c.chained = false // the engine's next delta would build on what is not stored
		c.mu.Unlock()
		if !errors.Is(err, ErrSuperseded) {
			c.failed.Add(1)
		}
	}
	return err
}

func (c *Checkpointer) save(ctx context.Context, plan Plan, tag uint64, parts [][]byte, start time.Time) error {
	if err := c.flush(ctx); err != nil {
		return fmt.Errorf("checkpoint %d waits for what it covers: %w", tag, err)
	}
	var n int64
	var err error
	if plan.Delta {
		n, err = c.saver.(DeltaSaver).SaveDelta(ctx, plan.Base, tag, parts)
	} else {
		n, err = c.saver.Save(ctx, tag, parts)
	}
	if err != nil {
		return err
	}
	c.written.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tag, c.last, c.duration, c.bytes = tag, time.Now(), time.Since(start), n
	c.chained = true
	if plan.Delta {
		c.deltas++
		c.sinceBytes += n
		c.since++
	} else {
		c.wholeBytes, c.sinceBytes, c.since = n, 0, 0
	}
	return nil
}

// Tag is the tag of the newest recovery point: the last one saved, or
// the one the state was restored from.
func (c *Checkpointer) Tag() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tag
}

// Whole reports whether the newest recovery point is a whole checkpoint,
// not an incremental one on top of one (a point restored at start counts
// as whole: nothing builds on it yet).
func (c *Checkpointer) Whole() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.since == 0
}

// Stats are a Checkpointer's figures.
type Stats struct {
	// Last is when the newest checkpoint was saved (zero: none yet),
	// Duration how long it took from its barrier, Bytes its size.
	Last     time.Time
	Duration time.Duration
	Bytes    int64
	// Written, Failed and Skipped count checkpoints saved, failed (the
	// results' acks or the store) and not started because one was in
	// progress; Deltas those of Written that were incremental.
	Written, Failed, Skipped, Deltas uint64
}

// Stats returns the figures so far.
func (c *Checkpointer) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Last: c.last, Duration: c.duration, Bytes: c.bytes,
		Written: c.written.Load(), Failed: c.failed.Load(), Skipped: c.skipped.Load(), Deltas: c.deltas,
	}
}
