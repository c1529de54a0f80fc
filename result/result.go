// Package result holds edgeproc's output records (contract §4) and their
// JSON encoding. The same bytes go to a replay file and to NATS.
package result

import (
	"encoding/json"
	"strconv"

	"github.com/uber/h3-go/v4"
)

// Type is a record type.
type Type uint8

// Record types. The order is the tie-break order of records of one courier
// at one firing time.
const (
	Distance Type = iota
	NoSignal
	SignalRestored
	Late
	// LeftArea and EnteredArea: a courier moved out of or into the
	// market's service area (geo.service_area; geo.Presence).
	LeftArea
	EnteredArea
	Rejected
	// DeadZone is a market's no_signal warnings in one H3 cell over one
	// event-time window (docs/semantics.md, Dead zones): no courier.
	DeadZone
	// ZonePart is one partition's part of its market's dead zones (the
	// partitioned source): not a result of the contract, but what the
	// partitions' owners combine into the market's DeadZone results
	// (partition/zones.go). Not in Types.
	ZonePart
)

var typeText = [...]string{"distance", "no_signal", "signal_restored", "late", "left_area", "entered_area", "rejected", "dead_zone", "dead_zone_part"}

// String returns the contract's type name.
func (t Type) String() string { return typeText[t] }

// Types lists every record type, for metrics and summaries.
var Types = [...]Type{Distance, NoSignal, SignalRestored, Late, LeftArea, EnteredArea, Rejected, DeadZone}

// Operator is the operator a late record was late for.
type Operator uint8

const (
	OpDistance Operator = iota
	OpSession
)

func (o Operator) String() string {
	if o == OpSession {
		return "session"
	}
	return "distance"
}

// Order places a record in the deterministic output order: by the input
// step that caused it (Seq), records of the input itself before the firings
// its watermark causes (Phase), then by firing time, courier and type.
// It is the order a single-threaded run would emit, whatever the sharding.
type Order struct {
	Seq   int64
	Phase uint8 // 0: caused by the input itself; 1: fired by the watermark
	At    int64 // firing time (Phase 1)
	Rank  uint8 // tie-break between records of one courier
}

// Record is one output record. Which fields are set depends on Type.
type Record struct {
	Type      Type
	Market    string
	Courier   string
	EmittedAt int64 // processing time of emission, ms
	Order     Order

	// Distance: the window. NoSignal: Start is session_start_ms and End is
	// last_seen_ms.
	Start, End int64
	DistanceM  float64
	Positions  int
	Stopped    bool
	// Revision numbers a distance window's re-firings under allowed
	// lateness (contract §3): 0 for its first firing, then 1, 2, … JSON
	// "revision" and the key's last part, present only when above 0.
	Revision int
	// Distance, with the distance filter on: the window's fixes span less
	// than half of it, too little to claim stopped (Stopped is then
	// false). JSON "insufficient_evidence", present only when true.
	InsufficientEvidence bool
	Lat, Lon             float64 // NoSignal: the session's latest position; LeftArea, EnteredArea: the fix
	Cell                 h3.Cell // Distance, NoSignal, DeadZone
	EndOfInput           bool    // NoSignal

	SilentFrom, RestoredAt int64 // SignalRestored

	Operator  Operator // Late
	TS        int64    // Late: the position's timestamp_ms; LeftArea, EnteredArea: the first fix's on the new side (with Lat, Lon, Cell)
	Watermark int64    // Late: the watermark it was judged against

	Zone *Zone // DeadZone: Start and End are the window, Cell the cell
	// Part is a ZonePart's partition and cells; its Start is the
	// partition's Through.
	Part *Part

	Reason string // Rejected
	// Field names the missing field of a Rejected record of reason
	// missing_field (JSON "field"); empty otherwise.
	Field string
	Raw   []byte // Rejected: the payload, at most RawLimit bytes
	Line  int64  // Rejected: line of a replay file, or position in the log
}

// Zone is what a dead_zone result counts: the no_signal warnings whose
// last_seen_ms falls in its window and whose last position is in its
// cell, the distinct couriers they were for, and the silences that had
// ended (a signal_restored) when it fired.
type Zone struct {
	Warnings, Couriers, Restored int
	// SilenceMs and LongestMs are the sum and the longest of the restored
	// warnings' gap_ms.
	SilenceMs, LongestMs int64
}

// Part is one partition's part of its market's dead zones, as a
// ZonePart record carries it: every window of the partition that starts
// before Through has fired (its watermark reached the window's end +
// gap), and Cells are the counts of those fired since the partition's
// previous ZonePart (From), by window and cell (none: nothing counted). The
// market's dead zone of a window is the sum of every partition's cells
// of it: a courier is in one partition, so its warnings and restores
// are counted in one part.
type Part struct {
	Partition int
	// From is the partition's previous part's Through (tmath.Never: its
	// first): the part covers the windows from From to Through.
	From  int64
	Cells []PartCell
}

// PartCell is a partition's count of one cell over one window.
type PartCell struct {
	Start int64
	Cell  h3.Cell
	Zone
}

// RawLimit is how much of a rejected payload is kept (1 KiB).
const RawLimit = 1024

// TruncateRaw returns at most RawLimit bytes of p, cut at a UTF-8 rune start.
func TruncateRaw(p []byte) []byte {
	if len(p) <= RawLimit {
		return p
	}
	n := RawLimit
	for n > RawLimit-4 && n > 0 && p[n]&0xC0 == 0x80 {
		n--
	}
	return p[:n]
}

// Less reports whether a comes before b in the output order.
func Less(a, b *Record) bool {
	x, y := &a.Order, &b.Order
	if x.Seq != y.Seq {
		return x.Seq < y.Seq
	}
	if x.Phase != y.Phase {
		return x.Phase < y.Phase
	}
	if x.At != y.At {
		return x.At < y.At
	}
	if a.Courier != b.Courier {
		return a.Courier < b.Courier
	}
	if x.Rank != y.Rank {
		return x.Rank < y.Rank
	}
	if a.Start != b.Start {
		return a.Start < b.Start
	}
	return a.Cell < b.Cell // dead zones of one window
}

// AppendKey appends the record's idempotency key (contract §4).
func (r *Record) AppendKey(dst []byte) []byte {
	dst = append(dst, r.Type.String()...)
	dst = append(dst, '|')
	dst = append(dst, r.Market...)
	dst = append(dst, '|')
	switch r.Type {
	case Rejected:
		return strconv.AppendInt(dst, r.Line, 10)
	case DeadZone:
		dst = strconv.AppendUint(dst, uint64(r.Cell), 16)
		dst = append(dst, '|')
		return strconv.AppendInt(dst, r.Start, 10)
	case ZonePart:
		dst = append(dst, 'p')
		dst = strconv.AppendInt(dst, int64(r.Part.Partition), 10)
		dst = append(dst, '|')
		return strconv.AppendInt(dst, r.Start, 10)
	case Distance, NoSignal:
		dst = append(dst, r.Courier...)
		dst = append(dst, '|')
		dst = strconv.AppendInt(dst, r.Start, 10)
		if r.Revision > 0 {
			dst = append(dst, '|')
			dst = strconv.AppendInt(dst, int64(r.Revision), 10)
		}
		return dst
	case SignalRestored:
		dst = append(dst, r.Courier...)
		dst = append(dst, '|')
		return strconv.AppendInt(dst, r.SilentFrom, 10)
	case LeftArea, EnteredArea:
		dst = append(dst, r.Courier...)
		dst = append(dst, '|')
		return strconv.AppendInt(dst, r.TS, 10)
	default: // Late
		dst = append(dst, r.Courier...)
		dst = append(dst, '|')
		dst = strconv.AppendInt(dst, r.TS, 10)
		dst = append(dst, '|')
		return append(dst, r.Operator.String()...)
	}
}

// Key returns the record's idempotency key. It costs one allocation: the
// key is built on the stack (appended from nil, it took five or six, once
// per published result).
func (r *Record) Key() string {
	var b [128]byte
	return string(r.AppendKey(b[:0]))
}

// AppendJSON appends the record as one JSON object (no newline). Market and
// courier ids are validated upstream to need no escaping.
func (r *Record) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"type":"`...)
	dst = append(dst, r.Type.String()...)
	dst = append(dst, `","market":"`...)
	dst = append(dst, r.Market...)
	if r.Type != Rejected && r.Type != DeadZone && r.Type != ZonePart {
		dst = append(dst, `","courier":"`...)
		dst = append(dst, r.Courier...)
	}
	dst = append(dst, `","key":"`...)
	dst = r.AppendKey(dst)
	dst = append(dst, '"')
	switch r.Type {
	case Distance:
		dst = appendInt(dst, "window_start_ms", r.Start)
		dst = appendInt(dst, "window_end_ms", r.End)
		dst = appendFloat(dst, "distance_m", r.DistanceM)
		dst = appendInt(dst, "positions", int64(r.Positions))
		dst = append(dst, `,"stopped":`...)
		dst = strconv.AppendBool(dst, r.Stopped)
		if r.InsufficientEvidence {
			dst = append(dst, `,"insufficient_evidence":true`...)
		}
		dst = appendCell(dst, r.Cell)
		if r.Revision > 0 {
			dst = appendInt(dst, "revision", int64(r.Revision))
		}
	case NoSignal:
		dst = appendInt(dst, "session_start_ms", r.Start)
		dst = appendInt(dst, "last_seen_ms", r.End)
		dst = appendFloat(dst, "last_lat", r.Lat)
		dst = appendFloat(dst, "last_lon", r.Lon)
		dst = appendCell(dst, r.Cell)
		if r.EndOfInput {
			dst = append(dst, `,"end_of_input":true`...)
		}
	case SignalRestored:
		dst = appendInt(dst, "silent_from_ms", r.SilentFrom)
		dst = appendInt(dst, "restored_at_ms", r.RestoredAt)
		dst = appendInt(dst, "gap_ms", r.RestoredAt-r.SilentFrom)
	case Late:
		dst = append(dst, `,"operator":"`...)
		dst = append(dst, r.Operator.String()...)
		dst = append(dst, '"')
		dst = appendInt(dst, "timestamp_ms", r.TS)
		dst = appendInt(dst, "watermark_ms", r.Watermark)
		dst = appendInt(dst, "lateness_ms", r.Watermark-r.TS)
	case LeftArea, EnteredArea:
		dst = appendInt(dst, "timestamp_ms", r.TS)
		dst = appendFloat(dst, "lat", r.Lat)
		dst = appendFloat(dst, "lon", r.Lon)
		dst = appendCell(dst, r.Cell)
	case DeadZone:
		z := r.Zone
		dst = appendInt(dst, "window_start_ms", r.Start)
		dst = appendInt(dst, "window_end_ms", r.End)
		dst = appendCell(dst, r.Cell)
		dst = appendInt(dst, "warnings", int64(z.Warnings))
		dst = appendInt(dst, "couriers", int64(z.Couriers))
		dst = appendInt(dst, "restored", int64(z.Restored))
		dst = appendInt(dst, "open", int64(z.Warnings-z.Restored))
		dst = appendInt(dst, "silence_ms", z.SilenceMs)
		dst = appendInt(dst, "longest_silence_ms", z.LongestMs)
	case ZonePart:
		dst = appendInt(dst, "partition", int64(r.Part.Partition))
		dst = appendInt(dst, "from_ms", r.Part.From)
		dst = appendInt(dst, "through_ms", r.Start)
		dst = append(dst, `,"cells":[`...)
		for i, c := range r.Part.Cells {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"window_start_ms":`...)
			dst = strconv.AppendInt(dst, c.Start, 10)
			dst = appendCell(dst, c.Cell)
			dst = appendInt(dst, "warnings", int64(c.Warnings))
			dst = appendInt(dst, "couriers", int64(c.Couriers))
			dst = appendInt(dst, "restored", int64(c.Restored))
			dst = appendInt(dst, "silence_ms", c.SilenceMs)
			dst = appendInt(dst, "longest_silence_ms", c.LongestMs)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	case Rejected:
		dst = append(dst, `,"reason":"`...)
		dst = append(dst, r.Reason...)
		if r.Field != "" {
			dst = append(dst, `","field":"`...)
			dst = append(dst, r.Field...)
		}
		dst = append(dst, `","raw":`...)
		// Rare path: encoding/json gets every escape and invalid UTF-8 right.
		raw, _ := json.Marshal(string(r.Raw))
		dst = append(dst, raw...)
		dst = appendInt(dst, "line", r.Line)
	}
	dst = appendInt(dst, "emitted_at_ms", r.EmittedAt)
	return append(dst, '}')
}

func appendInt(dst []byte, name string, v int64) []byte {
	dst = append(dst, `,"`...)
	dst = append(dst, name...)
	dst = append(dst, `":`...)
	return strconv.AppendInt(dst, v, 10)
}

func appendFloat(dst []byte, name string, v float64) []byte {
	dst = append(dst, `,"`...)
	dst = append(dst, name...)
	dst = append(dst, `":`...)
	return strconv.AppendFloat(dst, v, 'f', -1, 64)
}

func appendCell(dst []byte, c h3.Cell) []byte {
	dst = append(dst, `,"cell":"`...)
	dst = strconv.AppendUint(dst, uint64(c), 16)
	return append(dst, '"')
}
