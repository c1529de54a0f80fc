package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	twal "github.com/tidwall/wal"
)

// A full disk stalls the log rather than failing it (see the package
// doc): the stall, its retries and its end.

// isNoSpace reports whether err is a full disk or an exhausted quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// stall records that the writer waits out cause, logging its start.
func (l *Log) stall(cause error, retry time.Duration) {
	l.mu.Lock()
	first := l.stallCause == nil
	l.stallCause = cause
	if first {
		l.stallSince = time.Now()
	}
	pending := l.pending
	l.mu.Unlock()
	if first {
		l.stalls.Add(1)
		l.log.Warn("wal: disk full; acking nothing until the write succeeds", "dir", l.dir,
			"err", cause, "pending", pending, "retry_in", retry)
	}
}

func (l *Log) endStall() {
	l.mu.Lock()
	cause, since := l.stallCause, l.stallSince
	l.stallCause = nil
	l.mu.Unlock()
	if cause != nil {
		l.log.Info("wal: disk has room again; resumed", "dir", l.dir, "stalled_for", time.Since(since).Round(time.Millisecond))
	}
}

// reopen closes tidwall and opens it again, cutting a partial record a
// failed write left at the tail. Only the writer calls it.
func (l *Log) reopen() error {
	l.twMu.Lock()
	defer l.twMu.Unlock()
	// Closing twice is harmless (tidwall answers ErrClosed), and a closed
	// tw stays in place if the reopen fails, so readers get ErrClosed.
	// tidwall's Close fsyncs first, and a failed fsync is fatal here too.
	if err := l.tw.Close(); err != nil && !errors.Is(err, twal.ErrClosed) {
		// %v, not %w: a failed fsync must not look like a full disk to retry.
		return fmt.Errorf("wal: close %s to reopen it after a full disk: %v", l.dir, err)
	}
	tw, _, err := openRepaired(l.dir, l.opt, slog.New(slog.DiscardHandler))
	if err != nil {
		return fmt.Errorf("wal: reopen %s after a full disk: %w", l.dir, err)
	}
	last, err := tw.LastIndex()
	if err == nil && last < l.written.Load() {
		err = fmt.Errorf("%w: reopened log ends at index %d, before written index %d", ErrCorrupt, last, l.written.Load())
	}
	if err != nil {
		tw.Close()
		return fmt.Errorf("wal: reopen %s after a full disk: %w", l.dir, err)
	}
	l.tw = tw
	l.written.Store(last)
	if size, err := dirBytes(l.dir); err == nil {
		l.bytes.Store(size)
	}
	return nil
}
