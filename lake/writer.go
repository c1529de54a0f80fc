package lake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxBatchBytes = 64 << 20
	DefaultRowGroupRows  = 1 << 20
	DefaultCompactAfter  = 24 * time.Hour
	DefaultCompactTarget = 512 << 20
)

// ErrBehind is returned by Append when the row cannot be taken: the batch
// being filled is at Options.MaxBatchBytes and the previous one is not
// yet written (a slow or full disk). The row is not taken; it is still in
// the log (Durable is below it), and the caller holds back its input and
// appends it again later.
var ErrBehind = errors.New("lake: behind: the batch is full and the previous one is not written")

// ErrOrder is returned by Append for a row whose Index is not above the
// previous row's.
var ErrOrder = errors.New("lake: rows out of log order")

// ErrOtherLog is returned by CheckLog when the log is behind the lake:
// the series was written from another log (a state.dir wiped or replaced
// while lake.dir was kept). Its rows would otherwise be skipped as
// already written, and later files could take the names of older ones.
var ErrOtherLog = errors.New("lake: the log is behind the lake's series: it was written from another log")

// Options configure a Writer.
type Options struct {
	// Dir is lake.dir. Required.
	Dir string
	// Market is the market's name. Required.
	Market string
	// Prefix starts the series' file names and its marker's: "" for the
	// MQTT source's one series per market, e.g. "p3-" for partition 3 of
	// the partitioned source. [a-z0-9_-]{0,32}.
	Prefix string
	// Location is the market's time zone: a row's date is its
	// timestamp_ms's calendar date there. Default UTC.
	Location *time.Location
	// RollInterval is the longest a row waits in memory before its batch
	// is handed to be written (lake.roll_interval). Default 10m.
	RollInterval time.Duration
	// Retention deletes date folders older than this many whole days
	// (lake.retention); 0 keeps them.
	Retention time.Duration
	// MaxBatchBytes bounds a batch: when the rows appended since the last
	// roll reach it (RowCost + len(courier) each) the batch is handed
	// over at once, and when the previous one is still being written
	// Append refuses (ErrBehind). Memory is at most two batches, each up
	// to twice this with slice growth. Default 64 MiB (about a million
	// rows).
	MaxBatchBytes int
	// RowGroupRows bounds a Parquet row group. Default 1 M rows.
	RowGroupRows int
	// CompactAfter is how long after a date's end (by the Tick clock) it
	// counts as closed and its small files are merged. Default 24h (the
	// default restore_ttl: pass windows.restore_ttl).
	CompactAfter time.Duration
	// CompactTarget is the size a merged file grows to, in bytes: files
	// already that large are left alone. Default 512 MiB.
	CompactTarget int64
	// Logger receives write errors (rate-limited to one per roll).
	// Default slog.Default().
	Logger *slog.Logger
	// Fence, when set, is asked before each file, marker and staging
	// segment is written: an error stops the write. A partition's owner
	// whose lease is ending must not write the series its successor
	// writes next.
	Fence func() error
	// SpillDir, for a Feed, is where staging segments go while lake.dir
	// cannot take them (a full disk): the write-ahead log's disk, so
	// that the lake holds back the intake no more than the log itself
	// would. Empty: none, a failed staging write is retried and the
	// source waits.
	SpillDir string
}

func (o Options) fence() error {
	if o.Fence == nil {
		return nil
	}
	return o.Fence()
}

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" || o.Market == "" {
		return o, errors.New("lake: Dir and Market are required")
	}
	if !prefixRE.MatchString(o.Prefix) {
		return o, fmt.Errorf("lake: prefix %q: want [a-z0-9_-]{0,32}", o.Prefix)
	}
	if o.Location == nil {
		o.Location = time.UTC
	}
	if o.RollInterval <= 0 {
		o.RollInterval = 10 * time.Minute
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.RowGroupRows <= 0 {
		o.RowGroupRows = DefaultRowGroupRows
	}
	if o.CompactAfter <= 0 {
		o.CompactAfter = DefaultCompactAfter
	}
	if o.CompactTarget <= 0 {
		o.CompactTarget = DefaultCompactTarget
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Stats describe a Writer; every count since Open.
type Stats struct {
	RowsAppended int64 // taken by Append
	RowsSkipped  int64 // appended again after a restart, already in a file
	RowsRefused  int64 // ErrBehind
	RowsBuffered int64 // in memory: the batch being filled and the one being written
	RowsWritten  int64
	FilesWritten int64
	BytesWritten int64
	WriteErrors  int64 // failed attempts to write a batch (each retried)
	LastError    string
	LastErrorAt  time.Time
	Compactions  int64 // files merged into one
	DatesDeleted int64 // by retention
	Durable      uint64
}

// Writer writes one file series of a market's lake. Append, Advance,
// Tick, Durable and Close are called from one goroutine (the one that
// feeds the engine's accepted positions, in log order); Stats and Behind
// from any. Files are written by the Writer's own goroutine, so Append
// never waits for the disk.
type Writer struct {
	o      Options
	dir    string // the market's positions folder
	marker string

	// The feeding goroutine's.
	cur       *batch
	lastTick  time.Time
	lastIndex uint64
	skipTo    uint64 // rows at or below it are in files already (Open)

	mu       sync.Mutex
	inflight *batch // handed to the flusher; nil when idle
	failed   bool   // inflight's last attempt failed; retried at the next roll
	spare    *batch
	durable  uint64    // every row at or below it is in a file (the marker's value)
	tickNow  time.Time // the latest Tick, for the flusher's housekeeping
	refusing bool      // Append refused a row since the last hand-off
	stats    Stats
	dates    map[string]int // files of this series per date, for compaction
	nextKeep time.Time      // the next compaction and retention pass

	buffered, appended, skipped atomic.Int64
	kick                        chan struct{}
	done                        chan struct{}
	wg                          sync.WaitGroup
	// crash, set by tests, simulates a kill at a named step: when it
	// returns true the flusher stops dead there.
	crash func(step string) bool
	dead  bool
}

// Open opens the series o describes: it creates the folders, reads where
// the series stands, deletes what an interrupted roll or compaction left
// (temporary files, files past the durable index, files a merged one
// covers), and starts the writing goroutine. Rows the caller appends
// again with an Index at or below Durable() are skipped.
func Open(o Options) (*Writer, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Writer{
		o: o, dir: MarketDir(o.Dir, o.Market), marker: markerPath(o.Dir, o.Market, o.Prefix),
		cur: &batch{}, spare: &batch{}, dates: map[string]int{},
		kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	for _, d := range []string{w.dir, filepath.Dir(w.marker)} {
		if err := mkdirSynced(d); err != nil {
			return nil, fmt.Errorf("lake: %w", err)
		}
	}
	if w.durable, err = readMarker(w.marker); err != nil {
		return nil, fmt.Errorf("lake: %w", err)
	}
	if err := w.recover(); err != nil {
		return nil, fmt.Errorf("lake: open %s: %w", w.dir, err)
	}
	w.skipTo, w.lastIndex = w.durable, w.durable
	w.stats.Durable = w.durable
	w.wg.Add(1)
	go w.run()
	return w, nil
}

// CheckLog tells whether the log the caller replays from can be this
// series' log: last is the log's last index (0 for an empty log). A log
// that ends before Durable() is another one; the caller refuses to start
// (the error says which files to move aside) rather than skip its rows.
func (w *Writer) CheckLog(last uint64) error {
	if last >= w.skipTo {
		return nil
	}
	return fmt.Errorf("%w: the log ends at %d, the series %q of %s holds rows up to %d (%s): move the series' files and that marker aside, or restore the log",
		ErrOtherLog, last, w.o.Prefix, w.dir, w.skipTo, w.marker)
}

// Append adds an accepted position. Its Index must be above the previous
// row's; a row at or below the durable index found by Open is skipped (a
// replay of the log after a restart). It returns ErrBehind, without
// taking the row, when the Writer cannot keep up (see
// Options.MaxBatchBytes).
func (w *Writer) Append(r *Row) error {
	if r.Index <= w.skipTo {
		w.skipped.Add(1)
		return nil
	}
	if r.Index <= w.lastIndex {
		return fmt.Errorf("%w: index %d after %d", ErrOrder, r.Index, w.lastIndex)
	}
	if w.cur.bytes >= w.o.MaxBatchBytes && !w.handOff() {
		w.mu.Lock()
		w.stats.RowsRefused++
		w.refusing = true
		w.mu.Unlock()
		return ErrBehind
	}
	if w.cur.rows == 0 {
		w.cur.since = w.lastTick
	}
	w.cur.add(r, w.o.Location)
	w.lastIndex = r.Index
	w.buffered.Add(1)
	w.appended.Add(1)
	if w.cur.bytes >= w.o.MaxBatchBytes {
		w.handOff()
	}
	return nil
}

// Advance tells the Writer that the log up to index has been appended:
// the entries after the last row were no accepted positions. Durable can
// then pass them.
func (w *Writer) Advance(index uint64) {
	if index > w.lastIndex {
		w.cur.seen, w.lastIndex = index, index
	}
}

// Tick drives the Writer's clock (the caller's ticker; a few seconds):
// a batch older than the roll interval is handed to be written, a failed
// write is retried once per roll interval, and closed dates are compacted
// and retention applied, once per roll interval.
func (w *Writer) Tick(now time.Time) {
	w.lastTick = now
	w.mu.Lock()
	w.tickNow = now
	retry := w.inflight != nil && w.failed && now.Sub(w.stats.LastErrorAt) >= w.o.RollInterval
	keep := w.inflight == nil && !now.Before(w.nextKeep)
	w.mu.Unlock()
	switch {
	case w.cur.rows > 0 && now.Sub(w.cur.since) >= w.o.RollInterval:
		if !w.handOff() && retry {
			w.signal()
		}
	case retry, keep:
		w.signal()
	}
}

// handOff gives the current batch to the flusher if it is idle.
func (w *Writer) handOff() bool {
	w.mu.Lock()
	if w.inflight != nil {
		w.mu.Unlock()
		return false
	}
	w.inflight, w.cur, w.spare = w.cur, w.spare, nil
	w.refusing = false
	if w.cur == nil {
		w.cur = &batch{}
	}
	w.cur.reset()
	w.mu.Unlock()
	w.signal()
	return true
}

func (w *Writer) signal() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Durable returns the log index up to which every appended row is in a
// file: the log may be truncated up to it. It counts what Advance
// reported only once the rows before it are written.
func (w *Writer) Durable() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.inflight != nil:
		return w.inflight.first - 1
	case w.cur.rows > 0:
		return w.cur.first - 1
	}
	return max(w.durable, w.cur.seen)
}

// Behind reports why the Writer is not keeping up, or nil: the last
// write failed (the rows are kept and retried at the next roll), or a
// full batch waits for the previous one. For /readyz.
func (w *Writer) Behind() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.failed:
		return fmt.Errorf("lake %s: writing %d rows failed, retrying every %v: %s", w.dir, w.inflight.rows, w.o.RollInterval, w.stats.LastError)
	case w.refusing:
		return fmt.Errorf("lake %s: a full batch waits for the previous one to be written", w.dir)
	}
	return nil
}

// Stats returns the Writer's counters.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.RowsBuffered, s.RowsAppended, s.RowsSkipped = w.buffered.Load(), w.appended.Load(), w.skipped.Load()
	return s
}

// Close hands over what is buffered, waits for it to be written (retrying
// a failed write once a second) until ctx is done, and stops. It returns
// the error that left rows unwritten, if any: they are still in the log
// past Durable().
func (w *Writer) Close(ctx context.Context) error {
	var err error
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	lastTry := time.Now()
	for err == nil {
		if w.cur.rows > 0 {
			w.handOff()
		}
		w.mu.Lock()
		idle, failed, last := w.inflight == nil, w.failed, w.stats.LastError
		w.mu.Unlock()
		if idle && w.cur.rows == 0 {
			break
		}
		if failed && time.Since(lastTry) >= time.Second {
			lastTry = time.Now()
			w.signal()
		}
		select {
		case <-ctx.Done():
			err = fmt.Errorf("lake %s: close: %d rows not written: %w (last error: %s)", w.dir, w.buffered.Load(), ctx.Err(), last)
		case <-poll.C:
		}
	}
	close(w.done)
	w.wg.Wait()
	return err
}

// run is the flusher: it writes the batch handed to it, then does the
// housekeeping that is due.
func (w *Writer) run() {
	defer w.wg.Done()
	for {
		select {
		case <-w.done:
			return
		case <-w.kick:
		}
		if w.dead {
			continue
		}
		w.mu.Lock()
		b, now := w.inflight, w.tickNow
		keep := !now.IsZero() && !now.Before(w.nextKeep)
		w.mu.Unlock()
		if b != nil {
			err := w.writeBatch(b)
			if w.dead {
				continue
			}
			w.mu.Lock()
			if err != nil {
				w.failed = true
				w.stats.WriteErrors++
				w.stats.LastError, w.stats.LastErrorAt = err.Error(), w.tickNow
				w.mu.Unlock()
				w.o.Logger.Error("lake: write failed; the rows are kept and retried at the next roll", "market", w.o.Market, "series", w.o.Prefix, "rows", b.rows, "err", err)
				continue
			}
			w.failed = false
			w.durable = max(w.durable, b.seen)
			w.stats.Durable = w.durable
			w.stats.RowsWritten += int64(b.rows)
			w.buffered.Add(-int64(b.rows))
			w.inflight, w.spare = nil, b
			w.mu.Unlock()
		}
		if keep {
			w.housekeep(now)
		}
	}
}

// writeBatch writes one file per date of b, then the marker.
func (w *Writer) writeBatch(b *batch) error {
	for _, d := range b.inUse() {
		dir := filepath.Join(w.dir, "date="+d.date)
		if err := mkdirSynced(dir); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		path := filepath.Join(dir, fileName(w.o.Prefix, d.idx[0], d.idx[d.len()-1]))
		if err := w.o.fence(); err != nil {
			return err
		}
		size, err := writeAtomic(path, func(f io.Writer) error { return writeDate(f, d, w.o.RowGroupRows) })
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.stats.FilesWritten++
		w.stats.BytesWritten += size
		w.dates[d.date]++
		w.mu.Unlock()
		if w.crashAt("roll:file") {
			return errCrashed
		}
	}
	if w.crashAt("roll:marker") {
		return errCrashed
	}
	if err := w.o.fence(); err != nil {
		return err
	}
	if err := writeMarker(w.marker, b.seen); err != nil {
		return err
	}
	return nil
}

var errCrashed = errors.New("lake: simulated crash")

// crashAt reports whether a test stops the Writer dead at step.
func (w *Writer) crashAt(step string) bool {
	if w.crash != nil && w.crash(step) {
		w.dead = true
	}
	return w.dead
}

// housekeep compacts closed dates and applies retention.
func (w *Writer) housekeep(now time.Time) {
	w.mu.Lock()
	w.nextKeep = now.Add(w.o.RollInterval)
	w.mu.Unlock()
	if err := w.compactClosed(now); err != nil && !w.dead {
		w.noteError(err)
	}
	if w.dead {
		return
	}
	if err := w.applyRetention(now); err != nil {
		w.noteError(err)
	}
}

func (w *Writer) noteError(err error) {
	w.mu.Lock()
	w.stats.LastError, w.stats.LastErrorAt = err.Error(), w.tickNow
	w.mu.Unlock()
	w.o.Logger.Error("lake: housekeeping", "market", w.o.Market, "series", w.o.Prefix, "err", err)
}

// removeFile removes path, treating an absent file as removed.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
