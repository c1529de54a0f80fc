package courier

import "testing"

// TestPlace_NewestWins is the rule, step by step: positions move a
// courier only forward in time, a no_signal stands unless a newer
// position is known, signal_restored ends the silence.
func TestPlace_NewestWins(t *testing.T) {
	type step struct {
		name             string
		apply            func(p *Place) (applied, status bool)
		want             Place
		applied, changed bool
	}
	pos := func(ts int64, lat float64) func(p *Place) (bool, bool) {
		return func(p *Place) (bool, bool) { return p.Position(ts, lat, 2) }
	}
	silent := func(ts int64, lat float64) func(p *Place) (bool, bool) {
		return func(p *Place) (bool, bool) { return p.NoSignal(ts, lat, 2) }
	}
	restored := func(p *Place) (bool, bool) { return false, p.Restored() }
	var p Place
	for _, s := range []step{
		{"first position", pos(100, 1), Place{TS: 100, Lat: 1, Lon: 2}, true, false},
		{"duplicate", pos(100, 9), Place{TS: 100, Lat: 1, Lon: 2}, false, false},
		{"late", pos(50, 9), Place{TS: 100, Lat: 1, Lon: 2}, false, false},
		{"newer", pos(200, 3), Place{TS: 200, Lat: 3, Lon: 2}, true, false},
		{"no_signal older than the newest position", silent(150, 7), Place{TS: 200, Lat: 3, Lon: 2}, false, false},
		{"no_signal at the newest position", silent(200, 3), Place{TS: 200, Lat: 3, Lon: 2, Silent: true}, true, true},
		{"no_signal again", silent(200, 3), Place{TS: 200, Lat: 3, Lon: 2, Silent: true}, true, false},
		{"late position while silent", pos(190, 9), Place{TS: 200, Lat: 3, Lon: 2, Silent: true}, false, false},
		{"back", pos(300, 4), Place{TS: 300, Lat: 4, Lon: 2}, true, true},
		{"restored while online", restored, Place{TS: 300, Lat: 4, Lon: 2}, false, false},
		{"silent at a later place", silent(400, 5), Place{TS: 400, Lat: 5, Lon: 2, Silent: true}, true, true},
		{"restored", restored, Place{TS: 400, Lat: 5, Lon: 2}, false, true},
	} {
		applied, changed := s.apply(&p)
		if p != s.want || applied != s.applied || changed != s.changed {
			t.Errorf("%s: got %+v applied %v status %v; want %+v, %v, %v", s.name, p, applied, changed, s.want, s.applied, s.changed)
		}
	}
}
