package wal

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/internal/testenv"
)

func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stallPayload is entry i's payload: unique, so a lost or doubled entry
// shows in the replay.
func stallPayload(i int) []byte {
	p := bytes.Repeat([]byte{byte(i)}, 900)
	return fmt.Appendf(p[:0:len(p)], "entry-%06d|%s", i, p[20:])
}

// A full disk stalls the log: nothing is acked, Append blocks, Stats says
// so; when the disk grows the log resumes by itself, and the log on disk
// holds every entry once, in order, with no torn record.
func TestLog_FullDiskStallsAndResumes(t *testing.T) {
	dir := filepath.Join(testenv.Tmpfs(t, "2m"), "wal")
	opt := Options{Sync: SyncBatch, MaxBatch: 32, SegmentSize: 128 << 10}
	l, _ := mustOpen(t, dir, opt)

	const n = 5000 // ~4.6 MB: more than twice the tmpfs
	var (
		mu    sync.Mutex
		acked int
		errs  []error
		order []uint64
	)
	done := func(index uint64, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		acked++
		order = append(order, index)
	}
	ackedNow := func() int { mu.Lock(); defer mu.Unlock(); return acked }
	appendErr := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := l.Append(entry.Entry{Arrival: int64(i), Topic: "t", Payload: stallPayload(i)}, done); err != nil {
				appendErr <- fmt.Errorf("Append #%d: %w", i, err)
				return
			}
		}
		appendErr <- nil
	}()

	waitFor(t, "the log to stall", func() bool { return l.Stats().Stalled })
	st := l.Stats()
	if st.Stalls != 1 || !strings.Contains(st.StallCause, "no space left on device") {
		t.Fatalf("stalled: got Stalls %d, StallCause %q, want 1 and a cause naming ENOSPC", st.Stalls, st.StallCause)
	}
	before := ackedNow()
	time.Sleep(700 * time.Millisecond) // several retries (100, 200, 400 ms)
	st = l.Stats()
	if got := ackedNow(); got != before || !st.Stalled || st.Stalls != 1 {
		t.Fatalf("while the disk is full: acked went %d -> %d, Stalled %v, Stalls %d; want no ack, still stalled, one stall",
			before, got, st.Stalled, st.Stalls)
	}
	if st.Appended >= n || st.Pending != 4*opt.MaxBatch {
		t.Fatalf("while the disk is full: Appended %d, Pending %d; want Append blocked at %d pending", st.Appended, st.Pending, 4*opt.MaxBatch)
	}
	select {
	case err := <-appendErr:
		t.Fatalf("the appender finished while the disk was full: %v", err)
	default:
	}

	testenv.ResizeTmpfs(t, filepath.Dir(dir), "16m")
	if err := <-appendErr; err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatalf("Sync after the disk grew: %v", err)
	}
	mu.Lock()
	if acked != n || len(errs) != 0 {
		t.Fatalf("after the disk grew: %d acked, errors %v; want %d acked, none failed", acked, errs, n)
	}
	for i, index := range order {
		if index != uint64(i+1) {
			t.Fatalf("ack #%d for index %d, want acks in index order", i, index)
		}
	}
	mu.Unlock()
	if st := l.Stats(); st.Stalled || st.StallCause != "" || st.Stalls != 1 || st.Synced != n || st.Failed != 0 {
		t.Fatalf("after resuming: %+v, want not stalled, 1 stall, %d synced", st, n)
	}
	mustClose(t, l)

	// Open checks every record of every segment: a torn record left inside
	// a segment would fail it (older segment) or be repaired (tail).
	l, rep := mustOpen(t, dir, opt)
	defer mustClose(t, l)
	if rep.Repaired {
		t.Fatalf("reopen repaired %+v, want an intact log", rep)
	}
	got := mustReplay(t, l, 0)
	if len(got) != n {
		t.Fatalf("replayed %d entries, want %d", len(got), n)
	}
	for i, g := range got {
		if g.index != uint64(i+1) || g.e.Arrival != int64(i) || !bytes.Equal(g.e.Payload, stallPayload(i)) {
			t.Fatalf("entry #%d: index %d arrival %d payload %.12q, want index %d arrival %d payload %.12q",
				i, g.index, g.e.Arrival, g.e.Payload, i+1, i, stallPayload(i))
		}
	}
}

// Close ends a stall: the entries not written fail (they were never acked,
// so the broker sends them again) and Close returns rather than hangs.
func TestLog_CloseEndsStall(t *testing.T) {
	dir := filepath.Join(testenv.Tmpfs(t, "1m"), "wal")
	l, _ := mustOpen(t, dir, Options{Sync: SyncBatch, MaxBatch: 16, SegmentSize: 64 << 10})
	var failed sync.WaitGroup
	closed := make(chan error, 1)
	for i := range 2000 {
		failed.Add(1)
		once := sync.OnceFunc(failed.Done)
		if _, err := l.Append(entry.Entry{Topic: "t", Payload: stallPayload(i)}, func(uint64, error) { once() }); err != nil {
			once()
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("Append #%d: %v", i, err)
			}
			break
		}
		if i == 10 {
			go func() {
				for !l.Stats().Stalled {
					time.Sleep(5 * time.Millisecond)
				}
				closed <- l.Close()
			}()
		}
	}
	select {
	case err := <-closed:
		if err == nil || !strings.Contains(err.Error(), "stalled") {
			t.Errorf("Close during a stall: got %v, want an error saying entries were not written", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close during a stall hangs (or the log never stalled)")
	}
	waitOrFail(t, &failed, "done callbacks after Close")
}
