// Package output is where a market's results leave edgeproc, the same for
// both sources (the MQTT source's single process and the partitioned
// JetStream source): each result is published to the market's results
// stream under its key, the courier bucket is told what the result says of
// its courier (no_signal, back online, its side of the service area), and
// the fleet board gets the same positions and results at the same point,
// so the bucket and the board never disagree about what was published.
// The side a courier is first known on, which no result says (a first
// side is no move), comes from the engine (Sink.Side) to both.
package output

import (
	"context"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/result"
)

// Sink publishes one engine's results. A Sink is used by one goroutine
// at a time (an engine's merger, which calls it in order); several engines
// of one market each take their own from For, all sharing one bridge and
// board.
type Sink struct {
	br       *bridge.Bridge
	board    *board.Feed                    // nil: no board
	subjects *[len(result.Types) + 1]string // and result.ZonePart
	buf      []byte
}

// New returns the sink of a market whose results go through br and whose
// board feed is board (nil when http.board is off).
func New(br *bridge.Bridge, board *board.Feed) *Sink {
	var subjects [len(result.Types) + 1]string
	for _, t := range result.Types {
		subjects[t] = br.Config().Subject(t.String())
	}
	subjects[result.ZonePart] = br.Config().Subject(bridge.KindZonePart)
	return &Sink{br: br, board: board, subjects: &subjects}
}

// For returns a sink of the same market for another engine, with its own
// encoding buffer.
func (s *Sink) For() *Sink { return &Sink{br: s.br, board: s.board, subjects: s.subjects} }

// Bridge is the sink's results bridge.
func (s *Sink) Bridge() *bridge.Bridge { return s.br }

// Publish publishes one result under its key, waiting while too many
// await their ack (bounded by ctx), and once it is accepted tells the
// courier bucket and the board what it says of its courier. A result that
// is not published changes neither: its input is replayed by whoever
// resumes from the last checkpoint, and marked then.
func (s *Sink) Publish(ctx context.Context, r *result.Record) error {
	s.buf = r.AppendJSON(s.buf[:0])
	if err := s.br.Publish(ctx, s.subjects[r.Type], r.Key(), s.buf); err != nil {
		return err
	}
	switch r.Type {
	case result.NoSignal:
		s.br.MarkNoSignal(r.Courier, r.End, r.Lat, r.Lon)
	case result.SignalRestored:
		s.br.MarkOnline(r.Courier)
	case result.LeftArea, result.EnteredArea:
		s.br.MarkSide(r.Courier, r.TS, r.Type == result.LeftArea)
	}
	s.board.Result(r)
	return nil
}

// Position is the engine's OnPosition: every valid position goes to the
// courier bucket (coalesced per courier there) and to the board.
func (s *Sink) Position(courier []byte, ts int64, lat, lon float64) {
	s.br.UpdatePosition(courier, ts, lat, lon)
	s.board.Position(courier, ts, lat, lon)
}

// Side is the engine's OnSide: the side of the service area a courier
// was first known on goes to the courier bucket and the board, which then
// follow its moves from the results. Unlike the other methods it is
// called from the engine's shards, several at once: it only hands the
// side to the bucket's and the board's mailboxes, which are safe for that.
func (s *Sink) Side(courier string, ts int64, outside bool) {
	s.br.MarkSide(courier, ts, outside)
	s.board.Side(courier, ts, outside)
}

// Forget is the engine's OnForget: a forgotten courier leaves the board.
func (s *Sink) Forget(courier string) { s.board.Forget(courier) }
