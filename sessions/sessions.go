// Package sessions holds one courier's gap-based session windows (contract
// §3): a courier silent for longer than the gap gets a no_signal when its
// session closes, and a signal_restored when it is heard from again.
//
// Sessions merge the way Flink's event-time session windows do: a position
// opens [ts, ts+gap) and merges with every open session it overlaps or
// touches; a session closes when the watermark reaches last+gap and is never
// extended afterwards.
package sessions

import "github.com/km0/edgeproc/internal/tmath"

// Session is an open session: its first and latest position.
type Session struct {
	Start, Last int64   // ms
	Lat, Lon    float64 // the latest position
}

// Kind tells a no_signal from a signal_restored.
type Kind uint8

const (
	NoSignal Kind = iota
	Restored
)

// Event is a no_signal or signal_restored produced by Close or Add.
type Event struct {
	Kind Kind
	At   int64 // firing time: the closed session's Last+gap (Close only)
	// Session is the closed session (NoSignal).
	Session    Session
	EndOfInput bool // NoSignal fired only because the input ended
	// SilentFrom and RestoredAt describe a Restored.
	SilentFrom, RestoredAt int64
}

// State is one courier's sessions. The zero value is ready.
type State struct {
	open       []Session // by Start; any two are more than gap apart
	silentFrom int64     // Last of the closed session awaiting a signal_restored
	pending    bool
}

// Open reports whether the courier has an open session.
func (s *State) Open() bool { return len(s.open) > 0 }

// touching returns the range [i, j) of open sessions that [ts, ts+gap)
// overlaps or touches.
func (s *State) touching(ts, gap int64) (int, int) {
	i := 0
	for i < len(s.open) && tmath.Add(s.open[i].Last, gap) < ts {
		i++
	}
	j := i
	for j < len(s.open) && s.open[j].Start <= tmath.Add(ts, gap) {
		j++
	}
	return i, j
}

// Late reports whether a position at ts is late for sessions at watermark
// wm: it touches no open session and its own session would already be
// closed (merge, then check).
func (s *State) Late(ts, wm, gap int64) bool {
	if i, j := s.touching(ts, gap); i < j {
		return false
	}
	return wm >= tmath.Add(ts, gap)
}

// Add applies a position that is not late. When it opens a new session
// while a closed one awaits its restore, it returns that signal_restored.
func (s *State) Add(ts int64, lat, lon float64, gap int64) (Event, bool) {
	i, j := s.touching(ts, gap)
	if i == j {
		s.open = append(s.open, Session{})
		copy(s.open[i+1:], s.open[i:])
		s.open[i] = Session{Start: ts, Last: ts, Lat: lat, Lon: lon}
		if s.pending {
			s.pending = false
			return Event{Kind: Restored, SilentFrom: s.silentFrom, RestoredAt: ts}, true
		}
		return Event{}, false
	}
	m := s.open[i]
	m.Last = s.open[j-1].Last // sessions are ordered: the last one is the latest
	m.Lat, m.Lon = s.open[j-1].Lat, s.open[j-1].Lon
	m.Start = min(m.Start, ts)
	if ts > m.Last { // on a tie the position that arrived first stays the latest
		m.Last, m.Lat, m.Lon = ts, lat, lon
	}
	s.open[i] = m
	s.open = append(s.open[:i+1], s.open[j:]...)
	return Event{}, false
}

// NextClose returns when the earliest open session closes, if any.
func (s *State) NextClose(gap int64) (int64, bool) {
	if len(s.open) == 0 {
		return 0, false
	}
	return tmath.Add(s.open[0].Last, gap), true
}

// Close closes, in order, every session with Last+gap <= wm. endOfInput
// marks the flush at the end of a replay: the courier's latest session then
// closes only because the input ended.
func (s *State) Close(wm, gap int64, endOfInput bool, emit func(Event)) {
	k := 0
	for k < len(s.open) && tmath.Add(s.open[k].Last, gap) <= wm {
		c := s.open[k]
		at := tmath.Add(c.Last, gap)
		emit(Event{Kind: NoSignal, At: at, Session: c, EndOfInput: endOfInput && k == len(s.open)-1})
		if k+1 < len(s.open) {
			emit(Event{Kind: Restored, At: at, SilentFrom: c.Last, RestoredAt: s.open[k+1].Start})
		} else {
			s.silentFrom, s.pending = c.Last, true
		}
		k++
	}
	if k > 0 {
		s.open = s.open[:copy(s.open, s.open[k:])]
	}
}
