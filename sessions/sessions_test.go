package sessions

import (
	"reflect"
	"testing"
)

const gap = 60_000

func closeAll(s *State, wm int64, eoi bool) []Event {
	var got []Event
	s.Close(wm, gap, eoi, func(e Event) { got = append(got, e) })
	return got
}

func TestState_SilenceOfExactlyGapMerges(t *testing.T) {
	cases := []struct {
		name     string
		second   int64
		sessions int
	}{
		{"exactly gap", 10_000 + gap, 1},
		{"gap + 1 ms", 10_000 + gap + 1, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s State
			s.Add(10_000, 1, 1, gap)
			s.Add(c.second, 2, 2, gap)
			if got := len(s.open); got != c.sessions {
				t.Fatalf("got %d open sessions, want %d", got, c.sessions)
			}
		})
	}
}

func TestState_CloseAtLastPlusGap(t *testing.T) {
	var s State
	s.Add(10_000, 1, 1, gap)
	if got := closeAll(&s, 10_000+gap-1, false); len(got) != 0 {
		t.Fatalf("wm one before last+gap: got %v, want nothing", got)
	}
	got := closeAll(&s, 10_000+gap, false)
	want := []Event{{Kind: NoSignal, At: 10_000 + gap, Session: Session{Start: 10_000, Last: 10_000, Lat: 1, Lon: 1}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestState_RestoredAtOnceWhenNextSessionHasPositions(t *testing.T) {
	var s State
	s.Add(0, 1, 1, gap)
	s.Add(200_000, 2, 2, gap) // out of order future session, already open
	got := closeAll(&s, gap, false)
	want := []Event{
		{Kind: NoSignal, At: gap, Session: Session{Start: 0, Last: 0, Lat: 1, Lon: 1}},
		{Kind: Restored, At: gap, SilentFrom: 0, RestoredAt: 200_000},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestState_RestoredWhenNextPositionArrives(t *testing.T) {
	var s State
	s.Add(0, 1, 1, gap)
	closeAll(&s, gap, false)
	if !s.Late(0, gap, gap) {
		t.Fatalf("a position touching only a closed session with wm >= ts+gap must be late")
	}
	ev, ok := s.Add(300_000, 2, 2, gap)
	want := Event{Kind: Restored, SilentFrom: 0, RestoredAt: 300_000}
	if !ok || ev != want {
		t.Fatalf("got %+v %v, want %+v", ev, ok, want)
	}
	if _, ok := s.Add(310_000, 3, 3, gap); ok {
		t.Fatalf("a second position of the new session must not restore again")
	}
}

func TestState_MergeThenCheck(t *testing.T) {
	var s State
	s.Add(100_000, 1, 1, gap)
	// wm is past 50_000+gap, but the position touches the open session.
	if s.Late(50_000, 150_000, gap) {
		t.Fatalf("an old position inside an open session must not be late")
	}
	s.Add(50_000, 0, 0, gap)
	if s.open[0].Start != 50_000 || s.open[0].Last != 100_000 || s.open[0].Lat != 1 {
		t.Fatalf("got %+v, want start 50000, latest 100000 at (1,1)", s.open[0])
	}
}

func TestState_MergeBridgesTwoSessions(t *testing.T) {
	var s State
	s.Add(0, 1, 1, gap)
	s.Add(100_000, 2, 2, gap)
	s.Add(50_000, 3, 3, gap)
	want := []Session{{Start: 0, Last: 100_000, Lat: 2, Lon: 2}}
	if !reflect.DeepEqual(s.open, want) {
		t.Fatalf("got %+v, want %+v", s.open, want)
	}
}

func TestState_TieKeepsFirstArrived(t *testing.T) {
	var s State
	s.Add(0, 1, 1, gap)
	s.Add(0, 9, 9, gap)
	if s.open[0].Lat != 1 {
		t.Fatalf("got latest lat %v, want the first arrival's 1", s.open[0].Lat)
	}
}

func TestState_EndOfInputMarksLatestOnly(t *testing.T) {
	var s State
	s.Add(0, 1, 1, gap)
	s.Add(500_000, 2, 2, gap)
	got := closeAll(&s, 1<<62, true)
	if len(got) != 3 || got[0].EndOfInput || got[1].Kind != Restored || !got[2].EndOfInput {
		t.Fatalf("got %+v, want no_signal, restored, no_signal(end_of_input)", got)
	}
}
