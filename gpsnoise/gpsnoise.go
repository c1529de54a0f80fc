// Package gpsnoise makes the traces the distance benchmark runs on: courier
// paths whose truth is known (synthetic, or a real GPX track taken as
// truth), sampled once every few seconds, and a phone-GPS noise model to
// add to them.
package gpsnoise

import (
	"math"
	"math/rand/v2"

	"github.com/km0/edgeproc/geo"
)

// Point is a true position of a courier.
type Point struct {
	TS       int64   // ms
	Lat, Lon float64 // degrees
}

// Noise is the phone-GPS error model: per axis an autocorrelated
// (first-order Gauss-Markov) error, plus rare independent spikes.
type Noise struct {
	SigmaM      float64 // standard deviation per axis of the slow error, m
	TauS        float64 // its correlation time, s
	SpikeRate   float64 // fraction of fixes with a spike
	SpikeSigmaM float64 // standard deviation per axis of a spike, m
	AccuracyM   float64 // accuracy_m the phone reports on every fix
}

// Phone is the phone-GPS model the distance filter's defaults are chosen
// against (cmd/noisebench, docs/semantics.md): σ 6 m per axis correlated
// over ~50 s, accuracy_m 10, 2 % of fixes with a spike of σ 30 m per axis.
var Phone = Noise{SigmaM: 6, TauS: 50, SpikeRate: 0.02, SpikeSigmaM: 30, AccuracyM: 10}

const mPerDegLat = geo.EarthRadiusM * math.Pi / 180

// offset returns p moved by north and east metres.
func offset(lat, lon, north, east float64) (float64, float64) {
	return lat + north/mPerDegLat, lon + east/(mPerDegLat*math.Cos(lat*math.Pi/180))
}

// Apply returns the fixes a phone reports along pts.
func (n Noise) Apply(rng *rand.Rand, pts []Point) []geo.Fix {
	out := make([]geo.Fix, len(pts))
	var en, ee float64
	for i, p := range pts {
		if i == 0 {
			en, ee = n.SigmaM*rng.NormFloat64(), n.SigmaM*rng.NormFloat64()
		} else {
			rho := math.Exp(-float64(p.TS-pts[i-1].TS) / 1000 / n.TauS)
			s := n.SigmaM * math.Sqrt(1-rho*rho)
			en = rho*en + s*rng.NormFloat64()
			ee = rho*ee + s*rng.NormFloat64()
		}
		dn, de := en, ee
		if rng.Float64() < n.SpikeRate {
			dn += n.SpikeSigmaM * rng.NormFloat64()
			de += n.SpikeSigmaM * rng.NormFloat64()
		}
		lat, lon := offset(p.Lat, p.Lon, dn, de)
		out[i] = geo.Fix{TS: p.TS, Lat: lat, Lon: lon, Acc: n.AccuracyM}
	}
	return out
}

// Course is a synthetic courier's motion.
type Course struct {
	SpeedMps float64 // 0: parked
	// TurnEveryS: the courier turns by ±90° at random intervals of about
	// this many seconds (city blocks); 0 never turns.
	TurnEveryS float64
}

// Synthetic returns a true path starting at (lat, lon) at t0, one point
// every stepMs for dur ms.
func Synthetic(rng *rand.Rand, c Course, lat, lon float64, t0, stepMs, durMs int64) []Point {
	var pts []Point
	heading := rng.Float64() * 2 * math.Pi
	nextTurn := c.TurnEveryS * (0.5 + rng.Float64())
	for t := int64(0); t <= durMs; t += stepMs {
		pts = append(pts, Point{TS: t0 + t, Lat: lat, Lon: lon})
		step := c.SpeedMps * float64(stepMs) / 1000
		lat, lon = offset(lat, lon, step*math.Cos(heading), step*math.Sin(heading))
		if c.TurnEveryS > 0 && float64(t)/1000 >= nextTurn {
			if rng.IntN(2) == 0 {
				heading += math.Pi / 2
			} else {
				heading -= math.Pi / 2
			}
			nextTurn += c.TurnEveryS * (0.5 + rng.Float64())
		}
	}
	return pts
}

// Jump moves count random fixes of fs (never the first or last) by a random
// 2-5 km: the GPS jumps of a phone that lost its fix for a moment.
func Jump(rng *rand.Rand, fs []geo.Fix, count int) {
	for range count {
		i := 1 + rng.IntN(len(fs)-2)
		d := 2000 + 3000*rng.Float64()
		a := rng.Float64() * 2 * math.Pi
		fs[i].Lat, fs[i].Lon = offset(fs[i].Lat, fs[i].Lon, d*math.Cos(a), d*math.Sin(a))
	}
}

// Clean returns the fixes of pts with no noise.
func Clean(pts []Point, acc float64) []geo.Fix {
	out := make([]geo.Fix, len(pts))
	for i, p := range pts {
		out[i] = geo.Fix{TS: p.TS, Lat: p.Lat, Lon: p.Lon, Acc: acc}
	}
	return out
}
