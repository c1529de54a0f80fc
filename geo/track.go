package geo

import "math"

// Track is the distance filter's state after a courier's fixes, fed in
// timestamp order: an anchor (where the courier is taken to be) and at most
// one pending fix that left the anchor's radius and waits for the next fix
// to confirm it. It is a plain value, so the window package keeps copies at
// pane boundaries and replays from there when an out-of-order fix arrives.
type Track struct {
	// The anchor's origin: the fix it was set at (with MinMoveM 0, simply
	// the previous fix).
	TS       int64
	Lat, Lon float64
	// SumLat, SumLon: the offsets from the origin, in degrees, of the Near
	// fixes seen within the radius since the anchor was set (the origin
	// included). Once there are SettleFixes of them the anchor is their mean.
	SumLat, SumLon float64
	// The pending fix, when HasPending.
	PendTS           int64
	PendLat, PendLon float64
	Near             int32
	HasAnchor        bool
	HasPending       bool
	// Confirmed: a settled courier's pending fix has been confirmed once
	// and needs one more fix out of the radius.
	Confirmed bool
}

const (
	// SettleFixes is how many fixes within the radius (the anchor's own
	// included) make a courier settled: its anchor becomes their mean and
	// its radius grows by SettledFactor. 8 fixes at 1 per 5 s is 40 s,
	// longer than a walking courier (1.4 m/s) stays within the default
	// 15 m of a point even round a corner, so a moving courier never
	// settles.
	SettleFixes = 8
	// SettledFactor widens a settled courier's radius: the mean of many
	// fixes is a better anchor than one fix, and a stop is where noise
	// would otherwise add distance.
	SettledFactor = 2.0
	// SpikeRatio: a pending fix is a spike when the detour through it
	// (anchor → pending → next, against anchor → next) is more than the
	// radius and more than this fraction of the path through it. A 90°
	// corner is a detour of 0.29 of the path; an isolated bad fix off a
	// slow path is nearly 1.
	SpikeRatio = 0.35
	// maxSettle caps the fixes averaged into a settled anchor, which then
	// stays put for the rest of the stop.
	maxSettle = 60
)

// anchor returns the anchor's position.
func (t *Track) anchor() (lat, lon float64) {
	if t.Near < SettleFixes {
		return t.Lat, t.Lon
	}
	n := float64(t.Near)
	return t.Lat + t.SumLat/n, t.Lon + t.SumLon/n
}

// setAnchor makes x the anchor's origin, with nothing pending.
func (t *Track) setAnchor(ts int64, lat, lon float64) {
	*t = Track{TS: ts, Lat: lat, Lon: lon, Near: 1, HasAnchor: true}
}

// Settled reports whether the courier has stayed within the radius of its
// anchor for SettleFixes fixes.
func (t *Track) Settled() bool { return t.Near >= SettleFixes }

// Same reports whether t and u are the same state bit for bit: the filter
// then goes on identically from either.
func (t *Track) Same(u *Track) bool {
	return t.TS == u.TS && t.PendTS == u.PendTS && t.Near == u.Near &&
		t.HasAnchor == u.HasAnchor && t.HasPending == u.HasPending && t.Confirmed == u.Confirmed &&
		sameBits(t.Lat, u.Lat) && sameBits(t.Lon, u.Lon) &&
		sameBits(t.SumLat, u.SumLat) && sameBits(t.SumLon, u.SumLon) &&
		sameBits(t.PendLat, u.PendLat) && sameBits(t.PendLon, u.PendLon)
}

func sameBits(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

// Step feeds the next fix x (x.TS after that of every fix fed before) and
// returns the metres it adds to the courier's distance.
//
// With MinMoveM 0 it applies Segment to the previous fix and x: plain
// haversine when MaxSpeedKmh is 0 too (contract §3). With MinMoveM > 0 it
// is the anchor scheme of docs/semantics.md: distance is counted only when
// a fix leaves the anchor's radius, max(MinMoveM, x.Acc) (× SettledFactor
// once settled), and the next fix confirms it by being outside too and not
// making it a spike; the confirmed fix becomes the anchor and the segment
// anchor → it is counted, unless it implies more than MaxSpeedKmh.
func (f Filter) Step(t *Track, x Fix) float64 {
	st := f.Stepper()
	return st.Step(t, x)
}

// A Stepper is a Filter that remembers the plane of the last anchor it
// measured round: a replay steps hundreds of fixes round one anchor (a
// settled anchor stays put after maxSettle fixes), and the cosine is a
// third of a step. It gives exactly Filter.Step's results.
type Stepper struct {
	f     Filter
	lat   uint64 // bits of the latitude pl is for, once cache is set
	pl    plane
	cache bool
}

// Stepper returns a Stepper for f.
func (f Filter) Stepper() Stepper { return Stepper{f: f} }

func (s *Stepper) plane(lat float64) plane {
	if b := math.Float64bits(lat); !s.cache || b != s.lat {
		s.pl, s.lat, s.cache = newPlane(lat), b, true
	}
	return s.pl
}

// Step is Filter.Step.
func (s *Stepper) Step(t *Track, x Fix) float64 {
	f := s.f
	if !t.HasAnchor {
		t.setAnchor(x.TS, x.Lat, x.Lon)
		return 0
	}
	if f.MinMoveM <= 0 {
		seg := f.Segment(Fix{TS: t.TS, Lat: t.Lat, Lon: t.Lon}, x)
		t.setAnchor(x.TS, x.Lat, x.Lon)
		return seg
	}
	aLat, aLon := t.anchor()
	// The decisions compare distances of metres to kilometres with a
	// radius: the local flat-earth distance is within 0.1 % of haversine
	// there and costs one cosine per fix instead of three haversines.
	// Counted segments are haversine.
	pl := s.plane(aLat)
	r := max(f.MinMoveM, x.Acc)
	rHere := r
	if t.Settled() {
		rHere *= SettledFactor
	}
	dAx := pl.dist(aLat, aLon, x.Lat, x.Lon)
	if !t.HasPending {
		if dAx <= rHere {
			t.near(x)
		} else {
			t.PendTS, t.PendLat, t.PendLon, t.HasPending = x.TS, x.Lat, x.Lon, true
		}
		return 0
	}
	if dAx <= rHere { // back within the radius: the pending fix was a spike
		t.PendTS, t.PendLat, t.PendLon, t.HasPending, t.Confirmed = 0, 0, 0, false, false // no stale copy in a checkpoint
		t.near(x)
		return 0
	}
	dAp := pl.dist(aLat, aLon, t.PendLat, t.PendLon)
	dpx := pl.dist(t.PendLat, t.PendLon, x.Lat, x.Lon)
	if det := dAp + dpx - dAx; det > rHere && det > SpikeRatio*(dAp+dpx) {
		// A detour through the pending fix: it was a spike; x waits instead.
		t.PendTS, t.PendLat, t.PendLon, t.Confirmed = x.TS, x.Lat, x.Lon, false
		return 0
	}
	if t.Settled() && !t.Confirmed {
		// Leaving a stop takes two fixes beyond the pending one: two
		// spikes in a row happen every few hours of parking, three do not.
		t.Confirmed = true
		return 0
	}
	seg := Haversine(aLat, aLon, t.PendLat, t.PendLon)
	if f.MaxSpeedKmh > 0 && seg*3600 > f.MaxSpeedKmh*float64(t.PendTS-t.TS) {
		seg = 0 // confirmed, but too fast to be travel: a jump
	}
	t.setAnchor(t.PendTS, t.PendLat, t.PendLon)
	if dpx > r {
		t.PendTS, t.PendLat, t.PendLon, t.HasPending = x.TS, x.Lat, x.Lon, true
	} else {
		t.near(x)
	}
	return seg
}

// near records x, a fix within the radius of the anchor.
func (t *Track) near(x Fix) {
	if t.Near >= maxSettle {
		return
	}
	t.Near++
	t.SumLat += x.Lat - t.Lat
	t.SumLon += x.Lon - t.Lon
}

// plane measures short distances on the plane tangent at a latitude.
type plane struct{ kLat, kLon float64 } // metres per degree

func newPlane(lat float64) plane {
	k := EarthRadiusM * rad
	return plane{kLat: k, kLon: k * math.Cos(lat*rad)}
}

// dist returns the flat-earth distance in metres between two points in
// degrees, the longitude difference taken across the antimeridian when
// shorter.
func (p plane) dist(lat1, lon1, lat2, lon2 float64) float64 {
	dLon := lon2 - lon1
	if dLon > 180 {
		dLon -= 360
	} else if dLon < -180 {
		dLon += 360
	}
	dy, dx := (lat2-lat1)*p.kLat, dLon*p.kLon
	return math.Sqrt(dx*dx + dy*dy)
}
