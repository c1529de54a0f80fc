package fleet

import (
	"math"
	"math/rand/v2"
)

// Motion model. Couriers live on a local plane (x east, y north, metres from
// the centre): over a few kilometres the equirectangular projection is
// accurate to well under 0.1 %, and it needs no trigonometry per position.
//
// A courier alternates trips and stops. A trip goes to a destination drawn
// uniformly in the disk of Config.Radius, through one corner (first along x,
// then y, or the other way round), like a drive along two streets; each of
// its two legs has its own constant speed, uniform in [minSpeed, maxSpeed].
// A stop (a pickup or delivery) lasts uniform [minStop, maxStop].
const (
	minSpeedKmh = 10.0
	maxSpeedKmh = 35.0
	minStopS    = 60.0
	maxStopS    = 480.0
	// Parked positions scatter in a disk around the parking point whose
	// radius is drawn per stop in [minParkJitterM, maxParkJitterM].
	minParkJitterM = 5.0
	maxParkJitterM = 30.0
	// Reported accuracy_m: parked (often indoors) 5–20 m, driving 5–12 m.
	minAccuracyM       = 5.0
	maxParkAccuracyM   = 20.0
	maxMovingAccuracyM = 12.0
	// While driving, GPS error is strongly autocorrelated: an AR(1) offset
	// per axis with this coefficient and innovation (metres) has a
	// stationary standard deviation of ~1.7 m and moves ~1 m between fixes,
	// so consecutive fixes keep the true speed within a few km/h.
	movingNoiseAR    = 0.8
	movingNoiseSigma = 1.0
	// Probability that a courier starts the run parked.
	startParked = 0.3
	// Earth radius used by the contract's haversine, metres.
	earthRadiusM = 6_371_008.8
)

type courier struct {
	id     string
	prone  bool  // may enter tunnels
	nextTS int64 // event time of the next position, ms
	// tunnelEnd is when its current tunnel ends (TunnelBuffered and
	// TunnelOnTime), event time ms; 0 or past: not in one.
	tunnelStart, tunnelEnd int64
	lastTS                 int64 // event time the state was last advanced to, ms

	x, y   float64 // true position, metres from the centre
	parked bool
	// parked
	parkLeftS float64 // seconds of stop remaining
	jitterM   float64 // radius of the parked scatter, metres
	// driving: the current leg goes along (ux, uy) for legLeftM metres at
	// speedMS; then to (destX, destY) if the corner has not been passed.
	ux, uy       float64
	legLeftM     float64
	speedMS      float64
	destX, destY float64
	atCorner     bool // the current leg is the last of the trip
	leg          int  // legs started so far (tests group fixes by leg)
	noiseX       float64
	noiseY       float64
	// roam: its trips go round (ox, oy), plane metres from the centre
	// (Config.RoamFraction).
	roam   bool
	ox, oy float64
}

// advance moves the courier's true state forward by dtMs of event time.
func (c *courier) advance(dtMs int64, r *rand.Rand, radius float64) {
	t := float64(dtMs) / 1000
	// Bounded: each iteration either consumes all of t or ends a stop or a
	// leg; stops last ≥ minStopS, so a few iterations suffice.
	for t > 0 {
		if c.parked {
			if c.parkLeftS > t {
				c.parkLeftS -= t
				return
			}
			t -= c.parkLeftS
			c.startTrip(r, radius)
			continue
		}
		step := c.speedMS * t
		if step < c.legLeftM {
			c.x += c.ux * step
			c.y += c.uy * step
			c.legLeftM -= step
			return
		}
		c.x += c.ux * c.legLeftM
		c.y += c.uy * c.legLeftM
		t -= c.legLeftM / c.speedMS
		c.legLeftM = 0
		c.endLeg(r)
	}
}

func (c *courier) park(r *rand.Rand, stopS float64) {
	c.parked = true
	c.parkLeftS = stopS
	c.jitterM = uniform(r, minParkJitterM, maxParkJitterM)
}

func (c *courier) startTrip(r *rand.Rand, radius float64) {
	dx, dy := inDisk(r, radius)
	dx, dy = dx+c.ox, dy+c.oy
	c.destX, c.destY = dx, dy
	cx, cy := dx, c.y // along x first
	if r.IntN(2) == 0 {
		cx, cy = c.x, dy // along y first
	}
	c.atCorner = false
	if !c.startLeg(r, cx, cy) {
		c.endLeg(r)
	}
}

// startLeg heads for (tx, ty); it reports false when already there.
func (c *courier) startLeg(r *rand.Rand, tx, ty float64) bool {
	dx, dy := tx-c.x, ty-c.y
	d := math.Hypot(dx, dy)
	if d < 1 {
		return false
	}
	c.parked = false
	c.ux, c.uy = dx/d, dy/d
	c.legLeftM = d
	c.speedMS = uniform(r, minSpeedKmh, maxSpeedKmh) / 3.6
	c.leg++
	return true
}

func (c *courier) endLeg(r *rand.Rand) {
	if !c.atCorner {
		c.atCorner = true
		if c.startLeg(r, c.destX, c.destY) {
			return
		}
	}
	c.park(r, uniform(r, minStopS, maxStopS))
}

// fix returns the reported position (plane metres) and accuracy of a
// position taken now.
func (c *courier) fix(r *rand.Rand) (x, y, acc float64) {
	if c.parked {
		ox, oy := inDisk(r, c.jitterM)
		return c.x + ox, c.y + oy, uniform(r, minAccuracyM, maxParkAccuracyM)
	}
	c.noiseX = movingNoiseAR*c.noiseX + movingNoiseSigma*r.NormFloat64()
	c.noiseY = movingNoiseAR*c.noiseY + movingNoiseSigma*r.NormFloat64()
	return c.x + c.noiseX, c.y + c.noiseY, uniform(r, minAccuracyM, maxMovingAccuracyM)
}

func uniform(r *rand.Rand, lo, hi float64) float64 {
	return lo + (hi-lo)*r.Float64()
}

// inDisk draws a point uniformly in the disk of radius rad around 0 by
// rejection (π/4 acceptance, no trigonometry).
func inDisk(r *rand.Rand, rad float64) (float64, float64) {
	for {
		x, y := 2*r.Float64()-1, 2*r.Float64()-1
		if x*x+y*y <= 1 {
			return x * rad, y * rad
		}
	}
}

// projection converts plane metres to degrees around a centre.
type projection struct {
	lat0, lon0 float64
	degPerMLat float64
	degPerMLon float64
}

func newProjection(lat0, lon0 float64) projection {
	mPerDeg := earthRadiusM * math.Pi / 180
	return projection{
		lat0: lat0, lon0: lon0,
		degPerMLat: 1 / mPerDeg,
		degPerMLon: 1 / (mPerDeg * math.Cos(lat0*math.Pi/180)),
	}
}

// latLon returns the coordinates of (x, y), rounded to 1e-6° (~0.1 m) so
// that the JSON text and the Event carry exactly the same values.
func (p projection) latLon(x, y float64) (lat, lon float64) {
	lat = roundTo(p.lat0+y*p.degPerMLat, 1e6)
	lon = p.lon0 + x*p.degPerMLon
	// Wrap across the antimeridian so lon stays in [-180, 180].
	if lon > 180 {
		lon -= 360
	} else if lon < -180 {
		lon += 360
	}
	return lat, roundTo(lon, 1e6)
}

func roundTo(v, scale float64) float64 {
	return math.Round(v*scale) / scale
}
