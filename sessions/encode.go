package sessions

import (
	"fmt"

	"github.com/km0/edgeproc/internal/wire"
)

// AppendState appends s's state for a checkpoint.
func (s *State) AppendState(b []byte) []byte {
	b = wire.AppendUint(b, uint64(len(s.open)))
	for _, x := range s.open {
		b = wire.AppendInt(b, x.Start)
		b = wire.AppendInt(b, x.Last)
		b = wire.AppendFloat(b, x.Lat)
		b = wire.AppendFloat(b, x.Lon)
	}
	b = wire.AppendBool(b, s.pending)
	return wire.AppendInt(b, s.silentFrom)
}

// ReadState restores s from what AppendState wrote.
func (s *State) ReadState(r *wire.Reader) error {
	*s = State{}
	n := r.Count(18)
	for i := 0; i < n && r.Err() == nil; i++ {
		x := Session{Start: r.Int(), Last: r.Int(), Lat: r.Float(), Lon: r.Float()}
		if x.Last < x.Start || len(s.open) > 0 && x.Start <= s.open[len(s.open)-1].Last {
			return fmt.Errorf("session state: sessions out of order at %d", x.Start)
		}
		s.open = append(s.open, x)
	}
	s.pending = r.Bool()
	s.silentFrom = r.Int()
	if err := r.Err(); err != nil {
		return fmt.Errorf("session state: %w", err)
	}
	return nil
}
