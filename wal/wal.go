// Package wal is edgeproc's write-ahead log of arrived positions, on
// github.com/tidwall/wal, with CRC-32C framing, group commit and torn-tail
// repair.
//
// The service appends every arrived MQTT message before acknowledging it to
// the broker (the ack goes in Append's done callback), checkpoints its state
// with the index it reflects, replays the log after that index on restart,
// and truncates the front once a checkpoint covers it.
//
// tidwall/wal gives indexes, segment files and cheap front truncation but no
// checksums and no recovery from a torn write; this package frames each
// entry with a version byte and a CRC-32C, checks every entry at Open, cuts a
// damaged tail, and owns fsync so that many entries share one.
//
// A full disk (ENOSPC, EDQUOT on a write) is not fatal: the log stalls. It
// keeps the batch that could not be written, acks nothing (done is not
// called, so Append soon blocks on backpressure), reports it in Stats, and
// retries every 100 ms, doubling to 5 s. Before each retry it closes and
// reopens its segments, cutting the partial record the failed write may have
// left (tidwall keeps no usable state after a failed write), and resends
// only the entries that are not already on disk, so once space returns it
// resumes by itself with nothing lost, nothing twice and no torn record
// inside a segment. Every other write error, and any fsync error (after a
// failed fsync Linux may drop the dirty pages, so a retry could report
// success for lost data), stops the log for good as before.
package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/km0/edgeproc/entry"
	twal "github.com/tidwall/wal"
)

// maxPooledFrame caps the encode buffers kept for reuse, so one huge payload
// does not pin memory for good.
const maxPooledFrame = 64 << 10

// A stalled log retries after firstStallRetry, doubling up to maxStallRetry.
const (
	firstStallRetry = 100 * time.Millisecond
	maxStallRetry   = 5 * time.Second
)

// Log is an open write-ahead log. Its methods are safe for concurrent use.
type Log struct {
	dir string
	opt Options
	log *slog.Logger

	// tw is replaced only by the writer goroutine (when it reopens the
	// segments after a full disk), under twMu; the writer reads it without
	// the lock, every other goroutine with the read lock.
	twMu sync.RWMutex
	tw   *twal.Log

	frames sync.Pool // *[]byte encode buffers

	mu      sync.Mutex
	space   *sync.Cond // broadcast when pending drops, or the log closes or fails
	q       *queue     // appended, not yet taken by the writer
	spare   *queue     // the writer's drained queue, for reuse; nil while in use
	next    uint64     // index of the next Append
	pending int        // appended, done not yet called
	limit   int        // Append blocks while pending >= limit
	firstAt time.Time  // when q's first entry was appended
	closing bool
	failed  error // first write or fsync error; the log accepts nothing after it
	// stallCause is the full-disk error the writer is waiting out, or nil;
	// stallSince is when that began.
	stallCause error
	stallSince time.Time

	kick    chan struct{}   // wakes the writer; capacity 1
	syncReq chan chan error // explicit Sync requests
	stopped chan struct{}   // closed when the writer has exited
	closeCh chan struct{}   // closed by Close: ends a stall

	truncMu sync.Mutex // serialises TruncateFront

	first   atomic.Uint64 // first index in the log
	written atomic.Uint64 // last index handed to tidwall

	appended   atomic.Uint64
	synced     atomic.Uint64
	failedN    atomic.Uint64
	fsyncs     atomic.Uint64
	fsyncTotal atomic.Int64 // ns
	fsyncLast  atomic.Int64 // ns
	bytes      atomic.Int64
	repairs    atomic.Uint64
	stalls     atomic.Uint64

	batch    twal.Batch // writer-owned
	arrivals arrivals   // writer-owned
}

// queue is a run of encoded frames, back to back, and what to do with each.
type queue struct {
	buf   []byte
	metas []meta
}

type meta struct {
	index uint64
	end   int // end of the frame in buf
	done  func(index uint64, err error)
}

func (q *queue) reset() {
	q.buf = q.buf[:0]
	clear(q.metas) // drop the callbacks' closures
	q.metas = q.metas[:0]
}

func newLog(dir string, opt Options, log *slog.Logger, tw *twal.Log) (*Log, error) {
	first, err := tw.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("wal: first index of %s: %w", dir, err)
	}
	last, err := tw.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("wal: last index of %s: %w", dir, err)
	}
	size, err := dirBytes(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	l := &Log{
		dir:     dir,
		opt:     opt,
		log:     log,
		tw:      tw,
		q:       &queue{},
		spare:   &queue{},
		next:    last + 1,
		limit:   4 * opt.MaxBatch,
		kick:    make(chan struct{}, 1),
		syncReq: make(chan chan error),
		stopped: make(chan struct{}),
		closeCh: make(chan struct{}),
	}
	l.space = sync.NewCond(&l.mu)
	l.frames.New = func() any { b := make([]byte, 0, 512); return &b }
	l.first.Store(first)
	l.written.Store(last)
	l.bytes.Store(size)
	go l.run()
	return l, nil
}

// Append assigns the next index to e, queues it, and returns the index. done,
// if not nil, is called once the entry is durable per the SyncMode (after
// its batch's fsync), or with the error that kept it from being so; calls
// come from the log's goroutine in index order, so done must be quick and
// must not call Append, Sync or Close. e is copied; the caller may reuse its
// buffers at once.
//
// Append never waits for an fsync itself, but it blocks while 4*MaxBatch
// entries are not yet durable (backpressure), which includes the whole of a
// full-disk stall. It fails with ErrClosed after Close, with the first write
// or fsync error once one has happened, and for a Kind it does not know.
func (l *Log) Append(e entry.Entry, done func(index uint64, err error)) (uint64, error) {
	if e.Kind >= entry.Kinds {
		return 0, fmt.Errorf("wal: append: unknown entry kind %d", uint8(e.Kind))
	}
	bp := l.frames.Get().(*[]byte)
	frame := appendFrame((*bp)[:0], e)

	l.mu.Lock()
	for l.pending >= l.limit && !l.closing && l.failed == nil {
		l.space.Wait()
	}
	if l.closing || l.failed != nil {
		err := l.failed
		if l.closing {
			err = ErrClosed
		}
		l.mu.Unlock()
		l.putFrame(bp, frame)
		return 0, err
	}
	index := l.next
	l.next++
	q := l.q
	q.buf = append(q.buf, frame...)
	q.metas = append(q.metas, meta{index: index, end: len(q.buf), done: done})
	l.pending++
	l.appended.Add(1) // under mu, so Stats never shows Synced > Appended
	n := len(q.metas)
	if n == 1 {
		l.firstAt = time.Now()
	}
	l.mu.Unlock()
	l.putFrame(bp, frame)

	// The writer needs waking for a first entry (to start the Interval
	// clock, or to write at once in the other modes) and when a batch is
	// full; in between it is either busy or already counting.
	if n == 1 || n == l.opt.MaxBatch {
		l.wake()
	}
	return index, nil
}

func (l *Log) putFrame(bp *[]byte, frame []byte) {
	if cap(frame) > maxPooledFrame {
		return
	}
	*bp = frame[:0]
	l.frames.Put(bp)
}

func (l *Log) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// run is the writer goroutine: it takes queued entries in batches, writes
// them, fsyncs per the SyncMode and calls their done callbacks.
func (l *Log) run() {
	defer close(l.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var reply chan error
		select {
		case <-l.kick:
		case <-timer.C:
		case reply = <-l.syncReq:
		}
		for {
			l.mu.Lock()
			n := len(l.q.metas)
			now := time.Now()
			wait := time.Duration(0)
			if n > 0 && l.opt.Sync == SyncBatch {
				wait = l.arrivals.linger(now, l.opt.Interval) - now.Sub(l.firstAt)
			}
			due := n > 0 && (reply != nil || l.closing || wait <= 0 || n >= l.opt.MaxBatch)
			if !due {
				if n > 0 {
					timer.Reset(wait)
				}
				l.mu.Unlock()
				break
			}
			q := l.q
			l.q, l.spare = l.spare, nil
			l.mu.Unlock()
			l.arrivals.add(now, n)

			err := l.commit(q)

			l.mu.Lock()
			l.pending -= len(q.metas)
			if err != nil && l.failed == nil {
				l.failed = err
				if !l.closing {
					l.log.Error("wal: write failed; the log accepts no more entries", "dir", l.dir, "err", err)
				}
			}
			q.reset()
			l.spare = q
			l.space.Broadcast()
			l.mu.Unlock()
		}
		if reply != nil {
			reply <- l.syncNow()
		}
		l.mu.Lock()
		exit := l.closing && len(l.q.metas) == 0
		l.mu.Unlock()
		if exit {
			return
		}
	}
}

// commit writes q to tidwall, fsyncs per the SyncMode and calls the done
// callbacks. It returns the first error.
func (l *Log) commit(q *queue) error {
	l.mu.Lock()
	err := l.failed
	l.mu.Unlock()
	ok := 0 // metas[:ok] are durable and their done called
	if err == nil {
		if l.opt.Sync == SyncAlways {
			for i, m := range q.metas {
				if err = l.writeEntries(q, i, i+1); err != nil {
					break
				}
				if err = l.fsync(1); err != nil {
					break
				}
				l.finish(m, nil)
				ok++
				l.committed()
			}
		} else {
			err = l.writeEntries(q, 0, len(q.metas))
			if err == nil && l.opt.Sync == SyncBatch {
				err = l.fsync(len(q.metas))
			}
		}
	}
	for _, m := range q.metas[ok:] {
		l.finish(m, err)
	}
	if ok < len(q.metas) || l.opt.Sync != SyncAlways {
		l.committed()
	}
	return err
}

func (l *Log) committed() {
	if l.opt.OnCommitted != nil {
		l.opt.OnCommitted()
	}
}

// writeEntries hands q.metas[lo:hi] to tidwall, waiting out a full disk (see
// the package doc): it returns nil once they are all written, or the first
// error that is not a full disk, or an error once Close ends a stall.
func (l *Log) writeEntries(q *queue, lo, hi int) error {
	var (
		wait   time.Duration
		reopen bool
		cause  error
	)
	for {
		if reopen {
			err := l.reopen()
			if err == nil {
				reopen = false
				// The failed write may have got some whole records to disk.
				for lo < hi && q.metas[lo].index <= l.written.Load() {
					lo++
				}
			} else if !isNoSpace(err) {
				return err
			} else {
				cause = err
			}
		}
		if !reopen {
			if lo == hi {
				l.endStall()
				return nil
			}
			err := l.write(q, lo, hi)
			if err == nil {
				l.endStall()
				return nil
			}
			if !isNoSpace(err) {
				return err
			}
			cause, reopen = err, true
		}
		wait = min(max(2*wait, firstStallRetry), maxStallRetry)
		l.stall(cause, wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-l.closeCh:
			t.Stop()
			return fmt.Errorf("wal: closed while stalled, %d entries not written: %w", hi-lo, cause)
		}
	}
}

// write hands q.metas[lo:hi] to tidwall.
func (l *Log) write(q *queue, lo, hi int) error {
	start, size := 0, 0
	if lo > 0 {
		start = q.metas[lo-1].end
	}
	for _, m := range q.metas[lo:hi] {
		l.batch.Write(m.index, q.buf[start:m.end])
		size += m.end - start + uvarintLen(uint64(m.end-start))
		start = m.end
	}
	if err := l.tw.WriteBatch(&l.batch); err != nil {
		l.batch.Clear()
		return fmt.Errorf("wal: write to %s: %w", l.dir, err)
	}
	l.written.Store(q.metas[hi-1].index)
	l.bytes.Add(int64(size))
	return nil
}

func (l *Log) finish(m meta, err error) {
	if err == nil {
		l.synced.Add(1)
	} else {
		l.failedN.Add(1)
	}
	if m.done != nil {
		m.done(m.index, err)
	}
}

func (l *Log) fsync(entries int) error {
	start := time.Now()
	err := l.tw.Sync()
	d := time.Since(start)
	if err != nil {
		return fmt.Errorf("wal: fsync %s: %w", l.dir, err)
	}
	l.fsyncs.Add(1)
	l.fsyncTotal.Add(int64(d))
	l.fsyncLast.Store(int64(d))
	if l.opt.OnFsync != nil {
		l.opt.OnFsync(d, entries)
	}
	return nil
}

// syncNow runs in the writer after a forced flush.
func (l *Log) syncNow() error {
	l.mu.Lock()
	err := l.failed
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if err := l.fsync(0); err != nil {
		l.mu.Lock()
		if l.failed == nil {
			l.failed = err
		}
		l.space.Broadcast()
		l.mu.Unlock()
		return err
	}
	return nil
}

// Sync writes every entry appended so far and fsyncs, whatever the SyncMode;
// the entries' done callbacks have been called when it returns.
func (l *Log) Sync() error {
	l.mu.Lock()
	closing := l.closing
	l.mu.Unlock()
	if closing {
		return ErrClosed
	}
	reply := make(chan error, 1)
	select {
	case l.syncReq <- reply:
	case <-l.stopped:
		return ErrClosed
	}
	return <-reply
}

// FirstIndex is the index of the first entry in the log. When the log is
// empty it is LastIndex()+1 (1 for a new log).
func (l *Log) FirstIndex() uint64 { return l.first.Load() }

// LastIndex is the index of the last entry appended (0 for a new log): the
// next Append gets LastIndex()+1. It may not be durable yet.
func (l *Log) LastIndex() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Stats are counters since Open, for metrics.
type Stats struct {
	Appended uint64 // entries accepted by Append
	Synced   uint64 // entries made durable (done called with nil)
	Failed   uint64 // entries whose done got an error
	Pending  int    // entries appended but not yet durable
	// Fsyncs and FsyncTotal are a latency histogram's _count and _sum;
	// Options.OnFsync gives each observation.
	Fsyncs     uint64
	FsyncTotal time.Duration
	LastFsync  time.Duration // latency of the latest fsync
	Bytes      int64         // size of the segment files
	Repairs    uint64        // tails repaired at Open: 0 or 1
	FirstIndex uint64
	LastIndex  uint64
	// Stalled is true while the log waits out a full disk (see the package
	// doc); StallCause is then that write error, else "". Stalls counts
	// the stalls that began since Open.
	Stalled    bool
	StallCause string
	Stalls     uint64
}

// Stats returns the current counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	pending, last, stall := l.pending, l.next-1, l.stallCause
	l.mu.Unlock()
	cause := ""
	if stall != nil {
		cause = stall.Error()
	}
	return Stats{
		Stalled:    stall != nil,
		StallCause: cause,
		Stalls:     l.stalls.Load(),
		Appended:   l.appended.Load(),
		Synced:     l.synced.Load(),
		Failed:     l.failedN.Load(),
		Pending:    pending,
		Fsyncs:     l.fsyncs.Load(),
		FsyncTotal: time.Duration(l.fsyncTotal.Load()),
		LastFsync:  time.Duration(l.fsyncLast.Load()),
		Bytes:      l.bytes.Load(),
		Repairs:    l.repairs.Load(),
		FirstIndex: l.first.Load(),
		LastIndex:  last,
	}
}

// Close stops accepting entries (Append then fails with ErrClosed, also for
// callers blocked by backpressure), writes and fsyncs those already
// appended, calls their done callbacks, and closes the files. It returns the
// log's write error if it had one. A second Close returns ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closing = true
	close(l.closeCh)
	l.space.Broadcast()
	l.mu.Unlock()
	l.wake()
	<-l.stopped

	l.mu.Lock()
	failed := l.failed
	l.mu.Unlock()
	var cerr error
	if err := l.tw.Close(); err != nil && !errors.Is(err, twal.ErrClosed) { // fsyncs the tail
		cerr = fmt.Errorf("wal: close %s: %w", l.dir, err)
	}
	return errors.Join(failed, cerr)
}
