// Package checkpoint makes a market's engine snapshots recovery points:
// the protocol both sources share (Checkpointer, over a Store), and the
// local store's files (Dir): on disk, atomically and checked, keeping the
// previous good one as a fallback.
//
// A checkpoint is one file, checkpoint-<tag>.ckpt, where tag is the
// write-ahead-log index the snapshot reflects (20 decimal digits, so names
// sort by tag). Its layout, all integers big-endian:
//
//	magic   "EDGEPROC-CKPT\n" (14 bytes)
//	version uint32   file format version, see Version
//	tag     uint64   WAL index the snapshot reflects
//	length  uint64   snapshot length in bytes
//	snapshot         engine.Checkpoint's bytes (they carry their own
//	                 format version, checked by engine.Restore)
//	crc     uint32   CRC-32C (Castagnoli) of everything before it
//
// Write is atomic: the bytes go to a temporary file in the directory, which
// is fsynced, renamed to its final name, and the directory fsynced, so a
// crash at any point leaves either the old set of checkpoints or the new
// one, never a partial file under a checkpoint name. After a successful
// Write the directory keeps the newest Keep checkpoints and deletes older ones.
//
// An incremental checkpoint (WriteDelta) is a file of the same layout,
// delta-<tag>-<base>.ckpt, holding what changed since the checkpoint of
// base (whole or incremental). Load returns the newest whole checkpoint
// that checks out with the chain of deltas that build on it, up to the
// first that is missing or damaged: the caller restores the last good
// one and replays the log after it. Pruning removes the deltas at or
// before the oldest whole checkpoint kept, which no chain Load can reach
// needs.
//
// Load returns the newest checkpoint that checks out. A newest file that is
// truncated or fails its CRC (a disk fault: the write path cannot produce
// one) is skipped with a report and the previous one is used; the caller
// must then still have the write-ahead log from that older tag on (the
// service truncates the log only up to the previous checkpoint, for this
// reason). A file of another format version is never skipped silently nor
// misread: Load fails with ErrVersion.
//
// Pruning keeps the newest Keep checkpoints that check out, never a corrupt
// one in place of a good one: each file not known good (written or loaded by
// this Dir: re-reading those would only see the page cache) is read and
// checked before it counts, and one that
// fails is moved aside to checkpoint-<tag>.ckpt.corrupt for the operator to
// inspect (only the newest such file is kept, so a failing disk cannot fill
// the directory with them). The checkpoint directory is 0700 and its files
// 0600 (they hold courier ids and positions); Open narrows an existing
// directory made by an older edgeproc.
package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/km0/edgeproc/internal/private"
)

// Version is the checkpoint file format version this build writes and
// reads.
const Version = 1

// DefaultKeep is the number of checkpoints kept by default: the newest and
// the previous good one.
const DefaultKeep = 2

const (
	magic      = "EDGEPROC-CKPT\n"
	headerSize = len(magic) + 4 + 8 + 8
	trailer    = 4
	prefix     = "checkpoint-"
	// deltaPrefix names incremental checkpoints.
	deltaPrefix = "delta-"
	suffix      = ".ckpt"
	tmpSuffix   = ".tmp"
	// corruptSuffix is appended to a checkpoint that failed its check.
	corruptSuffix = ".corrupt"
	// maxSnapshot bounds what Read allocates for a length field: a flipped
	// bit must not make it ask for exabytes.
	maxSnapshot = 1 << 40
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	// ErrVersion is returned for a checkpoint file written in a format
	// version this build does not read (an older or newer edgeproc).
	ErrVersion = errors.New("unsupported checkpoint format version")
	// ErrCorrupt is returned for a checkpoint file that is not one, is
	// truncated, or fails its CRC.
	ErrCorrupt = errors.New("corrupt checkpoint")
	// ErrMissing is reported (Load's skipped) for a checkpoint an
	// incremental one builds on that is not in the directory: the state
	// is restored from before it, and the log replayed from there.
	ErrMissing = errors.New("checkpoint missing")
)

// Checkpoint is one checkpoint as read or written.
type Checkpoint struct {
	// Tag is the write-ahead-log index the snapshot reflects.
	Tag uint64
	// Snapshot is the engine's snapshot.
	Snapshot []byte
	// Path is the file's path.
	Path string
	// Size is the file's size in bytes.
	Size int64
	// Deltas are the incremental checkpoints that build on this one, in
	// order, each on the one before (Load's only).
	Deltas []Checkpoint
}

// Last is the tag the checkpoint and its deltas reflect.
func (c Checkpoint) Last() uint64 {
	if n := len(c.Deltas); n > 0 {
		return c.Deltas[n-1].Tag
	}
	return c.Tag
}

// Dir is a directory of checkpoints. Its methods are not safe for
// concurrent use; the service has one checkpointer goroutine per market.
type Dir struct {
	dir  string
	keep int
	// good holds the tags of checkpoints known to check out: written or
	// loaded by this Dir, or checked by prune.
	good map[uint64]bool
	// kept lists the tags prune kept, newest first.
	kept []uint64
	// unrestricted is what Open could not make private.
	unrestricted []error
	// beforeRename, when set (tests only), runs after the temporary file is
	// complete and fsynced, before the rename; an error aborts Write there,
	// as a crash would.
	beforeRename func(tmp string) error
}

// Open opens the checkpoint directory dir, creating it if missing, and
// checks that it is writable, so that a misconfigured state directory fails
// at start with its path rather than at the first checkpoint. Stale
// temporary files of an interrupted Write are removed. keep is how many
// checkpoints Write leaves; values below 2 mean DefaultKeep. The directory
// is made private (0700, its files 0600); see Unrestricted.
func Open(dir string, keep int) (*Dir, error) {
	if keep < 2 {
		keep = DefaultKeep
	}
	if err := os.MkdirAll(dir, private.DirMode); err != nil {
		return nil, fmt.Errorf("create checkpoint dir %s: %w", dir, err)
	}
	unrestricted := private.Restrict(dir)
	probe, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return nil, fmt.Errorf("checkpoint dir %s is not writable: %w", dir, err)
	}
	name := probe.Name()
	probe.Close()
	if err := os.Remove(name); err != nil {
		return nil, fmt.Errorf("checkpoint dir %s: remove %s: %w", dir, name, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint dir %s: %w", dir, err)
	}
	for _, e := range ents {
		if (strings.HasPrefix(e.Name(), prefix) || strings.HasPrefix(e.Name(), deltaPrefix)) && strings.HasSuffix(e.Name(), tmpSuffix) {
			p := filepath.Join(dir, e.Name())
			if err := os.Remove(p); err != nil {
				return nil, fmt.Errorf("remove stale %s: %w", p, err)
			}
		}
	}
	return &Dir{dir: dir, keep: keep, good: map[uint64]bool{}, unrestricted: unrestricted}, nil
}

// Unrestricted returns one error per path Open could not make private (not
// its owner, say), for the caller to log; the store works regardless.
func (s *Dir) Unrestricted() []error { return s.unrestricted }

// Path returns the directory.
func (s *Dir) Path() string { return s.dir }

func (s *Dir) path(tag uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%s%020d%s", prefix, tag, suffix))
}

// deltaPath is an incremental checkpoint's file: delta-TAG-BASE.ckpt,
// BASE the tag of the checkpoint it builds on.
func (s *Dir) deltaPath(tag, base uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%s%020d-%020d%s", deltaPrefix, tag, base, suffix))
}

// Encode returns the file bytes of a checkpoint of snapshot at tag.
func Encode(tag uint64, snapshot []byte) []byte {
	b := appendHeader(make([]byte, 0, headerSize+len(snapshot)+trailer), tag, len(snapshot))
	b = append(b, snapshot...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// appendHeader appends the bytes before a snapshot of n bytes.
func appendHeader(b []byte, tag uint64, n int) []byte {
	b = append(b, magic...)
	b = binary.BigEndian.AppendUint32(b, Version)
	b = binary.BigEndian.AppendUint64(b, tag)
	return binary.BigEndian.AppendUint64(b, uint64(n))
}

// Decode parses the bytes of a checkpoint file. The returned snapshot
// aliases b. Errors wrap ErrVersion or ErrCorrupt.
func Decode(b []byte) (tag uint64, snapshot []byte, err error) {
	if len(b) < len(magic) || string(b[:len(magic)]) != magic {
		return 0, nil, fmt.Errorf("%w: not an edgeproc checkpoint (bad magic)", ErrCorrupt)
	}
	if len(b) < headerSize+trailer {
		return 0, nil, fmt.Errorf("%w: truncated: %d bytes, the header alone needs %d", ErrCorrupt, len(b), headerSize+trailer)
	}
	// The version is checked before the CRC: a file of another version may
	// frame its checksum differently, and the operator must learn that it
	// is a version problem, not damage.
	if v := binary.BigEndian.Uint32(b[len(magic):]); v != Version {
		return 0, nil, fmt.Errorf("%w: file format version %d, this edgeproc reads version %d", ErrVersion, v, Version)
	}
	tag = binary.BigEndian.Uint64(b[len(magic)+4:])
	n := binary.BigEndian.Uint64(b[len(magic)+12:])
	if n > maxSnapshot || uint64(len(b)) != uint64(headerSize)+n+trailer {
		return 0, nil, fmt.Errorf("%w: truncated or padded: %d bytes, the header announces %d", ErrCorrupt, len(b), uint64(headerSize)+n+trailer)
	}
	body := b[:len(b)-trailer]
	if got, want := crc32.Checksum(body, castagnoli), binary.BigEndian.Uint32(b[len(body):]); got != want {
		return 0, nil, fmt.Errorf("%w: CRC-32C mismatch (computed %08x, stored %08x)", ErrCorrupt, got, want)
	}
	return tag, body[headerSize:], nil
}

// Read reads and checks the checkpoint file at path.
func Read(path string) (Checkpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	tag, snap, err := Decode(b)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return Checkpoint{Tag: tag, Snapshot: snap, Path: path, Size: int64(len(b))}, nil
}

// Write stores the snapshot made of parts (their concatenation, as
// engine.Checkpoint hands it over) as the checkpoint of tag, atomically and
// durably, then deletes all but the newest Keep good checkpoints (see the
// package doc). A failure (disk full, read-only) leaves the previous
// checkpoints as they were and is returned naming the path. The returned
// Checkpoint has no Snapshot: the caller holds it.
func (s *Dir) Write(tag uint64, parts ...[]byte) (Checkpoint, error) {
	c, err := s.write(s.path(tag), tag, parts)
	if err != nil {
		return c, err
	}
	s.good[tag] = true
	return c, s.prune()
}

// WriteDelta stores an incremental checkpoint of tag that builds on the
// checkpoint of base (a whole one, or another delta), as Write does. It
// prunes nothing: the whole checkpoints it builds on are Write's to prune.
func (s *Dir) WriteDelta(base, tag uint64, parts ...[]byte) (Checkpoint, error) {
	return s.write(s.deltaPath(tag, base), tag, parts)
}

func (s *Dir) write(final string, tag uint64, parts [][]byte) (Checkpoint, error) {
	tmp := final + tmpSuffix
	n, err := writeSync(tmp, tag, parts)
	if err != nil {
		_ = os.Remove(tmp)
		return Checkpoint{}, err
	}
	if s.beforeRename != nil {
		if err := s.beforeRename(tmp); err != nil {
			return Checkpoint{}, err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.Remove(tmp)
		return Checkpoint{}, fmt.Errorf("rename %s to %s: %w", tmp, final, err)
	}
	if err := syncDir(s.dir); err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{Tag: tag, Path: final, Size: n}, nil
}

// writeSync writes the file Encode would give for the concatenation of
// parts, without making it: the header, each part and the trailer in turn,
// so a large snapshot (tens of MB for a city's couriers) is not copied
// whole. It returns the file's size.
func writeSync(path string, tag uint64, parts [][]byte) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, private.FileMode)
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", path, err)
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	head := appendHeader(make([]byte, 0, headerSize+trailer), tag, n)
	crc := crc32.Checksum(head, castagnoli)
	for _, p := range parts {
		crc = crc32.Update(crc, castagnoli, p)
	}
	tail := binary.BigEndian.AppendUint32(head[headerSize:], crc)
	write := func(b []byte) error {
		if _, err := f.Write(b); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	}
	if err := write(head[:headerSize]); err != nil {
		return 0, err
	}
	for _, p := range parts {
		if err := write(p); err != nil {
			return 0, err
		}
	}
	if err := write(tail); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("close %s: %w", path, err)
	}
	return int64(headerSize + n + trailer), nil
}

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}

// tags lists the checkpoint tags present, newest first.
func (s *Dir) tags() ([]uint64, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint dir %s: %w", s.dir, err)
	}
	var tags []uint64
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, prefix) || !strings.HasSuffix(n, suffix) {
			continue
		}
		t, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(n, prefix), suffix), 10, 64)
		if err != nil {
			continue // not one of ours
		}
		tags = append(tags, t)
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i] > tags[j] })
	return tags, nil
}

// deltaFile is an incremental checkpoint's file.
type deltaFile struct {
	tag, base uint64
}

// deltas lists the incremental checkpoints present.
func (s *Dir) deltas() ([]deltaFile, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint dir %s: %w", s.dir, err)
	}
	var ds []deltaFile
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, deltaPrefix) || !strings.HasSuffix(n, suffix) {
			continue
		}
		ts, bs, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(n, deltaPrefix), suffix), "-")
		t, err1 := strconv.ParseUint(ts, 10, 64)
		b, err2 := strconv.ParseUint(bs, 10, 64)
		if !ok || err1 != nil || err2 != nil || t <= b {
			continue // not one of ours
		}
		ds = append(ds, deltaFile{tag: t, base: b})
	}
	return ds, nil
}

// prune keeps the newest keep good checkpoints and deletes the older ones.
// A checkpoint not known good is checked first: a corrupt one is moved
// aside and does not count, so it never stands in for a good fallback. A
// file of another format version is left alone and does not count either.
func (s *Dir) prune() error {
	tags, err := s.tags()
	if err != nil {
		return err
	}
	s.kept = s.kept[:0]
	for _, t := range tags {
		path := s.path(t)
		if len(s.kept) == s.keep {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove old checkpoint %s: %w", path, err)
			}
			delete(s.good, t)
			continue
		}
		if !s.good[t] {
			c, err := Read(path)
			switch {
			case err == nil && c.Tag == t:
				s.good[t] = true
			case errors.Is(err, fs.ErrNotExist), errors.Is(err, ErrVersion):
				continue
			default: // corrupt, or a tag that does not match its name
				if err := s.moveAside(path); err != nil {
					return err
				}
				continue
			}
		}
		s.kept = append(s.kept, t)
	}
	// A delta at or before the oldest checkpoint kept is on no chain a
	// Load can reach.
	if len(s.kept) > 0 {
		oldest := s.kept[len(s.kept)-1]
		ds, err := s.deltas()
		if err != nil {
			return err
		}
		for _, d := range ds {
			if d.tag <= oldest {
				if err := os.Remove(s.deltaPath(d.tag, d.base)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("remove old incremental checkpoint: %w", err)
				}
			}
		}
	}
	return syncDir(s.dir)
}

// Kept returns the tags of the checkpoints the last Write kept, newest
// first. The write-ahead log must hold every entry after the oldest of
// them: if the newer ones turn out damaged, Load falls back to it.
func (s *Dir) Kept() []uint64 { return slices.Clone(s.kept) }

// moveAside renames a corrupt checkpoint to its .corrupt name, removing any
// older .corrupt file.
func (s *Dir) moveAside(path string) error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("read checkpoint dir %s: %w", s.dir, err)
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, prefix) && strings.HasSuffix(n, suffix+corruptSuffix) {
			if err := os.Remove(filepath.Join(s.dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove older corrupt checkpoint %s: %w", n, err)
			}
		}
	}
	if err := os.Rename(path, path+corruptSuffix); err != nil {
		return fmt.Errorf("move corrupt checkpoint %s aside: %w", path, err)
	}
	return nil
}

// chain reads the incremental checkpoints that build on the checkpoint of
// tag, each on the one before, up to the first that is missing or does
// not check out (reported in skipped): the state is restored from the
// last good one, and the log replayed after it.
func (s *Dir) chain(tag uint64, skipped []error) ([]Checkpoint, []error, error) {
	ds, err := s.deltas()
	if err != nil {
		return nil, skipped, err
	}
	next := map[uint64]deltaFile{}
	for _, d := range ds {
		if old, dup := next[d.base]; !dup || d.tag > old.tag {
			next[d.base] = d
		}
	}
	var chain []Checkpoint
	for {
		d, ok := next[tag]
		if !ok {
			return chain, s.missing(ds, tag, skipped), nil
		}
		c, err := Read(s.deltaPath(d.tag, d.base))
		if err == nil && c.Tag != d.tag {
			err = fmt.Errorf("checkpoint %s: %w: holds tag %d, its name says %d", c.Path, ErrCorrupt, c.Tag, d.tag)
		}
		if err != nil {
			return chain, append(skipped, fmt.Errorf("incremental checkpoint after %d: %w", tag, err)), nil
		}
		chain = append(chain, c)
		tag = d.tag
	}
}

// missing reports each incremental checkpoint newer than end, the last
// one restored, that builds on a checkpoint the directory does not hold
// (a whole one or a delta deleted, lost with a disk): what was restored
// is older than what was written, and says so.
func (s *Dir) missing(ds []deltaFile, end uint64, skipped []error) []error {
	have := map[uint64]bool{}
	if tags, err := s.tags(); err == nil {
		for _, t := range tags {
			have[t] = true
		}
	}
	for _, d := range ds {
		have[d.tag] = true
	}
	for _, d := range ds {
		if d.tag > end && d.base != end && !have[d.base] {
			skipped = append(skipped, fmt.Errorf("incremental checkpoint %s: %w: it builds on checkpoint %d, which is not in %s; restored up to %d, the log replays from there",
				s.deltaPath(d.tag, d.base), ErrMissing, d.base, s.dir, end))
		}
	}
	return skipped
}

// Newest is Load on the checkpoint directory dir without opening it for
// writing: it creates, restricts and removes nothing, so a check
// (check-config) can read a running or stopped market's state as it is.
// A missing directory has no checkpoint (ok false).
func Newest(dir string) (c Checkpoint, ok bool, skipped []error, err error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return Checkpoint{}, false, nil, nil
	}
	s := &Dir{dir: dir, keep: DefaultKeep, good: map[uint64]bool{}}
	return s.Load()
}

// Load returns the newest checkpoint that checks out, and ok false when
// there is none (a fresh state directory). skipped describes each newer
// file that was corrupt and passed over, for the caller to log. A file of
// another format version fails Load with an error wrapping ErrVersion: an
// older fallback would silently replay an older state.
func (s *Dir) Load() (c Checkpoint, ok bool, skipped []error, err error) {
	tags, err := s.tags()
	if err != nil {
		return Checkpoint{}, false, nil, err
	}
	for _, t := range tags {
		c, err := Read(s.path(t))
		switch {
		case err == nil:
			if c.Tag != t {
				skipped = append(skipped, fmt.Errorf("checkpoint %s: %w: holds tag %d, its name says %d", c.Path, ErrCorrupt, c.Tag, t))
				continue
			}
			s.good[t] = true
			c.Deltas, skipped, err = s.chain(t, skipped)
			return c, true, skipped, err
		case errors.Is(err, ErrVersion):
			return Checkpoint{}, false, skipped, fmt.Errorf("%w; move the state directory aside to start empty, or run the edgeproc version that wrote it", err)
		default:
			skipped = append(skipped, err)
		}
	}
	if len(skipped) > 0 {
		return Checkpoint{}, false, skipped, fmt.Errorf("no usable checkpoint in %s: %w", s.dir, errors.Join(skipped...))
	}
	return Checkpoint{}, false, nil, nil
}
