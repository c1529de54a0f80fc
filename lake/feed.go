package lake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Feed is a live source's way into the lake. The Writer alone keeps a
// row in memory until its batch is written, up to a roll interval after
// the checkpoint that covers it; a crash then would lose the rows between
// the last Parquet file and the checkpoint, for the source replays its
// log from the checkpoint, not from the lake. So the Feed stages them:
// it takes the engine's accepted rows (Add, on the engine's merger
// goroutine), cuts them at each checkpoint barrier (Cut) into a staging
// segment on disk, and the checkpoint is saved only once that segment is
// (Staged). Every row at or below a saved checkpoint is then in a
// Parquet file or a staging segment: the log is truncated at
// checkpoints as without a lake, and after a crash Start hands the
// Writer the staged rows its files lack, while the source replays its
// log after the checkpoint as usual (the engine judges those rows again,
// the same way). Staging costs one small file write a checkpoint
// interval; a segment is deleted once the Parquet files hold its rows.
//
// A failed staging write (a full disk) is retried every tick; meanwhile
// Cut waits, which holds the engine and so the source's intake, as a full
// disk holds the write-ahead log's. A Writer that cannot keep up
// (ErrBehind) leaves the rows in their segments, read back later: memory
// stays bounded, the disk holds the backlog.
type Feed struct {
	w      *Writer
	o      Options
	dirs   []string      // the staging folders: lake.dir's, then the spill's
	skipTo uint64        // rows at or below it are in files (set by Start)
	every  time.Duration // the Writer's tick

	// The merger's: rows since the last cut.
	buf         []byte
	first, prev uint64 // the range the segment covers starts at first; prev: the last row's index (first-1 before one)
	rows        int

	started bool
	segs    chan segment // cut segments, to the feed goroutine
	free    chan []byte  // their buffers, back
	quit    chan struct{}
	done    chan struct{}

	// The feed goroutine's.
	fenced   bool      // Options.Fence said no: nothing more is staged or appended
	disk     []segment // staged, in log order, not all in files yet; rows 0: a range without rows, no file; -1: read at Start
	next     int       // disk[next:] are not all appended
	appended uint64    // every row at or below it is appended to the Writer

	mu       sync.Mutex
	staged   uint64        // every row at or below it is staged or in a file
	stagedCh chan struct{} // closed when staged moves
	stageErr error         // the last staging write's, nil once one succeeds
	spillErr error         // why the last segment went to the spill folder, nil once one did not
	stats    FeedStats
}

// FeedStats describe a Feed and its Writer.
type FeedStats struct {
	Stats
	Staged          uint64 // every row at or below this log index is staged or in a file
	StagedSegments  int    // on disk, waiting for their rows to be in files
	StagedBytes     int64
	StageErrors     int64 // failed staging writes (each retried)
	LastStageError  string
	SegmentsDeleted int64
}

// OpenFeed opens the series o describes (Open) for a live source; Start
// then recovers its staging area.
func OpenFeed(o Options) (*Feed, error) {
	w, err := Open(o)
	if err != nil {
		return nil, err
	}
	f := &Feed{
		w: w, o: w.o, dirs: []string{StagingDir(w.o.Dir, w.o.Market)},
		every: min(max(w.o.RollInterval/10, 10*time.Millisecond), time.Second),
		segs:  make(chan segment, 2), free: make(chan []byte, 3),
		quit: make(chan struct{}), done: make(chan struct{}), stagedCh: make(chan struct{}),
	}
	if o.SpillDir != "" {
		f.dirs = append(f.dirs, o.SpillDir)
	}
	for _, d := range f.dirs {
		if err := mkdirSynced(d); err != nil {
			w.Close(context.Background())
			return nil, fmt.Errorf("lake: %w", err)
		}
	}
	return f, nil
}

// CheckLog is Writer.CheckLog.
func (f *Feed) CheckLog(last uint64) error { return f.w.CheckLog(last) }

// Start recovers the staging area for a source restored at tag (its
// checkpoint's log index; 0 for none) and starts the feed's goroutine:
// segments whose rows are all in files go, and so do those past tag (the
// source replays them from its log); the others are appended to the
// Writer before any row Add takes from now on.
func (f *Feed) Start(tag uint64) error {
	durable := f.w.skipTo
	var segs []segment
	for _, d := range f.dirs {
		ss, tmps, err := listSegments(d, f.o.Prefix)
		if err != nil {
			return fmt.Errorf("lake: staging: %w", err)
		}
		for _, n := range tmps {
			if err := removeFile(filepath.Join(d, n)); err != nil {
				return fmt.Errorf("lake: staging: %w", err)
			}
		}
		segs = append(segs, ss...)
	}
	slices.SortStableFunc(segs, func(a, b segment) int { return cmpU(a.first, b.first) })
	var err error
	for i, s := range segs {
		switch {
		case s.last <= durable || s.first > tag || i > 0 && s.first == segs[i-1].first:
			// All in files; or past tag, which the source's log replays;
			// or the same rows twice (a crash between a spill and its
			// removal: the first copy is kept).
			err = removeFile(s.path(f.o.Prefix))
		case s.last > tag:
			// Cut at a barrier, a segment ends at every checkpoint's tag;
			// one across tag is another checkpoint's (a newer one that
			// was lost): keep what tag covers.
			err = f.truncateSegment(&s, tag)
		default:
			f.disk = append(f.disk, s)
		}
		if err != nil {
			return fmt.Errorf("lake: staging: %w", err)
		}
	}
	f.disk = append(f.disk, segment{first: tag, last: tag})
	f.skipTo, f.appended = durable, durable
	f.first, f.prev = tag+1, tag
	f.staged = tag
	for _, s := range f.disk {
		if s.rows != 0 {
			f.stats.StagedSegments++
			f.stats.StagedBytes += s.size
		}
	}
	f.started = true
	go f.run()
	return nil
}

// truncateSegment rewrites the segment s as the rows at or below tag.
func (f *Feed) truncateSegment(s *segment, tag uint64) error {
	path := s.path(f.o.Prefix)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out := []byte(segmentMagic)
	kept := segment{first: s.first, last: tag, dir: s.dir}
	prev := s.first - 1
	err = decodeSegment(data, s.first, func(r *Row) error {
		if r.Index <= tag {
			out = appendRow(out, prev, r)
			prev = r.Index
			kept.rows++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if kept.rows > 0 {
		data := sealSegment(out)
		kept.size = int64(len(data))
		if err := writeSegment(f.o.Prefix, &kept, data); err != nil {
			return err
		}
		f.disk = append(f.disk, kept)
	}
	return removeFile(path)
}

// Add stages an accepted row; call it in log order from one goroutine
// (the engine's merger), with Cut. Its Courier is copied.
func (f *Feed) Add(r *Row) {
	if r.Index <= f.skipTo {
		return // in a file already: the log is replayed from an older checkpoint
	}
	if len(f.buf) == 0 {
		f.buf = append(f.buf, segmentMagic...)
	}
	f.buf = appendRow(f.buf, f.prev, r)
	f.prev = r.Index
	f.rows++
	if len(f.buf) >= segMaxBytes {
		f.Cut(r.Index)
	}
}

// Cut ends the segment at log index last: a checkpoint barrier at last
// (or Add's size bound). It hands the rows to be staged and waits only
// while two segments are still being written.
func (f *Feed) Cut(last uint64) {
	if last < f.first {
		return // nothing since the last cut (a final barrier at its tag)
	}
	s := segment{first: f.first, last: last, rows: f.rows}
	if f.rows > 0 {
		s.data = sealSegment(f.buf)
		s.size = int64(len(s.data))
		select {
		case f.buf = <-f.free:
		default:
			f.buf = nil
		}
		f.buf = f.buf[:0]
	}
	f.first, f.prev, f.rows = last+1, last, 0
	f.segs <- s
}

// Staged waits until every row at or below tag is staged or in a file:
// a checkpoint at tag may then be saved.
func (f *Feed) Staged(ctx context.Context, tag uint64) error {
	for {
		f.mu.Lock()
		staged, ch := f.staged, f.stagedCh
		f.mu.Unlock()
		if staged >= tag {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			f.mu.Lock()
			err := f.stageErr
			f.mu.Unlock()
			if err != nil {
				return fmt.Errorf("lake: rows to %d not staged: %w (last error: %v)", tag, ctx.Err(), err)
			}
			return fmt.Errorf("lake: rows to %d not staged: %w", tag, ctx.Err())
		}
	}
}

// Behind reports why the lake is not keeping up, or nil: staging fails,
// or the Writer is behind (Writer.Behind). For /readyz.
func (f *Feed) Behind() error {
	f.mu.Lock()
	err, spill := f.stageErr, f.spillErr
	f.mu.Unlock()
	switch {
	case err != nil:
		return fmt.Errorf("lake staging %s: writing failed, retrying: %w", f.dirs[0], err)
	case spill != nil:
		return fmt.Errorf("lake staging %s: writing failed, staging in %s meanwhile: %w", f.dirs[0], f.dirs[1], spill)
	}
	return f.w.Behind()
}

// Stats returns the Feed's and its Writer's counters.
func (f *Feed) Stats() FeedStats {
	ws := f.w.Stats()
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.Stats, s.Staged = ws, f.staged
	return s
}

// Close stages what was cut, hands the Writer every staged row and waits
// for its files (Writer.Close) until ctx ends, then deletes the segments
// the files hold. Rows added since the last Cut are dropped: they are
// past the last checkpoint, and the source's log has them. Call it once
// Add and Cut are no longer called.
func (f *Feed) Close(ctx context.Context) error {
	if !f.started {
		return f.w.Close(ctx)
	}
	close(f.segs)
	select {
	case <-f.done:
	case <-ctx.Done():
		close(f.quit)
		<-f.done
	}
	err := f.w.Close(ctx)
	f.prune()
	return err
}

// run stages the segments Cut hands over, feeds the Writer and ticks it.
func (f *Feed) run() {
	defer close(f.done)
	tick := time.NewTicker(f.every)
	defer tick.Stop()
	f.drain()
	var pending *segment // cut, not yet staged
	for {
		if pending == nil {
			select {
			case s, ok := <-f.segs:
				if !ok {
					f.finish(tick.C)
					return
				}
				pending = &s
			case now := <-tick.C:
				f.tick(now)
				continue
			case <-f.quit:
				return
			}
		}
		if err := f.stage(pending); err == nil {
			pending = nil
			continue
		}
		select { // retry at the next tick
		case now := <-tick.C:
			f.tick(now)
		case <-f.quit:
			return
		}
	}
}

// finish stages what is left and appends every staged row.
func (f *Feed) finish(tick <-chan time.Time) {
	for f.next < len(f.disk) {
		select {
		case now := <-tick:
			f.tick(now)
		case <-f.quit:
			return
		}
	}
}

// stage writes a cut segment, then appends its rows when the Writer has
// taken every earlier one.
func (f *Feed) stage(s *segment) error {
	var spill error
	if f.fenced {
		return nil // dropped: the series is another writer's now
	}
	if s.rows > 0 {
		err := f.o.fence()
		if err != nil {
			// For good: what is not staged, the successor derives
			// again from the checkpoint it claims, and Cut must not wait
			// for a write that will never be allowed.
			f.fenced = true
			f.o.Logger.Info("lake: fenced; the series' next writer stages from its checkpoint", "market", f.o.Market, "series", f.o.Prefix, "err", err)
			return nil
		}
		if err == nil {
			for i, d := range f.dirs {
				s.dir = d
				if err = writeSegment(f.o.Prefix, s, s.data); err == nil {
					break
				}
				if i == 0 {
					spill = err // lake.dir's; the spill folder next, if any
				}
			}
			if err != nil {
				spill = nil
			}
		}
		if err != nil {
			f.mu.Lock()
			first := f.stageErr == nil
			f.stageErr = err
			f.stats.StageErrors++
			f.stats.LastStageError = err.Error()
			f.mu.Unlock()
			if first {
				f.o.Logger.Error("lake: staging failed; retrying, the source's intake waits meanwhile", "market", f.o.Market, "series", f.o.Prefix, "err", err)
			}
			return err
		}
	}
	f.mu.Lock()
	if f.stageErr != nil {
		f.o.Logger.Info("lake: staging works again", "market", f.o.Market, "series", f.o.Prefix)
	}
	if spill != nil {
		if f.spillErr == nil {
			f.o.Logger.Error("lake: staging in lake.dir failed; staging in the spill folder meanwhile", "market", f.o.Market, "series", f.o.Prefix, "spill", f.dirs[1], "err", spill)
		}
		f.stats.StageErrors++
		f.stats.LastStageError = spill.Error()
	} else if s.rows > 0 && f.spillErr != nil {
		f.o.Logger.Info("lake: staging in lake.dir works again", "market", f.o.Market, "series", f.o.Prefix)
	}
	if s.rows > 0 {
		f.spillErr = spill
	}
	f.stageErr = nil
	f.staged = s.last
	close(f.stagedCh)
	f.stagedCh = make(chan struct{})
	if s.rows > 0 {
		f.stats.StagedSegments++
		f.stats.StagedBytes += s.size
	}
	f.mu.Unlock()
	f.disk = append(f.disk, *s)
	f.drain()
	return nil
}

func (f *Feed) tick(now time.Time) {
	f.w.Tick(now)
	f.drain()
	f.prune()
}

// drain appends the staged rows the Writer lacks, until it refuses one.
func (f *Feed) drain() {
	for f.next < len(f.disk) {
		s := &f.disk[f.next]
		if s.rows != 0 {
			if err := f.appendSegment(s); err != nil {
				if !errors.Is(err, ErrBehind) {
					f.noteReadError(s, err)
				}
				f.release(s)
				return
			}
		}
		f.w.Advance(s.last)
		f.appended = max(f.appended, s.last)
		f.release(s)
		f.next++
	}
}

// release drops a segment's bytes from memory, keeping the buffer.
func (f *Feed) release(s *segment) {
	if s.data == nil {
		return
	}
	select {
	case f.free <- s.data:
	default:
	}
	s.data = nil
}

func (f *Feed) appendSegment(s *segment) error {
	data := s.data
	if data == nil {
		var err error
		if data, err = os.ReadFile(s.path(f.o.Prefix)); err != nil {
			return err
		}
	}
	return decodeSegment(data, s.first, func(r *Row) error {
		if r.Index <= f.appended {
			return nil
		}
		if err := f.w.Append(r); err != nil {
			return err
		}
		f.appended = r.Index
		return nil
	})
}

// noteReadError reports a staged segment that cannot be read back: its
// rows are kept on disk and tried again each tick.
func (f *Feed) noteReadError(s *segment, err error) {
	f.mu.Lock()
	f.stats.StageErrors++
	f.stats.LastStageError = err.Error()
	f.mu.Unlock()
	f.o.Logger.Error("lake: a staged segment cannot be read back; tried again each tick", "market", f.o.Market, "series", f.o.Prefix, "segment", s.name(f.o.Prefix), "err", err)
}

// prune deletes the segments whose rows are all in files.
func (f *Feed) prune() {
	durable := f.w.Durable()
	n := 0
	for n < f.next && f.disk[n].last <= durable {
		s := &f.disk[n]
		if s.rows != 0 {
			if err := removeFile(s.path(f.o.Prefix)); err != nil {
				f.o.Logger.Warn("lake: staged segment not deleted; the next start does", "err", err)
			}
			f.mu.Lock()
			f.stats.StagedSegments--
			f.stats.StagedBytes -= s.size
			f.stats.SegmentsDeleted++
			f.mu.Unlock()
		}
		n++
	}
	if n > 0 {
		f.disk = append(f.disk[:0], f.disk[n:]...)
		f.next -= n
	}
}

// Add adds o's counts to s: several feeds (a market's partitions) as
// one. Gauges (RowsBuffered, StagedSegments, StagedBytes) add too; Staged
// and Durable are a series' own and keep s's.
func (s *FeedStats) Add(o FeedStats) {
	s.RowsAppended += o.RowsAppended
	s.RowsSkipped += o.RowsSkipped
	s.RowsRefused += o.RowsRefused
	s.RowsBuffered += o.RowsBuffered
	s.RowsWritten += o.RowsWritten
	s.FilesWritten += o.FilesWritten
	s.BytesWritten += o.BytesWritten
	s.WriteErrors += o.WriteErrors
	s.Compactions += o.Compactions
	s.DatesDeleted += o.DatesDeleted
	s.StagedSegments += o.StagedSegments
	s.StagedBytes += o.StagedBytes
	s.StageErrors += o.StageErrors
	s.SegmentsDeleted += o.SegmentsDeleted
	if o.LastError != "" {
		s.LastError = o.LastError
	}
	if o.LastStageError != "" {
		s.LastStageError = o.LastStageError
	}
}
