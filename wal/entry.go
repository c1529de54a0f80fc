package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/km0/edgeproc/entry"
)

// Frame layout inside one tidwall/wal entry, version 2 (written):
//
//	[0]    frameVersion (2)
//	[1:5]  CRC-32C (Castagnoli), little endian, of bytes [5:]
//	[5]    kind
//	[6:]   varint arrival | uvarint len(topic) | topic | payload
//
// Version 1 (read only, written by older binaries) has no kind byte: its
// bytes [5:] are varint arrival | uvarint len(topic) | topic | payload, and
// an entry with an empty topic and an empty payload is a tick (the sentinel
// those binaries logged), anything else a position.
//
// The version byte comes first so a future layout is refused by an old
// binary instead of being misread.
const (
	frameVersion   = 2
	frameVersionV1 = 1
	headerSize     = 5
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sentinel errors, found with errors.Is.
var (
	// ErrCorrupt is matched by every *CorruptError: an entry or segment
	// that cannot be trusted.
	ErrCorrupt = errors.New("wal: corrupt")
	// ErrChecksum is the cause when an entry's CRC-32C does not match.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrVersion is the cause when an entry carries a frame version this
	// binary does not know.
	ErrVersion = errors.New("unknown frame version")
	// ErrMalformed is the cause when an entry is too short, or its fields
	// do not fit the bytes, or a tidwall/wal length prefix runs past the end
	// of its segment (a torn write).
	ErrMalformed = errors.New("malformed entry")
	// ErrClosed is returned by operations on a closed Log.
	ErrClosed = errors.New("wal: log closed")
)

// CorruptError reports where damage was found. Segment and Offset are set
// when the damage was found by scanning a segment file (at Open); Index is
// the log index the damaged entry has or would have had.
type CorruptError struct {
	Segment string // path of the segment file, or "" if not known
	Offset  int64  // byte offset of the damaged entry in Segment, or -1
	Index   uint64 // log index of the damaged entry
	Err     error  // the cause: ErrChecksum, ErrVersion, ErrMalformed or another
}

func (e *CorruptError) Error() string {
	if e.Segment == "" {
		return fmt.Sprintf("wal: corrupt entry at index %d: %v", e.Index, e.Err)
	}
	return fmt.Sprintf("wal: corrupt segment %s at offset %d (index %d): %v",
		e.Segment, e.Offset, e.Index, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true for every CorruptError.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// appendFrame appends the framed encoding of e to dst.
func appendFrame(dst []byte, e entry.Entry) []byte {
	start := len(dst)
	dst = append(dst, frameVersion, 0, 0, 0, 0, byte(e.Kind))
	dst = binary.AppendVarint(dst, e.Arrival)
	dst = binary.AppendUvarint(dst, uint64(len(e.Topic)))
	dst = append(dst, e.Topic...)
	dst = append(dst, e.Payload...)
	sum := crc32.Checksum(dst[start+headerSize:], castagnoli)
	binary.LittleEndian.PutUint32(dst[start+1:], sum)
	return dst
}

// decodeFrame decodes a frame written by appendFrame, or a version-1 frame
// of an older binary. The returned Payload aliases b. Only canonical
// encodings are accepted, so a version-2 frame decodes if and only if
// appendFrame would have written exactly those bytes.
func decodeFrame(index uint64, b []byte) (entry.Entry, error) {
	fail := func(cause error) (entry.Entry, error) {
		return entry.Entry{}, &CorruptError{Offset: -1, Index: index, Err: cause}
	}
	if len(b) < headerSize {
		return fail(fmt.Errorf("%w: %d bytes, need at least %d", ErrMalformed, len(b), headerSize))
	}
	if b[0] != frameVersion && b[0] != frameVersionV1 {
		return fail(fmt.Errorf("%w %d (this binary reads %d and %d)", ErrVersion, b[0], frameVersionV1, frameVersion))
	}
	body := b[headerSize:]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[1:]); got != want {
		return fail(fmt.Errorf("%w: computed %08x, stored %08x", ErrChecksum, got, want))
	}
	kind := entry.Position
	if b[0] == frameVersion {
		if len(body) == 0 || body[0] >= entry.Kinds {
			return fail(fmt.Errorf("%w: missing or unknown kind", ErrMalformed))
		}
		kind, body = entry.Kind(body[0]), body[1:]
	}
	// Past the CRC only a bug in appendFrame could make these fail; they are
	// checked anyway so no input can make decoding panic.
	arrival, n := binary.Varint(body)
	if n <= 0 || n != varintLen(arrival) {
		return fail(fmt.Errorf("%w: bad arrival varint", ErrMalformed))
	}
	body = body[n:]
	tlen, n := binary.Uvarint(body)
	if n <= 0 || n != uvarintLen(tlen) || tlen > uint64(len(body)-n) {
		return fail(fmt.Errorf("%w: bad topic length", ErrMalformed))
	}
	body = body[n:]
	e := entry.Entry{
		Kind:    kind,
		Arrival: arrival,
		Topic:   string(body[:tlen]),
		Payload: body[tlen:len(body):len(body)],
	}
	if b[0] == frameVersionV1 && e.Topic == "" && len(e.Payload) == 0 {
		e.Kind = entry.Tick
	}
	return e, nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}
