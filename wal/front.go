package wal

import (
	"errors"
	"fmt"

	"github.com/km0/edgeproc/entry"
	twal "github.com/tidwall/wal"
)

// Replay calls fn for every entry with index >= from, in index order, up to
// the last entry written when Replay was called. A from below FirstIndex
// starts at FirstIndex (entries before it were truncated away). It is meant
// for start-up, before appends, but is safe at any time. The entry.Entry's Payload
// aliases the log's buffers (see entry.Entry). A corrupt entry stops it with a
// *CorruptError carrying the index; an error from fn stops it and is
// returned wrapped with the index.
func (l *Log) Replay(from uint64, fn func(index uint64, e entry.Entry) error) error {
	l.mu.Lock()
	closing := l.closing
	l.mu.Unlock()
	if closing {
		return ErrClosed
	}
	from = max(from, l.first.Load())
	last := l.written.Load()
	for i := from; i <= last; i++ {
		l.twMu.RLock()
		data, err := l.tw.Read(i)
		l.twMu.RUnlock()
		if err != nil {
			if errors.Is(err, twal.ErrClosed) {
				return ErrClosed
			}
			return fmt.Errorf("wal: read index %d from %s: %w", i, l.dir, err)
		}
		e, err := decodeFrame(i, data)
		if err != nil {
			return err
		}
		if err := fn(i, e); err != nil {
			return fmt.Errorf("wal: replay index %d: %w", i, err)
		}
	}
	return nil
}

// TruncateFront drops the entries before index, once a checkpoint covers
// them; index becomes FirstIndex. An index at or below FirstIndex does
// nothing; LastIndex()+1 empties the log. Entries still waiting to be written
// are synced first. It rewrites the rest of the segment holding index and
// fsyncs it, so it costs up to one SegmentSize write: call it at
// checkpoints, not per entry.
func (l *Log) TruncateFront(index uint64) error {
	l.truncMu.Lock()
	defer l.truncMu.Unlock()
	l.mu.Lock()
	closing, last := l.closing, l.next-1
	l.mu.Unlock()
	if closing {
		return ErrClosed
	}
	if index <= l.first.Load() {
		return nil
	}
	if index > last+1 {
		return fmt.Errorf("wal: truncate front of %s to index %d: beyond the last index %d", l.dir, index, last)
	}
	if index-1 > l.written.Load() {
		if err := l.Sync(); err != nil {
			return err
		}
	}
	l.twMu.RLock()
	err := l.tw.TruncateFront(index)
	l.twMu.RUnlock()
	if err != nil {
		if errors.Is(err, twal.ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("wal: truncate front of %s to index %d: %w", l.dir, index, err)
	}
	l.first.Store(index)
	if size, err := dirBytes(l.dir); err == nil {
		l.bytes.Store(size)
	}
	return nil
}
