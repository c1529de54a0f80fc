package replay

import (
	"encoding/json"
	"io"
	"math"
	"strconv"

	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/position"
)

// RunLake replays Parquet files of the lake (contract §9, replay --in a
// lake folder): their rows, read in arrival order (lake.ReadArrivalOrder:
// arrival_ms, ties by file name, then row), go through the engine as the
// positions of a JSONL file with the same arrival_ms would, in that
// order; the i-th row is line i of that file (appendPosition). A row
// whose line the decoder plainly accepts (plainRow) goes to the engine
// decoded (positionOf), any other as that line, for the decoder to
// judge. paths
// are as lake.Files returns them.
func RunLake(cfg engine.Config, paths []string, out io.Writer) (Summary, error) {
	return run(cfg, out, func(push func(*engine.Input)) (int64, error) {
		// Reading runs on a goroutine of its own, a chunk of rows ahead
		// of the engine: on two cores that takes the Parquet decoding off
		// the engine's sequencer.
		chunks, free := make(chan *rowChunk, 2), make(chan *rowChunk, 3)
		for range 3 {
			free <- &rowChunk{}
		}
		errc := make(chan error, 1)
		go func() {
			c := <-free
			c.reset()
			err := lake.ReadArrivalOrder(paths, func(r *lake.Row) error {
				c.add(r)
				if len(c.rows) == rowChunkSize {
					chunks <- c
					c = <-free
					c.reset()
				}
				return nil
			})
			chunks <- c
			close(chunks)
			errc <- err
		}()
		var n int64
		var p position.Position
		var cur *lake.Row // the row pushed decoded, for its rejected record
		decoded := engine.Input{Position: &p, AppendPayload: func(dst []byte) []byte { return appendPosition(dst, cur) }}
		var line engine.Input
		for c := range chunks {
			name, ln := 0, 0
			for i := range c.rows {
				n++
				r := &c.rows[i]
				r.Courier = c.names[name:c.nameEnds[i]]
				name = c.nameEnds[i]
				if end := c.lineEnds[i]; end > ln {
					line = engine.Input{Payload: c.lines[ln:end], Line: n}
					ln = end
					push(&line)
					continue
				}
				positionOf(r, &p)
				cur, decoded.Line = r, n
				push(&decoded)
			}
			free <- c
		}
		return n, <-errc
	})
}

// rowChunkSize is how many rows a rowChunk carries.
const rowChunkSize = 4096

// rowChunk is rows read ahead of the engine: their couriers back to back
// in names, and for a row that does not go decoded (not a plainRow), its
// line in lines.
type rowChunk struct {
	rows     []lake.Row // Courier nil: names[nameEnds[i-1]:nameEnds[i]]
	names    []byte
	nameEnds []int
	lines    []byte
	lineEnds []int // the end of the row's line in lines; no line: the previous row's end
}

func (c *rowChunk) reset() {
	c.rows, c.names, c.nameEnds, c.lines, c.lineEnds = c.rows[:0], c.names[:0], c.nameEnds[:0], c.lines[:0], c.lineEnds[:0]
}

// add appends r, and its line unless it is a plainRow (to go decoded).
func (c *rowChunk) add(r *lake.Row) {
	if !plainRow(r) {
		c.lines = appendPosition(c.lines, r)
	}
	c.lineEnds = append(c.lineEnds, len(c.lines))
	c.names = append(c.names, r.Courier...)
	c.nameEnds = append(c.nameEnds, len(c.names))
	c.rows = append(c.rows, *r)
	c.rows[len(c.rows)-1].Courier = nil
}

// plainRow reports whether the decoder accepts r's line
// (appendPosition) as a position with r's values, as positionOf gives
// them: whether r's values pass the decoder's own field rules
// (position.Check). The line carries exactly those values (a float64 is
// written in a form that parses back to it, a valid courier id as it
// is), so the decoder rejects the line of any other row: it goes to the
// engine as its line, and the decoder says why (nothing the lake's
// writer writes). TestPlainRow_AgreesWithDecoder holds it to that.
func plainRow(r *lake.Row) bool {
	return position.Check(&position.Position{Courier: r.Courier, Lat: r.Lat, Lon: r.Lon, TS: r.TimestampMs}) == position.OK
}

// positionOf sets p to what the decoder gives for the line of r, a
// plainRow: the line's arrival_ms, a -0 coordinate as 0, accuracy_m
// left out of the line as -1.
func positionOf(r *lake.Row, p *position.Position) {
	*p = position.Position{Courier: r.Courier, Lat: r.Lat, Lon: r.Lon, TS: r.TimestampMs, Accuracy: -1, Arrival: r.ArrivalMs, HasArrival: true}
	if p.Lat == 0 {
		p.Lat = 0 // not -0: the line says 0
	}
	if p.Lon == 0 {
		p.Lon = 0
	}
	if hasAccuracy(r) {
		p.Accuracy = r.AccuracyM
		if p.Accuracy == 0 {
			p.Accuracy = 0
		}
	}
}

// hasAccuracy reports whether r's line carries accuracy_m: r has one
// the contract does not ignore, a finite number >= 0.
func hasAccuracy(r *lake.Row) bool {
	return r.HasAccuracy && r.AccuracyM >= 0 && !math.IsInf(r.AccuracyM, 0)
}

// appendPosition appends r as the contract's JSON object (§2) with its
// arrival_ms: one line of a replay file. Numbers are written in the
// shortest form that parses back to the same float64; a null accuracy_m
// is left out.
func appendPosition(dst []byte, r *lake.Row) []byte {
	dst = append(dst, `{"courier":`...)
	dst = appendString(dst, r.Courier)
	dst = append(dst, `,"lat":`...)
	dst = appendFloat(dst, r.Lat)
	dst = append(dst, `,"lon":`...)
	dst = appendFloat(dst, r.Lon)
	dst = append(dst, `,"timestamp_ms":`...)
	dst = strconv.AppendInt(dst, r.TimestampMs, 10)
	if hasAccuracy(r) {
		dst = append(dst, `,"accuracy_m":`...)
		dst = appendFloat(dst, r.AccuracyM)
	}
	dst = append(dst, `,"arrival_ms":`...)
	dst = strconv.AppendInt(dst, r.ArrivalMs, 10)
	return append(dst, '}')
}

// appendFloat appends v in a form that parses back to v. A value of at
// most six decimals (a phone's coordinates, as most are) is k/10^6 for
// an integer k, and k/1e6 is the float64 nearest that decimal, which is
// what parsing it gives: its digits are written directly, a quarter of
// the cost of the shortest-form search strconv does for any other value.
func appendFloat(dst []byte, v float64) []byte {
	k := math.Round(v * 1e6)
	if math.Abs(k) >= 1<<53 || k/1e6 != v {
		return strconv.AppendFloat(dst, v, 'f', -1, 64)
	}
	n := int64(k)
	if n < 0 {
		dst = append(dst, '-')
		n = -n
	}
	dst = strconv.AppendInt(dst, n/1e6, 10)
	frac := n % 1e6
	if frac == 0 {
		return dst
	}
	var digits [7]byte
	digits[0] = '.'
	for i := 6; i >= 1; i-- {
		digits[i] = byte('0' + frac%10)
		frac /= 10
	}
	end := 7
	for digits[end-1] == '0' {
		end--
	}
	return append(dst, digits[:end]...)
}

// appendString appends s as a JSON string: as it is when it holds only
// the characters a courier id may (the lake's rows), else escaped.
func appendString(dst, s []byte) []byte {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			q, _ := json.Marshal(string(s))
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
