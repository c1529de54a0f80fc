package wal

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// This file knows the on-disk layout of github.com/tidwall/wal v1.2.1, which
// that package does not export: a directory of segment files named by the
// 20-digit zero-padded index of their first entry, each a plain sequence of
// uvarint(len) + bytes, with no checksum. "NAME.START" and "NAME.END" are
// left by an interrupted TruncateFront/TruncateBack and are resolved by
// tidwall's own Open; "NAME.TEMP" is a leftover of its atomic writes and is
// ignored by it.

// segmentFile is one segment file of the log.
type segmentFile struct {
	path  string
	index uint64 // index of its first entry (from its name)
}

// listSegments returns the segment files in dir in index order, and the
// names of START/END files that tidwall has not resolved.
func listSegments(dir string) (segs []segmentFile, leftovers []string, err error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", dir, err)
	}
	for _, de := range des {
		name := de.Name()
		if de.IsDir() || len(name) < 20 {
			continue
		}
		index, perr := strconv.ParseUint(name[:20], 10, 64)
		if perr != nil || index == 0 {
			continue
		}
		switch rest := name[20:]; {
		case rest == "":
			segs = append(segs, segmentFile{path: filepath.Join(dir, name), index: index})
		case strings.HasSuffix(rest, ".START") && len(rest) == len(".START"),
			strings.HasSuffix(rest, ".END") && len(rest) == len(".END"):
			leftovers = append(leftovers, name)
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].index < segs[j].index })
	return segs, leftovers, nil
}

// scanResult is what scanning one segment found.
type scanResult struct {
	size    int64         // file size, bytes
	entries int           // entries in the valid prefix
	valid   int64         // length of the valid prefix, bytes
	damage  *CorruptError // first bad entry, nil if the whole file is good
	// dropped counts the entries from the damage to the end of the file
	// (see countDropped).
	dropped int
}

// scanSegment reads a segment and checks every entry's framing and CRC.
// Entries are counted from seg.index.
func scanSegment(seg segmentFile) (scanResult, error) {
	data, err := os.ReadFile(seg.path)
	if err != nil {
		return scanResult{}, fmt.Errorf("read segment %s: %w", seg.path, err)
	}
	r := scanResult{size: int64(len(data))}
	off := 0
	for off < len(data) {
		index := seg.index + uint64(r.entries)
		n, frame, ferr := nextRecord(data[off:])
		if ferr == nil {
			_, ferr = decodeFrame(index, frame)
		}
		if ferr != nil {
			cause := ferr
			if ce, ok := ferr.(*CorruptError); ok {
				cause = ce.Err
			}
			r.damage = &CorruptError{Segment: seg.path, Offset: int64(off), Index: index, Err: cause}
			r.dropped = countDropped(data[off:])
			break
		}
		off += n
		r.entries++
	}
	r.valid = int64(off)
	return r, nil
}

// nextRecord splits the first tidwall record off b: it returns the record's
// total length and its data.
func nextRecord(b []byte) (int, []byte, error) {
	size, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: torn or bad length prefix", ErrMalformed)
	}
	if size > uint64(len(b)-n) {
		return 0, nil, fmt.Errorf("%w: record of %d bytes runs past the end of the segment (%d bytes left)",
			ErrMalformed, size, len(b)-n)
	}
	return n + int(size), b[n : n+int(size)], nil
}

// countDropped counts the entries in b, a segment's tail from its first bad
// entry on. A damaged length prefix hides where the next entries start, so
// after each bad stretch it resynchronises on the next offset that holds a
// whole record with a good frame (CRC-32C makes a false match in random
// bytes about a 2^-32 chance per candidate). Each bad stretch counts as one
// entry, so a torn write counts 1, and a flipped length prefix in front of
// eight good entries counts 9.
func countDropped(b []byte) int {
	count := 0
	for len(b) > 0 {
		count++ // b starts with a bad record
		next := -1
		for off := 1; off < len(b); off++ {
			if goodRecordAt(b[off:]) {
				next = off
				break
			}
		}
		if next < 0 {
			break
		}
		b = b[next:]
		for len(b) > 0 {
			n, frame, err := nextRecord(b)
			if err != nil {
				break
			}
			if _, err := decodeFrame(0, frame); err != nil {
				break
			}
			count++
			b = b[n:]
		}
	}
	return count
}

// goodRecordAt reports whether b starts with a whole record holding a frame
// that decodes. The version byte is checked before the CRC, so most offsets
// of a damaged stretch cost a few byte reads.
func goodRecordAt(b []byte) bool {
	size, n := binary.Uvarint(b)
	if n <= 0 || size < headerSize || size > uint64(len(b)-n) {
		return false
	}
	if v := b[n]; v != frameVersion && v != frameVersionV1 {
		return false
	}
	_, err := decodeFrame(0, b[n:n+int(size)])
	return err == nil
}

// cutFile truncates path to size and fsyncs it, so the repair survives a
// second crash.
func cutFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open segment %s: %w", path, err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("truncate segment %s to %d bytes: %w", path, size, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync segment %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close segment %s: %w", path, err)
	}
	return nil
}

// dirBytes is the total size of the segment files in dir.
func dirBytes(dir string) (int64, error) {
	segs, _, err := listSegments(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, s := range segs {
		fi, err := os.Stat(s.path)
		if err != nil {
			return 0, fmt.Errorf("stat segment %s: %w", s.path, err)
		}
		total += fi.Size()
	}
	return total, nil
}
