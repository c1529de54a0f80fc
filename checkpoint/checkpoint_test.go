package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustStore(tb testing.TB) *Dir {
	tb.Helper()
	s, err := Open(filepath.Join(tb.TempDir(), "ckpt"), 0)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	return s
}

func mustWrite(tb testing.TB, s *Dir, tag uint64, snap []byte) Checkpoint {
	tb.Helper()
	c, err := s.Write(tag, snap)
	if err != nil {
		tb.Fatalf("Write(%d): %v", tag, err)
	}
	return c
}

func files(tb testing.TB, dir string) []string {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteLoad_RoundTrip(t *testing.T) {
	tests := []struct {
		name string
		tag  uint64
		snap []byte
	}{
		{"empty snapshot", 0, nil},
		{"small", 7, []byte("EDGEPROC-STATE\nhello")},
		{"large tag", 1<<63 + 5, bytes.Repeat([]byte{0, 1, 2, 0xff}, 100_000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustStore(t)
			w := mustWrite(t, s, tt.tag, tt.snap)
			if want := int64(headerSize + len(tt.snap) + trailer); w.Size != want {
				t.Errorf("Write size: got %d, want %d", w.Size, want)
			}
			// Write frames the file piece by piece: it must be Encode's.
			if b, err := os.ReadFile(w.Path); err != nil || !bytes.Equal(b, Encode(tt.tag, tt.snap)) {
				t.Errorf("file at %s (err %v) differs from Encode's bytes", w.Path, err)
			}
			c, ok, skipped, err := s.Load()
			if err != nil || !ok || len(skipped) != 0 {
				t.Fatalf("Load: got ok %v, skipped %v, err %v; want ok, nothing skipped", ok, skipped, err)
			}
			if c.Tag != tt.tag || !bytes.Equal(c.Snapshot, tt.snap) || c.Path != w.Path || c.Size != w.Size {
				t.Errorf("Load: got tag %d, %d bytes at %s (size %d); want tag %d, %d bytes at %s (size %d)",
					c.Tag, len(c.Snapshot), c.Path, c.Size, tt.tag, len(tt.snap), w.Path, w.Size)
			}
		})
	}
}

// TestWrite_PartsAreOneSnapshot: a snapshot handed over in parts is
// stored as their concatenation.
func TestWrite_PartsAreOneSnapshot(t *testing.T) {
	s := mustStore(t)
	whole := []byte("EDGEPROC-STATE\nheader|shard 0|shard 1")
	w, err := s.Write(9, whole[:20], nil, whole[20:28], whole[28:])
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(w.Path); err != nil || !bytes.Equal(b, Encode(9, whole)) || w.Size != int64(len(b)) {
		t.Fatalf("file at %s (err %v, size %d) is not Encode's bytes of the concatenation", w.Path, err, w.Size)
	}
	if c, ok, _, err := s.Load(); err != nil || !ok || c.Tag != 9 || !bytes.Equal(c.Snapshot, whole) {
		t.Fatalf("Load: got tag %d, %q, ok %v, err %v; want tag 9 and the whole snapshot", c.Tag, c.Snapshot, ok, err)
	}
}

func TestLoad_EmptyDirHasNone(t *testing.T) {
	s := mustStore(t)
	_, ok, skipped, err := s.Load()
	if ok || err != nil || skipped != nil {
		t.Errorf("Load of an empty dir: got ok %v, skipped %v, err %v; want none and no error", ok, skipped, err)
	}
}

func TestWrite_KeepsNewestTwo(t *testing.T) {
	s := mustStore(t)
	for tag := uint64(1); tag <= 5; tag++ {
		mustWrite(t, s, tag*10, []byte{byte(tag)})
	}
	got := strings.Join(files(t, s.Path()), " ")
	want := "checkpoint-00000000000000000040.ckpt checkpoint-00000000000000000050.ckpt"
	if got != want {
		t.Errorf("files after 5 writes: got %q, want %q", got, want)
	}
	c, _, _, err := s.Load()
	if err != nil || c.Tag != 50 {
		t.Errorf("Load: got tag %d, err %v; want 50", c.Tag, err)
	}
	if got := fmt.Sprint(s.Kept()); got != "[50 40]" {
		t.Errorf("Kept after 5 writes: got %s, want [50 40]", got)
	}
	// The same tag written again (the service's final snapshot can repeat
	// a periodic one still in flight) keeps the previous one too.
	mustWrite(t, s, 50, []byte{5})
	if got := fmt.Sprint(s.Kept()); got != "[50 40]" {
		t.Errorf("Kept after writing 50 again: got %s, want [50 40]", got)
	}
}

// corrupt applies f to the newest checkpoint file's bytes.
func corrupt(tb testing.TB, path string, f func([]byte) []byte) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o644); err != nil {
		tb.Fatal(err)
	}
}

func TestDecode_RefusesDamageAndForeignVersions(t *testing.T) {
	good := Encode(42, []byte("snapshot bytes"))
	tests := []struct {
		name    string
		mutate  func([]byte) []byte
		wantErr error
		wantMsg string
	}{
		{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }, ErrCorrupt, "bad magic"},
		{"empty file", func([]byte) []byte { return nil }, ErrCorrupt, "bad magic"},
		{"header only partly written", func(b []byte) []byte { return b[:len(magic)+3] }, ErrCorrupt, "truncated"},
		{"truncated snapshot", func(b []byte) []byte { return b[:len(b)-6] }, ErrCorrupt, "truncated"},
		{"trailing garbage", func(b []byte) []byte { return append(b, 0) }, ErrCorrupt, "truncated or padded"},
		{"flipped snapshot bit", func(b []byte) []byte { b[headerSize+2] ^= 0x10; return b }, ErrCorrupt, "CRC-32C mismatch"},
		{"flipped tag bit", func(b []byte) []byte { b[len(magic)+4+7] ^= 1; return b }, ErrCorrupt, "CRC-32C mismatch"},
		{"newer version", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[len(magic):], Version+1)
			return b
		}, ErrVersion, "file format version 2, this edgeproc reads version 1"},
		{"version zero", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[len(magic):], 0)
			return b
		}, ErrVersion, "file format version 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.mutate(bytes.Clone(good))
			_, _, err := Decode(b)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Decode: got %v, want %v saying %q", err, tt.wantErr, tt.wantMsg)
			}
		})
	}
}

func TestLoad_FallsBackWhenNewestIsCorrupt(t *testing.T) {
	tests := []struct {
		name   string
		mutate func([]byte) []byte
	}{
		{"bad crc", func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"zeroed", func(b []byte) []byte { return make([]byte, len(b)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustStore(t)
			mustWrite(t, s, 10, []byte("older"))
			newest := mustWrite(t, s, 20, []byte("newer"))
			corrupt(t, newest.Path, tt.mutate)
			c, ok, skipped, err := s.Load()
			if err != nil || !ok {
				t.Fatalf("Load: got ok %v, err %v; want the previous checkpoint", ok, err)
			}
			if c.Tag != 10 || string(c.Snapshot) != "older" {
				t.Errorf("Load: got tag %d %q, want tag 10 \"older\"", c.Tag, c.Snapshot)
			}
			if len(skipped) != 1 || !errors.Is(skipped[0], ErrCorrupt) || !strings.Contains(skipped[0].Error(), newest.Path) {
				t.Errorf("skipped: got %v, want one ErrCorrupt naming %s", skipped, newest.Path)
			}
		})
	}
}

func TestLoad_AllCorruptIsAnError(t *testing.T) {
	s := mustStore(t)
	for _, tag := range []uint64{1, 2} {
		c := mustWrite(t, s, tag, []byte("x"))
		corrupt(t, c.Path, func(b []byte) []byte { return b[:5] })
	}
	_, ok, skipped, err := s.Load()
	if ok || !errors.Is(err, ErrCorrupt) || len(skipped) != 2 {
		t.Errorf("Load: got ok %v, %d skipped, err %v; want an ErrCorrupt error and 2 skipped", ok, len(skipped), err)
	}
}

// Starting over from an empty state when the checkpoint is of another
// version would be silent data loss: Load must refuse, not fall back.
func TestLoad_RefusesForeignVersionWithoutFallback(t *testing.T) {
	s := mustStore(t)
	mustWrite(t, s, 10, []byte("older"))
	newest := mustWrite(t, s, 20, []byte("newer"))
	corrupt(t, newest.Path, func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[len(magic):], 9)
		return b
	})
	_, ok, _, err := s.Load()
	if ok || !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), newest.Path) || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("Load: got ok %v, err %v; want ErrVersion naming %s and version 9", ok, err, newest.Path)
	}
}

func TestWrite_CrashBeforeRenameLeavesNoPartialCheckpoint(t *testing.T) {
	s := mustStore(t)
	mustWrite(t, s, 10, []byte("older"))
	crash := errors.New("simulated crash")
	s.beforeRename = func(tmp string) error {
		// A crash may also leave the temporary file short.
		if err := os.Truncate(tmp, 3); err != nil {
			return err
		}
		return crash
	}
	if _, err := s.Write(20, []byte("newer")); !errors.Is(err, crash) {
		t.Fatalf("Write: got %v, want the simulated crash", err)
	}
	c, ok, skipped, err := s.Load()
	if err != nil || !ok || c.Tag != 10 || len(skipped) != 0 {
		t.Errorf("Load after the crash: got tag %d, ok %v, skipped %v, err %v; want tag 10, nothing skipped", c.Tag, ok, skipped, err)
	}
	// A restart removes the leftover temporary file.
	s2, err := Open(s.Path(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(files(t, s2.Path()), " "); got != "checkpoint-00000000000000000010.ckpt" {
		t.Errorf("files after reopening: got %q, want only the tag 10 checkpoint", got)
	}
}

func TestOpen_UnusableDirNamesThePath(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "afile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir string
	}{
		{"parent is a file", filepath.Join(file, "ckpt")},
		{"dir is a file", file},
	}
	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(base, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, struct{ name, dir string }{"read-only", ro})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(tt.dir, 0)
			if err == nil || !strings.Contains(err.Error(), tt.dir) {
				t.Errorf("Open(%s): got %v, want an error naming the dir", tt.dir, err)
			}
		})
	}
}

func TestOpen_CreatesMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if _, err := Open(dir, 0); err != nil {
		t.Fatalf("Open: %v", err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("got %v, want %s created", err, dir)
	}
}

// The sequence: the newest checkpoint is corrupt at start, Load
// falls back to the older good one, and the next Write must keep that good
// one as the fallback, not the corrupt one.
func TestWrite_NeverKeepsCorruptOverGood(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	s, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, 10, []byte("good"))
	bad := mustWrite(t, s, 20, []byte("bad"))
	corrupt(t, bad.Path, func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b })

	s, err = Open(dir, 0) // a restart: nothing is known good yet
	if err != nil {
		t.Fatal(err)
	}
	if c, ok, _, err := s.Load(); err != nil || !ok || c.Tag != 10 {
		t.Fatalf("Load: got tag %d ok %v err %v, want the good tag 10", c.Tag, ok, err)
	}
	mustWrite(t, s, 30, []byte("new"))
	got := strings.Join(files(t, dir), " ")
	want := "checkpoint-00000000000000000010.ckpt checkpoint-00000000000000000020.ckpt.corrupt checkpoint-00000000000000000030.ckpt"
	if got != want {
		t.Fatalf("files after the write: got %q, want %q", got, want)
	}
	// The new checkpoint lost too: the fallback is the good one.
	if err := os.Remove(filepath.Join(dir, "checkpoint-00000000000000000030.ckpt")); err != nil {
		t.Fatal(err)
	}
	if c, ok, _, err := s.Load(); err != nil || !ok || c.Tag != 10 || string(c.Snapshot) != "good" {
		t.Fatalf("Load without the newest: got tag %d ok %v err %v, want tag 10", c.Tag, ok, err)
	}

	// Without a Load first (not known good), prune checks the files itself;
	// a second corrupt file replaces the first .corrupt one.
	bad = mustWrite(t, s, 40, []byte("bad too"))
	corrupt(t, bad.Path, func(b []byte) []byte { return b[:len(b)-3] })
	if s, err = Open(dir, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, 50, []byte("newest"))
	got = strings.Join(files(t, dir), " ")
	want = "checkpoint-00000000000000000010.ckpt checkpoint-00000000000000000040.ckpt.corrupt checkpoint-00000000000000000050.ckpt"
	if got != want {
		t.Fatalf("files after a second corrupt one: got %q, want %q", got, want)
	}
}

func TestOpen_PrivateModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	s, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := mustWrite(t, s, 1, []byte("x"))
	for path, want := range map[string]os.FileMode{dir: 0o700, c.Path: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %#o", path, fi.Mode().Perm(), err, want)
		}
	}
	// An older edgeproc's 0755/0644 is narrowed at Open.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(c.Path, 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, 0); err != nil || len(s.Unrestricted()) != 0 {
		t.Fatalf("reopen: %v %v", err, s.Unrestricted())
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, c.Path: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("after reopen %s: mode %v (%v), want %#o", path, fi.Mode().Perm(), err, want)
		}
	}
}

// BenchmarkWrite is one checkpoint of a city's size (25 000 couriers with
// 5 minutes of fixes each make about 50 MB), fsync included.
func BenchmarkWrite(b *testing.B) {
	s := mustStore(b)
	snap := bytes.Repeat([]byte{7, 1, 2, 0xff}, 50<<20/4)
	b.SetBytes(int64(len(snap)))
	b.ReportAllocs()
	for i := range b.N {
		mustWrite(b, s, uint64(i+1), snap)
	}
}

// TestDir_DeltaChains: Load returns the newest good checkpoint with the
// chain of incremental ones that build on it, stopping before a damaged
// one (reported) so that the log is replayed from the last good one;
// pruning keeps every delta a kept checkpoint's chain needs and removes
// the others.
func TestDir_DeltaChains(t *testing.T) {
	s := mustStore(t)
	delta := func(base, tag uint64) {
		t.Helper()
		if _, err := s.WriteDelta(base, tag, []byte(fmt.Sprintf("d%d", tag))); err != nil {
			t.Fatal(err)
		}
	}
	load := func() (Checkpoint, []error) {
		t.Helper()
		c, ok, skipped, err := s.Load()
		if err != nil || !ok {
			t.Fatalf("Load: %v, ok %v", err, ok)
		}
		return c, skipped
	}
	chain := func(c Checkpoint) string {
		out := fmt.Sprint(c.Tag, ":", string(c.Snapshot))
		for _, d := range c.Deltas {
			out += fmt.Sprint(" ", d.Tag, ":", string(d.Snapshot))
		}
		return out
	}
	mustWrite(t, s, 10, []byte("w10"))
	delta(10, 20)
	delta(20, 30)
	delta(5, 7) // on nothing kept: not on the chain
	if c, skipped := load(); chain(c) != "10:w10 20:d20 30:d30" || c.Last() != 30 || len(skipped) != 0 {
		t.Fatalf("chain %q last %d skipped %v", chain(c), c.Last(), skipped)
	}
	// A damaged delta ends the chain before it.
	p := s.deltaPath(30, 20)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-6] ^= 0xff
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if c, skipped := load(); chain(c) != "10:w10 20:d20" || len(skipped) != 1 || !errors.Is(skipped[0], ErrCorrupt) {
		t.Fatalf("with delta 30 damaged: chain %q, skipped %v", chain(c), skipped)
	}
	// A new whole checkpoint starts a new chain; the previous one stays
	// for a fallback, and goes with its whole one.
	mustWrite(t, s, 40, []byte("w40"))
	delta(40, 50)
	if c, _ := load(); chain(c) != "40:w40 50:d50" {
		t.Fatalf("chain %q", chain(c))
	}
	if got, want := strings.Join(files(t, s.Path()), " "), "checkpoint-00000000000000000010.ckpt checkpoint-00000000000000000040.ckpt delta-00000000000000000020-00000000000000000010.ckpt delta-00000000000000000030-00000000000000000020.ckpt delta-00000000000000000050-00000000000000000040.ckpt"; got != want {
		t.Fatalf("files\n%s\nwant\n%s", got, want)
	}
	mustWrite(t, s, 60, []byte("w60"))
	if got, want := strings.Join(files(t, s.Path()), " "), "checkpoint-00000000000000000040.ckpt checkpoint-00000000000000000060.ckpt delta-00000000000000000050-00000000000000000040.ckpt"; got != want {
		t.Fatalf("after pruning:\n%s\nwant\n%s", got, want)
	}
	// The newest whole one damaged: the previous one and its chain.
	p = s.path(60)
	b, _ = os.ReadFile(p)
	b[len(b)-6] ^= 0xff
	_ = os.WriteFile(p, b, 0o600)
	if c, skipped := load(); chain(c) != "40:w40 50:d50" || len(skipped) != 1 {
		t.Fatalf("with 60 damaged: chain %q, skipped %v", chain(c), skipped)
	}

}

// Newest reads what Load reads, and changes nothing: no directory made, no
// stale temporary file removed, no mode narrowed.
func TestNewest_ReadsWithoutChanging(t *testing.T) {
	root := t.TempDir()
	missing := filepath.Join(root, "none")
	if _, ok, _, err := Newest(missing); ok || err != nil {
		t.Fatalf("missing dir: ok %v, err %v; want none", ok, err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("missing dir: created (%v)", err)
	}

	dir := filepath.Join(root, "ckpt")
	d, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []uint64{3, 5} {
		if _, err := d.Write(tag, []byte(fmt.Sprintf("snapshot %d", tag))); err != nil {
			t.Fatal(err)
		}
	}
	stale := filepath.Join(dir, prefix+"00000000000000000009"+suffix+tmpSuffix)
	if err := os.WriteFile(stale, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	c, ok, skipped, err := Newest(dir)
	if err != nil || !ok || len(skipped) != 0 || c.Tag != 5 || string(c.Snapshot) != "snapshot 5" {
		t.Fatalf("got tag %d %q, ok %v, skipped %v, err %v; want tag 5", c.Tag, c.Snapshot, ok, skipped, err)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Errorf("the stale temporary file: %v, want it left", err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o750 {
		t.Errorf("dir mode %v (%v), want 0750 left", st.Mode().Perm(), err)
	}
}

// TestDir_MissingCheckpointsAreReported: a checkpoint an incremental one
// builds on, deleted or lost, is reported (ErrMissing) with what was
// restored instead, not passed over in silence.
func TestDir_MissingCheckpointsAreReported(t *testing.T) {
	s := mustStore(t)
	delta := func(base, tag uint64) {
		t.Helper()
		if _, err := s.WriteDelta(base, tag, []byte(fmt.Sprintf("d%d", tag))); err != nil {
			t.Fatal(err)
		}
	}
	load := func() (string, []error) {
		t.Helper()
		c, ok, skipped, err := s.Load()
		if err != nil || !ok {
			t.Fatalf("Load: %v, ok %v", err, ok)
		}
		out := fmt.Sprint(c.Tag, ":", string(c.Snapshot))
		for _, d := range c.Deltas {
			out += fmt.Sprint(" ", d.Tag, ":", string(d.Snapshot))
		}
		return out, skipped
	}
	mustWrite(t, s, 40, []byte("w40"))
	delta(40, 50)
	// A whole checkpoint missing: the deltas on it say so.
	mustWrite(t, s, 80, []byte("w80"))
	delta(80, 90)
	delta(90, 95)
	if err := os.Remove(s.path(80)); err != nil {
		t.Fatal(err)
	}
	chain, skipped := load()
	if chain != "40:w40 50:d50" || len(skipped) != 1 || !errors.Is(skipped[0], ErrMissing) || !strings.Contains(skipped[0].Error(), "builds on checkpoint 80") {
		t.Fatalf("with 80 missing: chain %q, skipped %v", chain, skipped)
	}
	// A delta missing in the middle of a chain: restored up to the one
	// before it.
	mustWrite(t, s, 100, []byte("w100"))
	delta(100, 110)
	delta(110, 120)
	delta(120, 130)
	if err := os.Remove(s.deltaPath(120, 110)); err != nil {
		t.Fatal(err)
	}
	chain, skipped = load()
	if chain != "100:w100 110:d110" || len(skipped) != 1 || !errors.Is(skipped[0], ErrMissing) || !strings.Contains(skipped[0].Error(), "restored up to 110") {
		t.Fatalf("with delta 120 missing: chain %q, skipped %v", chain, skipped)
	}
}
