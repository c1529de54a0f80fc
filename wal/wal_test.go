package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/internal/testenv"
)

func mustOpen(tb testing.TB, dir string, opt Options) (*Log, RepairReport) {
	tb.Helper()
	l, rep, err := Open(dir, opt, nil)
	if err != nil {
		tb.Fatalf("Open(%s): %v", dir, err)
	}
	return l, rep
}

func mustClose(tb testing.TB, l *Log) {
	tb.Helper()
	if err := l.Close(); err != nil {
		tb.Fatalf("Close: %v", err)
	}
}

// mustAppend appends es and waits until all are durable.
func mustAppend(tb testing.TB, l *Log, es []entry.Entry) []uint64 {
	tb.Helper()
	idx := make([]uint64, len(es))
	for i, e := range es {
		var err error
		if idx[i], err = l.Append(e, nil); err != nil {
			tb.Fatalf("Append #%d: %v", i, err)
		}
	}
	if err := l.Sync(); err != nil {
		tb.Fatalf("Sync: %v", err)
	}
	return idx
}

// mustAppendAsync appends n empty entries without waiting for them.
func mustAppendAsync(tb testing.TB, l *Log, n int, done func(uint64, error)) {
	tb.Helper()
	for i := range n {
		if _, err := l.Append(entry.Entry{}, done); err != nil {
			tb.Fatalf("Append #%d: %v", i, err)
		}
	}
}

type indexed struct {
	index uint64
	e     entry.Entry
}

func mustReplay(tb testing.TB, l *Log, from uint64) []indexed {
	tb.Helper()
	var got []indexed
	err := l.Replay(from, func(i uint64, e entry.Entry) error {
		e.Payload = append([]byte(nil), e.Payload...)
		got = append(got, indexed{i, e})
		return nil
	})
	if err != nil {
		tb.Fatalf("Replay(%d): %v", from, err)
	}
	return got
}

// randomEntries makes n entries with random topics and payloads, including
// empty ones and 4 KiB ones.
func randomEntries(rng *rand.Rand, n int) []entry.Entry {
	es := make([]entry.Entry, n)
	for i := range es {
		var size int
		switch rng.IntN(10) {
		case 0:
			size = 0
		case 1:
			size = 4096
		default:
			size = rng.IntN(200)
		}
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		topic := fmt.Sprintf("couriers/m%d/c%d/pos", rng.IntN(5), rng.IntN(1000))
		if rng.IntN(20) == 0 {
			topic = ""
		}
		kind := entry.Position
		if rng.IntN(20) == 0 {
			kind = entry.Tick
		}
		es[i] = entry.Entry{Kind: kind, Arrival: rng.Int64() - rng.Int64(), Topic: topic, Payload: p}
	}
	return es
}

func assertReplay(tb testing.TB, got []indexed, first uint64, want []entry.Entry) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("replayed %d entries, want %d", len(got), len(want))
	}
	for i, g := range got {
		if wantIdx := first + uint64(i); g.index != wantIdx {
			tb.Fatalf("entry #%d: got index %d, want %d", i, g.index, wantIdx)
		}
		assertEntry(tb, g.index, g.e, want[i])
	}
}

func TestLog_RoundTrip(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(1, uint64(mode)))
			es := randomEntries(rng, 3000)
			opt := Options{Sync: mode, SegmentSize: 64 << 10}

			l, rep := mustOpen(t, dir, opt)
			if rep.Repaired {
				t.Fatalf("new log: got repair %+v, want none", rep)
			}
			if got, want := l.FirstIndex(), uint64(1); got != want {
				t.Errorf("new log FirstIndex: got %d, want %d", got, want)
			}
			if got, want := l.LastIndex(), uint64(0); got != want {
				t.Errorf("new log LastIndex: got %d, want %d", got, want)
			}
			idx := mustAppend(t, l, es)
			for i, got := range idx {
				if want := uint64(i + 1); got != want {
					t.Fatalf("Append #%d: got index %d, want %d", i, got, want)
				}
			}
			assertReplay(t, mustReplay(t, l, 0), 1, es)
			mustClose(t, l)

			segs, _, err := listSegments(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) < 3 {
				t.Fatalf("got %d segments, want several (the test must cross segments)", len(segs))
			}

			l, rep = mustOpen(t, dir, opt)
			defer mustClose(t, l)
			if rep.Repaired {
				t.Fatalf("clean reopen: got repair %+v, want none", rep)
			}
			if got, want := l.LastIndex(), uint64(len(es)); got != want {
				t.Fatalf("LastIndex after reopen: got %d, want %d", got, want)
			}
			assertReplay(t, mustReplay(t, l, 0), 1, es)
			assertReplay(t, mustReplay(t, l, 2500), 2500, es[2499:])
			if got := mustReplay(t, l, uint64(len(es)+1)); len(got) != 0 {
				t.Errorf("Replay past the end: got %d entries, want 0", len(got))
			}
			if st := l.Stats(); st.Bytes <= 0 {
				t.Errorf("Stats.Bytes: got %d, want > 0", st.Bytes)
			}
			// Appending after reopen continues the indexes.
			if got, err := l.Append(entry.Entry{Topic: "next"}, nil); err != nil || got != uint64(len(es)+1) {
				t.Fatalf("Append after reopen: got (%d, %v), want (%d, nil)", got, err, len(es)+1)
			}
		})
	}
}

func TestLog_StatsBytesMatchesDisk(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, dir, Options{Sync: SyncNone, SegmentSize: 8 << 10})
	mustAppend(t, l, randomEntries(rand.New(rand.NewPCG(2, 2)), 500))
	got := l.Stats().Bytes
	want, err := dirBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("Stats.Bytes: got %d, want %d (files on disk)", got, want)
	}
	mustClose(t, l)
}

func TestLog_GroupCommit(t *testing.T) {
	dir := t.TempDir()
	var (
		mu      sync.Mutex
		durable uint64 // entries made durable by fsyncs so far
		calls   []uint64
		bad     []string
	)
	opt := Options{Sync: SyncBatch, MaxBatch: 256, OnFsync: func(_ time.Duration, n int) {
		mu.Lock()
		durable += uint64(n)
		mu.Unlock()
	}}
	l, _ := mustOpen(t, dir, opt)
	done := func(i uint64, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			bad = append(bad, fmt.Sprintf("index %d: %v", i, err))
		}
		if i > durable {
			bad = append(bad, fmt.Sprintf("index %d done with only %d entries fsynced", i, durable))
		}
		calls = append(calls, i)
	}
	const producers, per = 4, 3000
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for j := range per {
				if _, err := l.Append(entry.Entry{Arrival: int64(j), Topic: fmt.Sprint(p), Payload: make([]byte, 100)}, done); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := l.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	st := l.Stats()
	mustClose(t, l)

	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	if len(calls) != producers*per {
		t.Fatalf("got %d done calls, want %d", len(calls), producers*per)
	}
	for i, got := range calls {
		if want := uint64(i + 1); got != want {
			t.Fatalf("done call #%d: got index %d, want %d (index order)", i, got, want)
		}
	}
	if st.Synced != producers*per || st.Appended != producers*per || st.Pending != 0 {
		t.Errorf("Stats: got synced %d appended %d pending %d, want %d %d 0",
			st.Synced, st.Appended, st.Pending, producers*per, producers*per)
	}
	// Under this load many entries must share each fsync.
	if perSync := float64(st.Synced) / float64(st.Fsyncs); perSync < 8 {
		t.Errorf("got %.1f entries per fsync (%d fsyncs), want >= 8", perSync, st.Fsyncs)
	}
	if st.FsyncTotal <= 0 || st.LastFsync <= 0 {
		t.Errorf("Stats fsync latency: got total %v last %v, want > 0", st.FsyncTotal, st.LastFsync)
	}
}

func TestLog_SyncBatchTriggers(t *testing.T) {
	// prime makes the writer expect company: n entries made durable just
	// now.
	prime := func(t *testing.T, l *Log, n int) {
		t.Helper()
		var wg sync.WaitGroup
		wg.Add(n)
		mustAppendAsync(t, l, n, func(uint64, error) { wg.Done() })
		waitOrFail(t, &wg, "priming entries never made durable")
	}
	// lone appends one entry and returns how long it took to be durable.
	lone := func(t *testing.T, l *Log, limit time.Duration) time.Duration {
		t.Helper()
		durable := make(chan time.Time, 1)
		start := time.Now()
		if _, err := l.Append(entry.Entry{Topic: "t"}, func(uint64, error) { durable <- time.Now() }); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-durable:
			return at.Sub(start)
		case <-time.After(limit):
			t.Fatal("a lone entry was never made durable")
			return 0
		}
	}
	t.Run("a trickle goes at once", func(t *testing.T) {
		const interval = 5 * time.Second
		l, _ := mustOpen(t, t.TempDir(), Options{Interval: interval})
		defer mustClose(t, l)
		for i := range 3 {
			if waited := lone(t, l, 2*interval); waited >= interval/2 {
				t.Errorf("lone entry %d, half a second after the last: durable after %v, want no wait for company (interval %v)", i, waited, interval)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	t.Run("interval bounds the wait", func(t *testing.T) {
		// After 5 entries at once the writer expects 50/s: 64 would take
		// 1.3 s, so a lone entry waits for company the whole interval.
		const interval = time.Second
		l, _ := mustOpen(t, t.TempDir(), Options{Interval: interval})
		defer mustClose(t, l)
		prime(t, l, 5)
		before := l.Stats().Fsyncs
		if waited := lone(t, l, 10*interval); waited < interval*9/10 {
			t.Errorf("a lone entry after a burst was fsynced after %v, want it to wait the %v interval", waited, interval)
		}
		if got := l.Stats().Fsyncs - before; got != 1 {
			t.Errorf("got %d fsyncs, want 1", got)
		}
	})
	t.Run("max batch", func(t *testing.T) {
		l, _ := mustOpen(t, t.TempDir(), Options{Interval: time.Hour, MaxBatch: 8})
		defer mustClose(t, l)
		prime(t, l, 1)
		before := l.Stats()
		var wg sync.WaitGroup
		wg.Add(8)
		mustAppendAsync(t, l, 7, func(uint64, error) { wg.Done() })
		time.Sleep(20 * time.Millisecond)
		if got := l.Stats().Synced - before.Synced; got != 0 {
			t.Fatalf("7 of MaxBatch 8 entries, company expected and an hour-long interval: got %d durable, want 0", got)
		}
		mustAppendAsync(t, l, 1, func(uint64, error) { wg.Done() })
		waitOrFail(t, &wg, "the 8th entry did not trigger a write")
		if st := l.Stats(); st.Fsyncs-before.Fsyncs != 1 || st.Synced-before.Synced != 8 {
			t.Errorf("got %d fsyncs and %d durable, want 1 and 8", st.Fsyncs-before.Fsyncs, st.Synced-before.Synced)
		}
	})
	t.Run("explicit sync", func(t *testing.T) {
		l, _ := mustOpen(t, t.TempDir(), Options{Interval: time.Hour})
		defer mustClose(t, l)
		var n int
		mustAppendAsync(t, l, 3, func(uint64, error) { n++ })
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		// Sync returns after the callbacks, and they ran on one goroutine.
		if n != 3 {
			t.Fatalf("after Sync: got %d done calls, want 3", n)
		}
	})
}

func waitOrFail(tb testing.TB, wg *sync.WaitGroup, msg string) {
	tb.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		tb.Fatal(msg)
	}
}

func TestLog_SyncModes(t *testing.T) {
	tests := []struct {
		mode       SyncMode
		wantFsyncs uint64
	}{
		{SyncAlways, 20}, // one per entry
		{SyncNone, 0},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			var perFsync []int
			l, _ := mustOpen(t, t.TempDir(), Options{Sync: tt.mode, OnFsync: func(_ time.Duration, n int) {
				perFsync = append(perFsync, n)
			}})
			var wg sync.WaitGroup
			wg.Add(20)
			var order []uint64
			for range 20 {
				if _, err := l.Append(entry.Entry{Payload: []byte("p")}, func(i uint64, err error) {
					if err != nil {
						t.Errorf("done %d: %v", i, err)
					}
					order = append(order, i)
					wg.Done()
				}); err != nil {
					t.Fatal(err)
				}
			}
			waitOrFail(t, &wg, "entries never made durable")
			st := l.Stats()
			if st.Fsyncs != tt.wantFsyncs || st.Synced != 20 {
				t.Errorf("got %d fsyncs, %d durable; want %d, 20", st.Fsyncs, st.Synced, tt.wantFsyncs)
			}
			for _, n := range perFsync {
				if n != 1 {
					t.Errorf("got an fsync covering %d entries, want 1", n)
				}
			}
			mustClose(t, l)
			for i, got := range order {
				if want := uint64(i + 1); got != want {
					t.Fatalf("done call #%d: got index %d, want %d", i, got, want)
				}
			}
		})
	}
}

func TestLog_Backpressure(t *testing.T) {
	l, _ := mustOpen(t, t.TempDir(), Options{Sync: SyncNone, MaxBatch: 2}) // limit 8
	release := make(chan struct{})
	var once sync.Once
	hold := func(uint64, error) { once.Do(func() { <-release }) }
	for i := range 8 {
		if _, err := l.Append(entry.Entry{}, hold); err != nil {
			t.Fatalf("Append #%d: %v", i, err)
		}
	}
	returned := make(chan error, 1)
	go func() {
		_, err := l.Append(entry.Entry{}, nil)
		returned <- err
	}()
	select {
	case err := <-returned:
		t.Fatalf("9th Append with 8 = 4*MaxBatch entries pending returned (%v), want it to block", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("9th Append after the writer caught up: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("9th Append still blocked after the writer caught up")
	}
	mustClose(t, l)
}

func TestLog_CloseReleasesBlockedAppend(t *testing.T) {
	l, _ := mustOpen(t, t.TempDir(), Options{Sync: SyncNone, MaxBatch: 1}) // limit 4
	release := make(chan struct{})
	var once sync.Once
	var doneErrs []error
	hold := func(_ uint64, err error) {
		once.Do(func() { <-release })
		doneErrs = append(doneErrs, err)
	}
	for range 4 {
		if _, err := l.Append(entry.Entry{}, hold); err != nil {
			t.Fatal(err)
		}
	}
	returned := make(chan error, 1)
	go func() {
		_, err := l.Append(entry.Entry{}, nil)
		returned <- err
	}()
	time.Sleep(20 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-returned:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked Append during Close: got %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocked Append not released by Close")
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The four accepted entries were still written and reported.
	if len(doneErrs) != 4 {
		t.Fatalf("got %d done calls, want 4", len(doneErrs))
	}
	for i, err := range doneErrs {
		if err != nil {
			t.Errorf("done #%d: got %v, want nil", i, err)
		}
	}
}

func TestLog_AfterClose(t *testing.T) {
	l, _ := mustOpen(t, t.TempDir(), Options{})
	mustClose(t, l)
	if _, err := l.Append(entry.Entry{}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Append: got %v, want ErrClosed", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync: got %v, want ErrClosed", err)
	}
	if err := l.Replay(0, func(uint64, entry.Entry) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Replay: got %v, want ErrClosed", err)
	}
	if err := l.TruncateFront(1); !errors.Is(err, ErrClosed) {
		t.Errorf("TruncateFront: got %v, want ErrClosed", err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: got %v, want ErrClosed", err)
	}
}

func TestLog_ReplayStopsOnCallbackError(t *testing.T) {
	l, _ := mustOpen(t, t.TempDir(), Options{Sync: SyncNone})
	defer mustClose(t, l)
	mustAppend(t, l, make([]entry.Entry, 10))
	stop := errors.New("stop")
	var seen []uint64
	err := l.Replay(3, func(i uint64, _ entry.Entry) error {
		seen = append(seen, i)
		if i == 5 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "index 5") {
		t.Fatalf("got %v, want the callback's error, naming index 5", err)
	}
	if fmt.Sprint(seen) != "[3 4 5]" {
		t.Fatalf("got indexes %v, want [3 4 5]", seen)
	}
}

func TestLog_TruncateFront(t *testing.T) {
	dir := t.TempDir()
	opt := Options{Sync: SyncNone, SegmentSize: 2 << 10}
	es := randomEntries(rand.New(rand.NewPCG(3, 3)), 300)
	for i := range es {
		es[i].Payload = es[i].Payload[:min(len(es[i].Payload), 64)]
	}
	l, _ := mustOpen(t, dir, opt)
	mustAppend(t, l, es)
	before := l.Stats().Bytes

	// Below or at the first index: nothing to do.
	for _, idx := range []uint64{0, 1} {
		if err := l.TruncateFront(idx); err != nil {
			t.Fatalf("TruncateFront(%d): %v", idx, err)
		}
	}
	if err := l.TruncateFront(302); err == nil {
		t.Fatalf("TruncateFront(302) with last index 300: got nil error, want one")
	}
	if err := l.TruncateFront(137); err != nil {
		t.Fatalf("TruncateFront(137): %v", err)
	}
	if got := l.FirstIndex(); got != 137 {
		t.Fatalf("FirstIndex: got %d, want 137", got)
	}
	if after := l.Stats().Bytes; after >= before {
		t.Errorf("Stats.Bytes: got %d after truncation, want < %d", after, before)
	}
	assertReplay(t, mustReplay(t, l, 0), 137, es[136:])
	mustClose(t, l)

	l, _ = mustOpen(t, dir, opt)
	if got, want := [2]uint64{l.FirstIndex(), l.LastIndex()}, [2]uint64{137, 300}; got != want {
		t.Fatalf("after reopen (first, last): got %v, want %v", got, want)
	}
	assertReplay(t, mustReplay(t, l, 1), 137, es[136:])

	// Everything.
	if err := l.TruncateFront(301); err != nil {
		t.Fatalf("TruncateFront(301) (everything): %v", err)
	}
	if got := mustReplay(t, l, 0); len(got) != 0 {
		t.Fatalf("after truncating everything: replayed %d entries, want 0", len(got))
	}
	mustClose(t, l)

	l, _ = mustOpen(t, dir, opt)
	defer mustClose(t, l)
	if got, want := [2]uint64{l.FirstIndex(), l.LastIndex()}, [2]uint64{301, 300}; got != want {
		t.Fatalf("empty log after reopen (first, last): got %v, want %v", got, want)
	}
	if got, err := l.Append(es[0], nil); err != nil || got != 301 {
		t.Fatalf("Append to emptied log: got (%d, %v), want (301, nil)", got, err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	assertReplay(t, mustReplay(t, l, 0), 301, es[:1])
}

func TestLog_TruncateFrontSyncsPending(t *testing.T) {
	l, _ := mustOpen(t, t.TempDir(), Options{Interval: time.Hour})
	defer mustClose(t, l)
	var done int
	mustAppendAsync(t, l, 10, func(uint64, error) { done++ })
	if err := l.TruncateFront(11); err != nil {
		t.Fatalf("TruncateFront over entries not yet written: %v", err)
	}
	if done != 10 || l.FirstIndex() != 11 {
		t.Fatalf("got %d done, first index %d; want 10, 11", done, l.FirstIndex())
	}
}

func TestOpen_Errors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dir  string
		opt  Options
		want string
	}{
		{"dir under a regular file", filepath.Join(file, "sub"), Options{}, filepath.Join(file, "sub")},
		{"dir is a regular file", file, Options{}, file},
		{"unknown sync mode", t.TempDir(), Options{Sync: 9}, "sync mode 9"},
		{"negative max batch", t.TempDir(), Options{MaxBatch: -1}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _, err := Open(tt.dir, tt.opt, nil)
			if err == nil {
				l.Close()
				t.Fatalf("got nil error, want one naming %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %q, want it to name %q", err, tt.want)
			}
		})
	}
}

func TestLog_ConcurrentReplayAndAppend(t *testing.T) {
	l, _ := mustOpen(t, t.TempDir(), Options{Sync: SyncNone, SegmentSize: 4 << 10})
	defer mustClose(t, l)
	mustAppend(t, l, make([]entry.Entry, 100))
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 2000 {
			if _, err := l.Append(entry.Entry{Arrival: int64(i), Payload: bytes.Repeat([]byte{1}, 50)}, nil); err != nil {
				t.Errorf("Append: %v", err)
				return
			}
		}
	})
	for range 5 {
		var n uint64
		err := l.Replay(1, func(i uint64, _ entry.Entry) error {
			n++
			if i != n {
				return fmt.Errorf("got index %d, want %d", i, n)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Replay during appends: %v", err)
		}
		if n < 100 {
			t.Fatalf("Replay during appends: got %d entries, want >= 100", n)
		}
		_ = l.Stats()
	}
	wg.Wait()
}

func TestOpen_Permissions(t *testing.T) {
	t.Run("new", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "wal")
		l, _ := mustOpen(t, dir, Options{})
		mustAppend(t, l, []entry.Entry{{Topic: "t"}})
		mustClose(t, l)
		testenv.CheckMode(t, dir, 0o700)
		for _, s := range mustSegments(t, dir) {
			testenv.CheckMode(t, s.path, 0o600)
		}
	})
	t.Run("older binary's", func(t *testing.T) {
		dir := mustLog(t, Options{}, []entry.Entry{{Topic: "t"}})
		segs := mustSegments(t, dir)
		for _, s := range segs {
			if err := os.Chmod(s.path, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		l, _ := mustOpen(t, dir, Options{})
		mustClose(t, l)
		testenv.CheckMode(t, dir, 0o700)
		for _, s := range segs {
			testenv.CheckMode(t, s.path, 0o600)
		}
	})
}

func TestLog_OnCommittedEndsEachBatch(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			// Both callbacks come from the log's goroutine: no lock needed
			// between them, only for reading the result at the end.
			var (
				mu      sync.Mutex
				open    []uint64 // done calls since the last OnCommitted
				batches [][]uint64
			)
			l, _ := mustOpen(t, t.TempDir(), Options{Sync: mode, MaxBatch: 64, OnCommitted: func() {
				mu.Lock()
				defer mu.Unlock()
				if len(open) == 0 {
					t.Error("OnCommitted with no done call before it")
				}
				batches = append(batches, open)
				open = nil
			}})
			done := func(i uint64, err error) {
				if err != nil {
					t.Errorf("done %d: %v", i, err)
				}
				mu.Lock()
				open = append(open, i)
				mu.Unlock()
			}
			const n = 500
			for range n {
				if _, err := l.Append(entry.Entry{Payload: []byte("p")}, done); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			st := l.Stats()
			mustClose(t, l)
			mu.Lock()
			defer mu.Unlock()
			if len(open) != 0 {
				t.Errorf("%d done calls never followed by OnCommitted", len(open))
			}
			next := uint64(1)
			for _, b := range batches {
				if mode == SyncAlways && len(b) != 1 {
					t.Errorf("SyncAlways: a batch of %d, want one per entry", len(b))
				}
				for _, i := range b {
					if i != next {
						t.Fatalf("batches out of order: got index %d, want %d (%v)", i, next, batches)
					}
					next++
				}
			}
			if next != n+1 {
				t.Errorf("batches cover %d entries, want %d", next-1, n)
			}
			if mode == SyncBatch && uint64(len(batches)) > st.Fsyncs {
				t.Errorf("%d batches handed on for %d fsyncs, want at most one per group commit", len(batches), st.Fsyncs)
			}
		})
	}
}
