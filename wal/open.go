package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	twal "github.com/tidwall/wal"

	"github.com/km0/edgeproc/internal/private"
)

// SyncMode says when an appended entry counts as durable.
type SyncMode int

const (
	// SyncBatch is group commit, the default: entries are written and
	// fsynced together. Under load a batch waits for company, up to
	// Options.Interval or until Options.MaxBatch entries are waiting; at a
	// trickle each entry is written as soon as the writer is free.
	SyncBatch SyncMode = iota
	// SyncAlways writes and fsyncs each entry on its own (about 1 ms each
	// on a typical disk). For comparison and for very low rates.
	SyncAlways
	// SyncNone never fsyncs on its own: an entry is "durable" once written
	// to the OS, which survives kill -9 but not a power cut. For benchmarks
	// and tests.
	SyncNone
)

func (m SyncMode) String() string {
	switch m {
	case SyncBatch:
		return "batch"
	case SyncAlways:
		return "always"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("SyncMode(%d)", int(m))
}

// Defaults for the zero fields of Options.
const (
	DefaultInterval    = 40 * time.Millisecond
	DefaultMaxBatch    = 1024
	DefaultSegmentSize = 4 << 20
)

// Options tune a Log. The zero value is usable: group commit with the
// defaults below.
type Options struct {
	// Sync is when entries become durable. Default SyncBatch.
	Sync SyncMode
	// Interval is the longest an entry waits for company before its batch
	// is written and fsynced, with SyncBatch. The writer waits only as long
	// as the recent arrival rate needs to gather 256 entries, and not at all
	// when Interval would gather fewer than 16 (below 400 entries/s at the
	// default). Default 40ms.
	Interval time.Duration
	// MaxBatch is the number of waiting entries that triggers a write and
	// fsync at once, with SyncBatch. Append blocks while 4*MaxBatch entries
	// are appended but not yet durable. Default 1024.
	MaxBatch int
	// SegmentSize is the size, in bytes, at which a segment file is closed
	// and a new one started. Small segments keep TruncateFront cheap: it
	// rewrites the remainder of the segment holding its index. Default 4 MiB.
	SegmentSize int
	// OnFsync, if set, is called after each fsync with its latency and the
	// number of entries it made durable (0 for an explicit Sync with nothing
	// new), from the log's goroutine; it must be quick. Meant for a latency
	// histogram.
	OnFsync func(latency time.Duration, entries int)
	// OnCommitted, if set, is called from the log's goroutine after the
	// done callbacks of each batch the writer took (all durable, or all
	// failed; with SyncAlways after each entry's), so a caller that gathers
	// what done gives it can hand the batch on in one go: one wake-up of
	// its consumer per group commit instead of one per entry. It must be
	// quick, like done.
	OnCommitted func()
}

func (o Options) withDefaults() (Options, error) {
	switch o.Sync {
	case SyncBatch, SyncAlways, SyncNone:
	default:
		return o, fmt.Errorf("wal: unknown sync mode %d", int(o.Sync))
	}
	if o.Interval < 0 || o.MaxBatch < 0 || o.SegmentSize < 0 {
		return o, fmt.Errorf("wal: negative option (interval %v, max batch %d, segment size %d)",
			o.Interval, o.MaxBatch, o.SegmentSize)
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	return o, nil
}

// RepairReport describes what Open cut from a torn or corrupt tail. The zero
// value (Repaired false) means the log was intact.
type RepairReport struct {
	// Repaired is true if the last segment was cut.
	Repaired bool
	// Segment is the path of the segment file that was cut.
	Segment string
	// Offset is the byte offset of the first bad entry in Segment: the
	// file's size after the cut.
	Offset int64
	// BytesDropped is how many bytes were cut off.
	BytesDropped int64
	// Index is the index the first dropped entry had; the next Append
	// gets it.
	Index uint64
	// EntriesDropped counts the entries cut off: every good record after
	// the damage (found again past a damaged length prefix), plus one for
	// each damaged stretch. A kill -9 mid-write gives 1; a flipped byte in
	// the length prefix of the first of 9 entries gives 9.
	EntriesDropped int
	// Cause is what was wrong with the first bad entry (wraps ErrMalformed
	// for a torn write, ErrChecksum for a flipped bit).
	Cause error
}

// Open opens or creates the log in dir, which the log owns: nothing else
// should write there. A missing dir is created with mode 0700, segment files
// with 0600; an existing dir and its files lose any group and other access
// (an older binary made them 0750/0640), logged if that fails.
//
// Every segment is read and every entry's CRC checked. A torn or corrupt
// tail (kill -9 mid-write, zeros after a power cut) is repaired: the last
// segment is cut after its last good entry, and the cut is logged and
// described in the RepairReport; Open never refuses to start because of the
// tail. Damage in an older segment is different: those were fsynced before
// the next segment was started, so a bad entry there is disk corruption, not
// a crash, and cutting there would silently drop every later entry, so Open
// fails with a *CorruptError naming the segment and offset. The same goes for
// a missing segment (a gap in the indexes).
//
// log may be nil (no logging). Errors name the path involved.
func Open(dir string, opt Options, log *slog.Logger) (*Log, RepairReport, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, RepairReport{}, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, private.DirMode); err != nil {
		return nil, RepairReport{}, fmt.Errorf("wal: create dir %s: %w", dir, err)
	}
	for _, err := range private.Restrict(dir) {
		log.Warn("wal: cannot make the log private", "err", err)
	}
	tw, rep, err := openRepaired(dir, opt, log)
	if err != nil {
		return nil, rep, err
	}
	l, err := newLog(dir, opt, log, tw)
	if err != nil {
		tw.Close()
		return nil, rep, err
	}
	if rep.Repaired {
		l.repairs.Store(1)
	}
	log.Info("wal opened", "dir", dir, "first_index", l.FirstIndex(), "last_index", l.LastIndex(),
		"bytes", l.bytes.Load(), "sync", opt.Sync.String())
	return l, rep, nil
}

func tidwallOptions(opt Options) *twal.Options {
	return &twal.Options{
		NoSync:           true, // the writer goroutine fsyncs per SyncMode
		SegmentSize:      opt.SegmentSize,
		LogFormat:        twal.Binary,
		SegmentCacheSize: 2,
		NoCopy:           true, // decodeFrame copies what it must
		AllowEmpty:       true, // TruncateFront may drop everything
		DirPerms:         private.DirMode,
		FilePerms:        private.FileMode,
	}
}

// openRepaired opens tidwall's log, verifying every segment first and
// cutting a bad tail.
func openRepaired(dir string, opt Options, log *slog.Logger) (*twal.Log, RepairReport, error) {
	// tidwall's Open resolves an interrupted truncation (START/END files)
	// before loading the tail, so it runs first when there is one (or no
	// segment yet, which it creates), even though a torn tail makes it fail
	// with ErrCorrupt. Otherwise the tail is checked and cut first: on a
	// torn tail tidwall v1.2.1's Open returns ErrCorrupt with the last
	// segment still open for appending, a descriptor nobody can close but
	// the garbage collector (each reopen after a full disk leaked one).
	segs, leftovers, lerr := listSegments(dir)
	if lerr != nil {
		return nil, RepairReport{}, fmt.Errorf("wal: %w", lerr)
	}
	var (
		tw  *twal.Log
		err error
	)
	closeTW := func() {
		if tw != nil {
			tw.Close()
			tw = nil
		}
	}
	if len(leftovers) > 0 || len(segs) == 0 {
		tw, err = twal.Open(dir, tidwallOptions(opt))
		if err != nil && !errors.Is(err, twal.ErrCorrupt) {
			return nil, RepairReport{}, fmt.Errorf("wal: open %s: %w", dir, err)
		}
		if segs, leftovers, lerr = listSegments(dir); lerr != nil {
			closeTW()
			return nil, RepairReport{}, fmt.Errorf("wal: %w", lerr)
		}
	}
	if tw == nil && len(leftovers) > 0 {
		return nil, RepairReport{}, fmt.Errorf("wal: open %s: interrupted truncation left %s that tidwall/wal cannot resolve: %w",
			dir, strings.Join(leftovers, ", "), err)
	}
	if len(segs) == 0 {
		// tidwall always leaves at least one segment; none means it failed.
		closeTW()
		return nil, RepairReport{}, fmt.Errorf("wal: open %s: no segment files: %w", dir, err)
	}

	rep, err := repairTail(segs, closeTW, log)
	if err != nil {
		closeTW()
		return nil, rep, err
	}
	if tw == nil {
		tw, err = twal.Open(dir, tidwallOptions(opt))
		if err != nil {
			return nil, rep, fmt.Errorf("wal: open %s after repair: %w", dir, err)
		}
	}
	return tw, rep, nil
}

// repairTail checks every segment in order: damage in any but the last is
// not a torn write and fails; a damaged last one is cut after its last
// good entry (closeTW first: tidwall may hold it open) and reported.
func repairTail(segs []segmentFile, closeTW func(), log *slog.Logger) (RepairReport, error) {
	var rep RepairReport
	for i, seg := range segs {
		r, serr := scanSegment(seg)
		if serr != nil {
			return rep, fmt.Errorf("wal: %w", serr)
		}
		if i < len(segs)-1 {
			if r.damage != nil {
				return rep, fmt.Errorf("%w (not the last segment, so not a torn write: restore the directory or remove it and accept the loss)", r.damage)
			}
			if next := seg.index + uint64(r.entries); next != segs[i+1].index {
				return rep, &CorruptError{Segment: segs[i+1].path, Offset: 0, Index: next,
					Err: fmt.Errorf("%w: segment %s ends before index %d, next segment starts at %d",
						ErrMalformed, seg.path, next, segs[i+1].index)}
			}
			continue
		}
		if r.damage == nil {
			break
		}
		rep = RepairReport{
			Repaired:       true,
			Segment:        seg.path,
			Offset:         r.valid,
			BytesDropped:   r.size - r.valid,
			Index:          r.damage.Index,
			EntriesDropped: r.dropped,
			Cause:          r.damage.Err,
		}
		closeTW() // tidwall keeps the last segment open for appending
		if cerr := cutFile(seg.path, r.valid); cerr != nil {
			return rep, fmt.Errorf("wal: repair: %w", cerr)
		}
		log.Warn("wal: repaired torn or corrupt tail", "segment", seg.path, "offset", rep.Offset,
			"bytes_dropped", rep.BytesDropped, "entries_dropped", rep.EntriesDropped,
			"first_dropped_index", rep.Index, "cause", rep.Cause)
	}
	return rep, nil
}
