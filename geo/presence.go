package geo

// AreaResolution is the H3 resolution a service area is filled at (~174 m
// edges, 0.1 km² a cell): fine enough to follow a city's outline, and the
// border band (AreaBand rings on each side) is then 0.5–0.9 km wide.
const AreaResolution = 9

// ConfirmFixes is how many fixes in a row on the other side of a service
// area, out of its border band, move a courier there: one fix could be a
// GPS spike kilometres off.
const ConfirmFixes = 2

// Presence is a courier's side of a service area, decided over its fixes
// in timestamp order: ConfirmFixes fixes in a row on the other side, out
// of the border band, move it, as of the first of them; any other fix (in
// the band, or on its side) cancels a pending move, so that two GPS jumps
// hours apart do not add up to one. The first side seen is where the courier starts, not a move.
// Its zero value has seen nothing.
type Presence struct {
	// Last is the timestamp of the newest fix taken: a fix at or before
	// it arrived out of order and is not taken (the sides already
	// decided stand).
	Last int64
	// Side is the courier's side (Inside or Outside), 0 before any.
	Side Side
	// Pending counts the fixes in a row on the other side; At is the
	// first of them.
	Pending uint8
	At      Fix
}

// Step takes one fix. When it completes a move it returns the side left
// and the fix the move is dated by (the first one on the new side).
func (p *Presence) Step(a *Area, x Fix) (left Side, at Fix, moved bool) {
	if x.TS <= p.Last {
		return 0, Fix{}, false
	}
	p.Last = x.TS
	s := a.Side(a.Cell(x.Lat, x.Lon))
	switch {
	case s == Border:
		p.Pending = 0
		return 0, Fix{}, false
	case p.Side == 0:
		p.Side = s
		return 0, Fix{}, false
	case s == p.Side:
		p.Pending = 0
		return 0, Fix{}, false
	}
	if p.Pending == 0 {
		p.At = x
	}
	if p.Pending++; p.Pending < ConfirmFixes {
		return 0, Fix{}, false
	}
	left, p.Side, p.Pending = p.Side, s, 0
	return left, p.At, true
}
