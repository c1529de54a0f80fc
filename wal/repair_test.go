package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/km0/edgeproc/entry"
)

// record is one tidwall record of a segment file.
type record struct {
	index    uint64
	off, end int64 // byte range in the file, length prefix included
	frame    int64 // offset of the frame, after the length prefix
}

// mustRecords parses a segment file the way tidwall frames it.
func mustRecords(tb testing.TB, seg segmentFile) []record {
	tb.Helper()
	data, err := os.ReadFile(seg.path)
	if err != nil {
		tb.Fatal(err)
	}
	var recs []record
	for off := 0; off < len(data); {
		n, frame, err := nextRecord(data[off:])
		if err != nil {
			tb.Fatalf("segment %s offset %d: %v", seg.path, off, err)
		}
		recs = append(recs, record{seg.index + uint64(len(recs)), int64(off), int64(off + n), int64(off + n - len(frame))})
		off += n
	}
	return recs
}

func mustReadFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func mustWriteFile(tb testing.TB, path string, b []byte) {
	tb.Helper()
	if err := os.WriteFile(path, b, 0o640); err != nil {
		tb.Fatal(err)
	}
}

func mustSegments(tb testing.TB, dir string) []segmentFile {
	tb.Helper()
	segs, _, err := listSegments(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return segs
}

func copyDir(tb testing.TB, src string) string {
	tb.Helper()
	dst := tb.TempDir()
	des, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, de.Name()), b, 0o640); err != nil {
			tb.Fatal(err)
		}
	}
	return dst
}

// mustLog writes es to a new log in a new dir, closes it and returns the dir.
func mustLog(tb testing.TB, opt Options, es []entry.Entry) string {
	tb.Helper()
	dir := tb.TempDir()
	l, _ := mustOpen(tb, dir, opt)
	mustAppend(tb, l, es)
	mustClose(tb, l)
	return dir
}

func TestOpen_RepairsTornTail(t *testing.T) {
	opt := Options{Sync: SyncNone, SegmentSize: 4 << 10}
	rng := rand.New(rand.NewPCG(4, 4))
	es := randomEntries(rng, 120)
	for i := range es {
		es[i].Payload = es[i].Payload[:min(len(es[i].Payload), 300)]
	}
	src := mustLog(t, opt, es)
	segs := mustSegments(t, src)
	if len(segs) < 2 {
		t.Fatalf("got %d segments, want at least 2", len(segs))
	}
	tail := segs[len(segs)-1]
	recs := mustRecords(t, tail)
	if len(recs) < 3 {
		t.Fatalf("tail has %d records, want at least 3", len(recs))
	}
	size := recs[len(recs)-1].end

	// Every boundary and a spread of random offsets inside records.
	cuts := []int64{0, 1, size - 1}
	for _, r := range recs {
		cuts = append(cuts, r.off, r.off+1, r.end-1)
	}
	for range 150 {
		cuts = append(cuts, rng.Int64N(size))
	}
	for _, cut := range cuts {
		// kept: records wholly before the cut.
		kept := 0
		for kept < len(recs) && recs[kept].end <= cut {
			kept++
		}
		boundary := int64(0)
		if kept > 0 {
			boundary = recs[kept-1].end
		}
		wantLast := tail.index + uint64(kept) - 1

		dir := copyDir(t, src)
		segPath := filepath.Join(dir, filepath.Base(tail.path))
		if err := os.Truncate(segPath, cut); err != nil {
			t.Fatal(err)
		}
		var logBuf bytes.Buffer
		l, rep, err := Open(dir, opt, slog.New(slog.NewTextHandler(&logBuf, nil)))
		if err != nil {
			t.Fatalf("cut at %d: Open: %v", cut, err)
		}
		if torn := cut != boundary; rep.Repaired != torn {
			t.Fatalf("cut at %d (boundary %d): got Repaired %v, want %v", cut, boundary, rep.Repaired, torn)
		}
		if rep.Repaired {
			if rep.Segment != segPath || rep.Offset != boundary || rep.BytesDropped != cut-boundary ||
				rep.EntriesDropped != 1 || rep.Index != wantLast+1 || !errors.Is(rep.Cause, ErrMalformed) {
				t.Fatalf("cut at %d: got report %+v, want segment %s offset %d, %d bytes and 1 entry dropped at index %d, cause ErrMalformed",
					cut, rep, segPath, boundary, cut-boundary, wantLast+1)
			}
			if logged := logBuf.String(); !strings.Contains(logged, segPath) || !strings.Contains(logged, "level=WARN") {
				t.Errorf("cut at %d: log %q, want a warning naming the segment", cut, logged)
			}
			if got := l.Stats().Repairs; got != 1 {
				t.Errorf("cut at %d: Stats.Repairs got %d, want 1", cut, got)
			}
		}
		if got := l.LastIndex(); got != wantLast {
			t.Fatalf("cut at %d: LastIndex got %d, want %d", cut, got, wantLast)
		}
		assertReplay(t, mustReplay(t, l, 0), 1, es[:wantLast])

		// The log goes on from there, and survives another reopen.
		next := entry.Entry{Arrival: 99, Topic: "after/repair", Payload: []byte("p")}
		if got, err := l.Append(next, nil); err != nil || got != wantLast+1 {
			t.Fatalf("cut at %d: Append after repair: got (%d, %v), want (%d, nil)", cut, got, err, wantLast+1)
		}
		mustClose(t, l)
		l, rep = mustOpen(t, dir, opt)
		if rep.Repaired {
			t.Fatalf("cut at %d: second reopen repaired again: %+v", cut, rep)
		}
		want := append(append([]entry.Entry(nil), es[:wantLast]...), next)
		assertReplay(t, mustReplay(t, l, 0), 1, want)
		mustClose(t, l)
		// tidwall's Open leaves the tail segment open when it finds the
		// tail torn; the repair must not go through that.
		if open := openFilesUnder(t, dir); len(open) > 0 {
			t.Fatalf("cut at %d: files still open after Close: %v", cut, open)
		}
	}
}

// openFilesUnder lists the files under dir this process has open.
func openFilesUnder(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var open []string
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(target, dir) {
			open = append(open, target)
		}
	}
	return open
}

func TestOpen_RepairsCorruptTail(t *testing.T) {
	opt := Options{Sync: SyncNone, SegmentSize: 4 << 10}
	es := randomEntries(rand.New(rand.NewPCG(5, 5)), 100)
	for i := range es {
		es[i].Payload = append(es[i].Payload[:min(len(es[i].Payload), 200)], 'x') // never empty
	}
	src := mustLog(t, opt, es)
	segs := mustSegments(t, src)
	tail := segs[len(segs)-1]
	recs := mustRecords(t, tail)
	victim := recs[len(recs)/2]
	frame := victim.frame

	after := len(recs) - len(recs)/2 // the victim and every record behind it
	if after < 5 {
		t.Fatalf("%d records from the victim on, want several", after)
	}
	tests := []struct {
		name    string
		damage  func(b []byte) []byte
		cause   error // nil: any
		dropped int
	}{
		{"length prefix", func(b []byte) []byte {
			// All continuation bits: the prefix runs into the frame and
			// gives a length that hides where the next records start.
			for i := victim.off; i < victim.frame; i++ {
				b[i] = 0xff
			}
			return b
		}, nil, after},
		{"version byte", func(b []byte) []byte { b[frame] = 7; return b }, ErrVersion, after},
		{"crc byte", func(b []byte) []byte { b[frame+2] ^= 0x10; return b }, ErrChecksum, after},
		{"last payload byte", func(b []byte) []byte { b[victim.end-1] ^= 0x01; return b }, ErrChecksum, after},
		{"zeros after a power cut", func(b []byte) []byte {
			return append(b[:victim.off], make([]byte, 64)...)
		}, ErrMalformed, 1}, // tidwall reads 0x00 as an empty record
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, src)
			segPath := filepath.Join(dir, filepath.Base(tail.path))
			mustWriteFile(t, segPath, tt.damage(mustReadFile(t, segPath)))
			l, rep, err := Open(dir, opt, nil)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer mustClose(t, l)
			if !rep.Repaired || rep.Segment != segPath || rep.Offset != victim.off || rep.Index != victim.index ||
				(tt.cause != nil && !errors.Is(rep.Cause, tt.cause)) {
				t.Fatalf("got report %+v, want segment %s cut at %d, index %d, cause %v",
					rep, segPath, victim.off, victim.index, tt.cause)
			}
			if rep.EntriesDropped != tt.dropped {
				t.Errorf("EntriesDropped: got %d, want %d", rep.EntriesDropped, tt.dropped)
			}
			if fi, err := os.Stat(segPath); err != nil || fi.Size() != victim.off {
				t.Errorf("segment size after repair: got %v (%v), want %d", fi.Size(), err, victim.off)
			}
			assertReplay(t, mustReplay(t, l, 0), 1, es[:victim.index-1])
		})
	}
}

func TestOpen_RefusesCorruptOlderSegment(t *testing.T) {
	opt := Options{Sync: SyncNone, SegmentSize: 2 << 10}
	src := mustLog(t, opt, randomEntries(rand.New(rand.NewPCG(6, 6)), 100))
	segs := mustSegments(t, src)
	if len(segs) < 3 {
		t.Fatalf("got %d segments, want at least 3", len(segs))
	}
	old := segs[1]
	recs := mustRecords(t, old)

	t.Run("flipped byte", func(t *testing.T) {
		dir := copyDir(t, src)
		path := filepath.Join(dir, filepath.Base(old.path))
		b := mustReadFile(t, path)
		b[recs[2].end-1] ^= 0x40
		mustWriteFile(t, path, b)

		_, _, err := Open(dir, opt, nil)
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrChecksum) {
			t.Fatalf("got %v, want a *CorruptError with ErrChecksum", err)
		}
		if ce.Segment != path || ce.Offset != recs[2].off || ce.Index != recs[2].index {
			t.Fatalf("got segment %s offset %d index %d, want %s %d %d",
				ce.Segment, ce.Offset, ce.Index, path, recs[2].off, recs[2].index)
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("got message %q, want it to name %s", err, path)
		}
		// Nothing was cut: the damage is left for a human.
		if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
			t.Errorf("Open modified the damaged older segment")
		}
	})
	t.Run("torn older segment", func(t *testing.T) {
		dir := copyDir(t, src)
		path := filepath.Join(dir, filepath.Base(old.path))
		if err := os.Truncate(path, recs[1].end-2); err != nil {
			t.Fatal(err)
		}
		_, _, err := Open(dir, opt, nil)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Fatalf("got %v, want ErrCorrupt naming %s", err, path)
		}
	})
	t.Run("missing segment", func(t *testing.T) {
		dir := copyDir(t, src)
		if err := os.Remove(filepath.Join(dir, filepath.Base(old.path))); err != nil {
			t.Fatal(err)
		}
		_, _, err := Open(dir, opt, nil)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(segs[2].path)) {
			t.Fatalf("got %v, want ErrCorrupt naming %s", err, segs[2].path)
		}
	})
}

// A segment damaged after Open (not re-checked until read) is refused by
// Replay with the index, never misread.
func TestLog_ReplayDetectsLaterDamage(t *testing.T) {
	opt := Options{Sync: SyncNone, SegmentSize: 2 << 10}
	dir := mustLog(t, opt, randomEntries(rand.New(rand.NewPCG(7, 7)), 100))
	l, _ := mustOpen(t, dir, opt)
	defer mustClose(t, l)
	seg := mustSegments(t, dir)[0]
	recs := mustRecords(t, seg)
	b := mustReadFile(t, seg.path)
	b[recs[3].end-1] ^= 1
	mustWriteFile(t, seg.path, b)

	var ce *CorruptError
	err := l.Replay(0, func(uint64, entry.Entry) error { return nil })
	if !errors.As(err, &ce) || ce.Index != recs[3].index || !errors.Is(err, ErrChecksum) {
		t.Fatalf("got %v, want a checksum *CorruptError at index %d", err, recs[3].index)
	}
}

// countDropped reads damaged bytes: it must never panic, count at least one
// entry for any damage, never more than there are bytes, and find every
// good record placed after a damaged stretch.
func FuzzCountDropped(f *testing.F) {
	rec := func(e entry.Entry) []byte {
		frame := appendFrame(nil, e)
		return append(binary.AppendUvarint(nil, uint64(len(frame))), frame...)
	}
	f.Add([]byte{0xff, 0xff, 0x7f}, uint8(3))
	f.Add(make([]byte, 40), uint8(0))
	f.Add(rec(entry.Entry{Topic: "t", Payload: []byte("p")})[3:], uint8(8))
	f.Fuzz(func(t *testing.T, junk []byte, good uint8) {
		if len(junk) == 0 || goodRecordAt(junk) {
			return // not damage
		}
		data := append([]byte(nil), junk...)
		for i := range int(good % 16) {
			data = append(data, rec(entry.Entry{Arrival: int64(i), Topic: "couriers/x", Payload: []byte{byte(i)}})...)
		}
		n := countDropped(data)
		if n < 1 || n > len(data) {
			t.Fatalf("countDropped = %d for %d bytes", n, len(data))
		}
		// The junk may swallow the first good records (a length prefix
		// that runs into them) but never hide the ones after it.
		if want := int(good % 16); n < 1+want-countGoodIn(junk, data) {
			t.Fatalf("countDropped = %d, want at least the %d good records after the junk", n, want)
		}
	})
}

// countGoodIn bounds how many of the good records after junk a damaged
// length prefix in junk can swallow: those starting within the longest
// record the junk's bytes could announce.
func countGoodIn(junk, data []byte) int {
	longest := 0
	for off := range junk {
		if size, n := binary.Uvarint(junk[off:]); n > 0 && size < uint64(len(data)) {
			longest = max(longest, off+n+int(size))
		}
	}
	swallowed := 0
	for off := len(junk); off < len(data) && off < longest; {
		n, _, err := nextRecord(data[off:])
		if err != nil {
			break
		}
		swallowed++
		off += n
	}
	return swallowed
}
