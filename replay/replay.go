// Package replay runs the engine over a JSONL file of positions (contract
// §9, `edgeproc replay`): the batch deployment of the same code the live
// service runs. Lines are processed in file order, which is arrival order;
// a line's arrival_ms drives the processing clock.
//
// With the OwnTracks format (engine.Config.Format) a line is the OwnTracks
// message itself with two more members: "topic", the MQTT topic it was
// published to (as OwnTracks' HTTP mode sends it), whose level
// engine.Config.CourierLevel of the filter engine.Config.Topic is the
// courier, and "arrival_ms" as in any replay line.
package replay

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/position"
	"github.com/km0/edgeproc/result"
)

// Summary describes a finished replay.
type Summary struct {
	Lines   int64 // every line of the input, blank ones included
	Stats   engine.Stats
	Elapsed time.Duration
}

// String is the one-line summary printed at the end of a replay.
func (s Summary) String() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "replay: %d positions, %d accepted; rejected %d", s.Stats.Received, s.Stats.Accepted, s.Stats.Results[result.Rejected.String()])
	sep := " ("
	for _, r := range position.Reasons {
		if n := s.Stats.Rejected[r.String()]; n > 0 {
			fmt.Fprintf(&b, "%s%s %d", sep, r, n)
			sep = ", "
		}
	}
	if sep == ", " {
		b.WriteString(")")
	}
	var ignored int64
	for _, n := range s.Stats.Ignored {
		ignored += n
	}
	if ignored > 0 {
		fmt.Fprintf(&b, "; ignored %d", ignored)
		sep = " ("
		for _, t := range position.MessageTypes {
			if n := s.Stats.Ignored[t.String()]; n > 0 {
				fmt.Fprintf(&b, "%s%s %d", sep, t, n)
				sep = ", "
			}
		}
		b.WriteString(")")
	}
	if s.Stats.SecondsLate > 0 {
		fmt.Fprintf(&b, "; late with timestamp_ms in seconds %d", s.Stats.SecondsLate)
	}
	// Refused dead-zone warnings are no_signal results no dead zone
	// counts (their window had dead_zones.max_cells cells): without them
	// here, the dead zones would look complete.
	fmt.Fprintf(&b, "; duplicates %d; late distance %d, session %d; missed window memberships %d; couriers evicted %d; dead-zone warnings refused %d; results",
		s.Stats.Duplicates, s.Stats.LateDistance, s.Stats.LateSession, s.Stats.MissedMemberships, s.Stats.Evicted, s.Stats.DeadZoneRefused)
	for _, t := range result.Types {
		fmt.Fprintf(&b, " %s %d", t, s.Stats.Results[t.String()])
	}
	rate := 0.0
	if s.Elapsed > 0 {
		rate = float64(s.Stats.Received) / s.Elapsed.Seconds()
	}
	fmt.Fprintf(&b, "; %s, %.0f positions/s", s.Elapsed.Round(time.Millisecond), rate)
	return b.String()
}

// Run replays in through the engine configured by cfg and writes every
// record, in the engine's deterministic order, as JSON lines to out.
func Run(cfg engine.Config, in io.Reader, out io.Writer) (Summary, error) {
	return run(cfg, out, func(push func(*engine.Input)) (int64, error) {
		var input engine.Input // one for every line: push's argument escapes
		return readLines(in, func(line []byte, n int64) {
			input = engine.Input{Payload: line, Line: n}
			push(&input)
		})
	})
}

// run runs the engine over the inputs feed pushes, in order, and writes
// the records to out. feed returns how many lines its input had.
func run(cfg engine.Config, out io.Writer, feed func(push func(*engine.Input)) (int64, error)) (Summary, error) {
	start := time.Now()
	w := bufio.NewWriterSize(out, 1<<20)
	var werr error
	var buf []byte
	e := engine.New(cfg, func(rs []result.Record) {
		if werr != nil {
			return
		}
		for i := range rs {
			buf = rs[i].AppendJSON(buf[:0])
			buf = append(buf, '\n')
			if _, err := w.Write(buf); err != nil {
				werr = err
				return
			}
		}
	})
	lines, rerr := feed(e.Push)
	e.EndOfInput()
	if werr == nil {
		werr = w.Flush()
	}
	sum := Summary{Lines: lines, Stats: e.Stats(), Elapsed: time.Since(start)}
	if rerr != nil {
		return sum, fmt.Errorf("read input: %w", rerr)
	}
	if werr != nil {
		return sum, fmt.Errorf("write results: %w", werr)
	}
	return sum, nil
}

// readLines calls fn with every non-blank line (without its line ending) and
// its 1-based number, and returns how many lines there were. A line longer
// than a payload may be is cut to position.MaxPayload+1 bytes: enough to be
// rejected as too_large with its raw prefix, without holding it whole.
func readLines(in io.Reader, fn func(line []byte, n int64)) (int64, error) {
	r := bufio.NewReaderSize(in, 1<<20)
	var long []byte
	var n int64
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long) <= position.MaxPayload {
				long = append(long, line[:min(len(line), position.MaxPayload+1-len(long))]...)
			}
			continue
		}
		if long != nil {
			if len(long) <= position.MaxPayload {
				long = append(long, line[:min(len(line), position.MaxPayload+1-len(long))]...)
			}
			line, long = long, nil
		}
		if len(line) > 0 {
			n++
			// A line is what lies between two '\n': a '\r' before one is
			// part of the payload (JSON whitespace, so it decodes the same).
			line = bytes.TrimSuffix(line, []byte{'\n'})
			if len(bytes.TrimSpace(line)) > 0 {
				fn(line, n)
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
