package mqttsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/wal"
)

// Subdirectories of state.dir.
const (
	walDir        = "wal"
	checkpointDir = "checkpoints"
	lakeSpillDir  = "lake-staging" // the lake's staging while lake.dir cannot take it
)

// ckptState is the source's checkpointing: the shell's driver over the
// local store (set by recover), and the figures of the last start.
type ckptState struct {
	*market.Checkpoints // set by recover

	fsync    metrics.Histogram
	replayed int64         // set before the market starts
	recovery time.Duration // set before the market starts
}

func (c *ckptState) metrics(ws wal.Stats) metrics.Durability {
	d := metrics.Durability{
		WALBytes: ws.Bytes, WALRepairs: ws.Repairs, WALStalled: ws.Stalled, WALStalls: ws.Stalls, Fsync: c.fsync.Snapshot(),
		Replayed: c.replayed, RecoveryDuration: c.recovery,
	}
	if c.Checkpoints != nil {
		d.SetCheckpoints(c.Stats())
	}
	return d
}

// localStore is the recovery point of a market on the MQTT source: Save
// writes a checkpoint file in state.dir/checkpoints, then truncates the
// write-ahead log up to the oldest checkpoint the directory kept, not
// this one, so that a damaged newest checkpoint can fall back to the
// previous one and still replay from there. The directory says which it
// kept: the final snapshot can repeat the tag of a periodic one that was
// still being written when its barrier went out, and counting that tag as
// the previous checkpoint truncated the log past the one really kept.
type localStore struct {
	dir *checkpoint.Dir
	wal *wal.Log // set once the log is open, before the first Save
	log *slog.Logger
}

// Load returns the newest checkpoint that checks out with the
// incremental ones that build on it, logging each newer one that was
// damaged and passed over.
func (s *localStore) Load(context.Context) (checkpoint.Point, bool, error) {
	c, ok, skipped, err := s.dir.Load()
	p := checkpoint.Point{Tag: c.Last(), Snapshot: c.Snapshot, Name: c.Path}
	for _, d := range c.Deltas {
		p.Deltas = append(p.Deltas, d.Snapshot)
	}
	if len(p.Deltas) > 0 {
		p.Name = fmt.Sprintf("%s and %d incremental checkpoints to %d", c.Path, len(p.Deltas), p.Tag)
	}
	from := p.Name
	if !ok {
		from = "no checkpoint: the whole log"
	}
	for _, e := range skipped {
		s.log.Warn("a checkpoint is damaged or missing; restoring from an older one and replaying the log after it", "err", e, "restored_from", from)
	}
	return p, ok, err
}

// SaveDelta writes an incremental checkpoint. The log is truncated only
// by Save: up to the oldest whole checkpoint kept, before every delta.
func (s *localStore) SaveDelta(_ context.Context, base, tag uint64, parts [][]byte) (int64, error) {
	c, err := s.dir.WriteDelta(base, tag, parts...)
	return c.Size, err
}

func (s *localStore) Save(_ context.Context, tag uint64, parts [][]byte) (int64, error) {
	c, err := s.dir.Write(tag, parts...)
	if err != nil {
		return 0, err
	}
	kept := s.dir.Kept()
	if len(kept) < 2 {
		return c.Size, nil // no older checkpoint to fall back to: the log keeps everything
	}
	oldest := kept[len(kept)-1]
	if err := s.wal.TruncateFront(oldest + 1); err != nil && !errors.Is(err, wal.ErrClosed) {
		return c.Size, fmt.Errorf("truncate write-ahead log before %d: %w", oldest+1, err)
	}
	return c.Size, nil
}

// walOptions maps state.wal_sync to the log's options.
func (s *Source) walOptions() wal.Options {
	mode := wal.SyncBatch
	switch s.cfg.State.WALSync {
	case "always":
		mode = wal.SyncAlways
	case "none":
		mode = wal.SyncNone
	}
	return wal.Options{
		Sync: mode, Interval: s.cfg.State.WALBatchInterval, MaxBatch: s.cfg.State.WALBatchMax,
		OnFsync:     func(d time.Duration, _ int) { s.ckpt.fsync.Observe(d) },
		OnCommitted: s.drv.h.flush,
	}
}

// recover opens the state directory, restores the engine from the newest
// good checkpoint (or starts it empty), opens the write-ahead log,
// repairing a torn tail, and replays every entry after the checkpoint
// through driver.apply, whose results go to the sink with their original
// keys. It leaves the engine in s.drv and the log in s.wal.
func (s *Source) recover(ecfg engine.Config) error {
	start := time.Now()
	dir := s.cfg.State.Dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state dir %s: %w", dir, err)
	}
	ckpts, err := checkpoint.Open(filepath.Join(dir, checkpointDir), 0)
	if err != nil {
		return err
	}
	for _, err := range ckpts.Unrestricted() {
		s.log.Warn("checkpoint file or directory readable by others; could not make it private", "err", err)
	}
	store := &localStore{dir: ckpts, log: s.log}
	eng, tag, err := market.Recover(context.Background(), ecfg, s.mkt.Sink().Publish, store)
	if errors.Is(err, engine.ErrSnapshotConfig) {
		return fmt.Errorf("%w; restore the old configuration, or start from an empty state directory (move %s aside)", err, dir)
	}
	if err != nil {
		return err
	}
	fail := func(err error) error {
		eng.Stop()
		return err
	}

	log, rep, err := wal.Open(filepath.Join(dir, walDir), s.walOptions(), s.log)
	if err != nil {
		return fail(err)
	}
	if rep.Repaired {
		s.log.Warn("write-ahead log tail was torn or corrupt and has been cut",
			"segment", rep.Segment, "offset", rep.Offset, "bytes_dropped", rep.BytesDropped,
			"first_dropped_index", rep.Index, "entries_dropped", rep.EntriesDropped, "cause", rep.Cause)
	}
	// The log must hold every entry after the checkpoint: a gap would
	// silently lose positions.
	if last := log.LastIndex(); last < tag {
		_ = log.Close()
		return fail(fmt.Errorf("state dir %s is inconsistent: the checkpoint reflects log index %d but the log ends at %d", dir, tag, last))
	}
	if first := log.FirstIndex(); first > tag+1 {
		_ = log.Close()
		return fail(fmt.Errorf("state dir %s is inconsistent: replaying after checkpoint %d needs log index %d, but the log starts at %d", dir, tag, tag+1, first))
	}

	if s.lake != nil {
		err := s.lake.CheckLog(log.LastIndex())
		if err == nil {
			err = s.lake.Start(tag)
		}
		if err != nil {
			_ = log.Close()
			return fail(err)
		}
	}
	d := s.drv
	d.restore(eng, tag)
	var n, lastArrival int64
	err = log.Replay(tag+1, func(i uint64, e entry.Entry) error {
		lastArrival = max(lastArrival, e.Arrival)
		d.apply(i, e)
		n++
		return nil
	})
	if err != nil {
		_ = log.Close()
		return fail(fmt.Errorf("replay write-ahead log: %w", err))
	}
	d.replayed()
	s.in.resume(lastArrival)
	store.wal = log
	s.ckpt.Checkpoints = market.NewCheckpoints(s.mkt.Sink().Flush, store, tag, s.log)
	s.ckpt.Lake = s.lake
	s.ckpt.replayed = n
	s.ckpt.recovery = time.Since(start)
	s.wal.Store(log)
	s.log.Info("recovered", "checkpoint_tag", tag, "replayed", n,
		"took", s.ckpt.recovery.Round(time.Millisecond), "wal_repaired", rep.Repaired)
	return nil
}

// startCheckpoint sends a checkpoint barrier through the engine, unless
// nothing was applied since the last one or one is still being saved.
// Called by the driver goroutine.
func (s *Source) startCheckpoint(d *driver) {
	if !d.changed || d.fatal != nil {
		return
	}
	if s.ckpt.Start(d.eng, d.applied, nil) {
		d.changed = false
	}
}

// snapshotFinal sends the shutdown barrier; the snapshot is saved by
// SaveFinal once the engine has stopped.
func (s *Source) snapshotFinal(d *driver) {
	if d.fatal == nil {
		s.ckpt.Final(d.eng, d.applied)
	}
}
