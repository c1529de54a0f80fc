package lake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"path/filepath"
	"slices"
)

// The staging area keeps the rows a live source accepted between the
// series' last Parquet file and its last checkpoint (see Feed): a
// segment file per checkpoint interval, or per segMaxBytes of rows,
//
//	DIR/_staging/market=MARKET/[PREFIX]FIRST-LAST.rows
//
// FIRST..LAST being the log range it covers (the segments of a series
// tile the log where it had rows). A segment is written whole (temporary
// name, fsync, rename, folder fsync) and read whole: magic, then rows,
// then the CRC-32C of everything before it.
const (
	stagingDir    = "_staging"
	segmentSuffix = ".rows"
	segmentMagic  = "edgeproc-lake-staging-1\n"
)

// segMaxBytes is the size at which the rows of one checkpoint interval
// are cut into a segment of their own, so that a long interval (NATS
// away: no checkpoint completes) holds no more than this in memory.
const segMaxBytes = 8 << 20

// ErrSegmentCorrupt is returned for a staging segment that does not
// decode: it was damaged after it was written whole.
var ErrSegmentCorrupt = errors.New("lake: staging segment corrupt")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// StagingDir is the folder of market's staging segments.
func StagingDir(dir, market string) string {
	return filepath.Join(dir, stagingDir, "market="+market)
}

func segmentName(prefix string, first, last uint64) string {
	return fmt.Sprintf("%s%020d-%020d%s", prefix, first, last, segmentSuffix)
}

// segment is one staging segment: on disk, and while fresh its bytes.
type segment struct {
	first, last uint64
	data        []byte // the encoded file; nil once dropped from memory
	size        int64  // the file's
	rows        int
	dir         string // the folder of its file
}

func (s *segment) path(prefix string) string { return filepath.Join(s.dir, s.name(prefix)) }

func (s *segment) name(prefix string) string { return segmentName(prefix, s.first, s.last) }

// appendRow encodes r after the row at index prev.
func appendRow(b []byte, prev uint64, r *Row) []byte {
	b = binary.AppendUvarint(b, r.Index-prev)
	b = binary.AppendUvarint(b, uint64(len(r.Courier)))
	b = append(b, r.Courier...)
	b = binary.AppendVarint(b, r.TimestampMs)
	b = binary.AppendVarint(b, r.ArrivalMs-r.TimestampMs)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.Lat))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.Lon))
	var f byte
	if r.HasAccuracy {
		f |= 1
	}
	if r.LateDistance {
		f |= 2
	}
	if r.LateSession {
		f |= 4
	}
	b = append(b, f)
	if r.HasAccuracy {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.AccuracyM))
	}
	return b
}

// sealSegment ends an encoded segment with its checksum.
func sealSegment(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeSegment calls fn with each row of an encoded segment whose log
// range starts at first; r.Courier aliases data. It checks the whole
// segment before the first call.
func decodeSegment(data []byte, first uint64, fn func(r *Row) error) error {
	if len(data) < len(segmentMagic)+4 || string(data[:len(segmentMagic)]) != segmentMagic {
		return fmt.Errorf("%w: no header", ErrSegmentCorrupt)
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[len(body):]) {
		return fmt.Errorf("%w: checksum mismatch", ErrSegmentCorrupt)
	}
	b := body[len(segmentMagic):]
	prev := first - 1
	var r Row
	for len(b) > 0 {
		var err error
		if b, err = decodeRow(b, prev, &r); err != nil {
			return err
		}
		prev = r.Index
		if err := fn(&r); err != nil {
			return err
		}
	}
	return nil
}

func decodeRow(b []byte, prev uint64, r *Row) ([]byte, error) {
	bad := func(what string) ([]byte, error) {
		return nil, fmt.Errorf("%w: row after index %d: bad %s", ErrSegmentCorrupt, prev, what)
	}
	d, n := binary.Uvarint(b)
	if n <= 0 || d == 0 || prev+d < prev {
		return bad("index")
	}
	r.Index, b = prev+d, b[n:]
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return bad("courier")
	}
	r.Courier, b = b[n:n+int(l)], b[n+int(l):]
	ts, n := binary.Varint(b)
	if n <= 0 {
		return bad("timestamp")
	}
	r.TimestampMs, b = ts, b[n:]
	da, n := binary.Varint(b)
	if n <= 0 {
		return bad("arrival")
	}
	r.ArrivalMs, b = ts+da, b[n:]
	if len(b) < 17 {
		return bad("coordinates")
	}
	r.Lat = math.Float64frombits(binary.LittleEndian.Uint64(b))
	r.Lon = math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
	f := b[16]
	b = b[17:]
	if f&^7 != 0 {
		return bad("flags")
	}
	r.HasAccuracy, r.LateDistance, r.LateSession = f&1 != 0, f&2 != 0, f&4 != 0
	r.AccuracyM = 0
	if r.HasAccuracy {
		if len(b) < 8 {
			return bad("accuracy")
		}
		r.AccuracyM, b = math.Float64frombits(binary.LittleEndian.Uint64(b)), b[8:]
	}
	return b, nil
}

// listSegments returns the segments of series prefix in dir, by range,
// and the temporary files a write left there.
func listSegments(dir, prefix string) (segs []segment, tmps []string, err error) {
	files, tmps, err := listRanges(dir, prefix, segmentSuffix)
	for _, f := range files {
		segs = append(segs, segment{first: f.first, last: f.last, size: f.size, rows: -1, dir: dir}) // rows unknown, some
	}
	slices.SortFunc(segs, func(a, b segment) int { return cmpU(a.first, b.first) })
	return segs, tmps, err
}

// writeSegment writes data as the segment s of series prefix in s.dir.
func writeSegment(prefix string, s *segment, data []byte) error {
	_, err := writeAtomic(s.path(prefix), func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	return err
}
