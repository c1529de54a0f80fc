package replay

import (
	"encoding/json"
	"io"
	"math"
	"strconv"

	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/lake"
)

// RunLake replays Parquet files of the lake (contract §9, replay --in a
// lake folder): their rows, read in arrival order (lake.ReadArrivalOrder:
// arrival_ms, ties by file name, then row), go through the engine as the
// positions of a JSONL file with the same arrival_ms would, in that
// order; the i-th row is line i of that file. paths are as lake.Files
// returns them.
func RunLake(cfg engine.Config, paths []string, out io.Writer) (Summary, error) {
	return run(cfg, out, func(push func(*engine.Input)) (int64, error) {
		// Reading and encoding run on a goroutine of their own, a chunk
		// of lines ahead of the engine: on two cores that takes the
		// Parquet decoding off the engine's sequencer.
		chunks, free := make(chan *lineChunk, 2), make(chan *lineChunk, 3)
		for range 3 {
			free <- &lineChunk{}
		}
		errc := make(chan error, 1)
		go func() {
			c := <-free
			c.reset()
			err := lake.ReadArrivalOrder(paths, func(r *lake.Row) error {
				c.buf = appendPosition(c.buf, r)
				c.ends = append(c.ends, len(c.buf))
				if len(c.ends) == lineChunkSize {
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
		for c := range chunks {
			start := 0
			for _, end := range c.ends {
				n++
				push(&engine.Input{Payload: c.buf[start:end], Line: n})
				start = end
			}
			free <- c
		}
		return n, <-errc
	})
}

// lineChunkSize is how many positions a lineChunk carries.
const lineChunkSize = 4096

// lineChunk is positions encoded as replay lines, back to back.
type lineChunk struct {
	buf  []byte
	ends []int
}

func (c *lineChunk) reset() { c.buf, c.ends = c.buf[:0], c.ends[:0] }

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
	if r.HasAccuracy && r.AccuracyM >= 0 && !math.IsInf(r.AccuracyM, 0) {
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
