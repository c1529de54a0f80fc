// Package geo holds the geometry edgeproc needs: great-circle distance, the
// GPS jitter and outlier rules that turn two consecutive fixes into a
// distance segment, and H3 cells for results.
package geo

import (
	"math"

	"github.com/uber/h3-go/v4"
)

// EarthRadiusM is the mean Earth radius the contract fixes for haversine.
const EarthRadiusM = 6371008.8

const rad = math.Pi / 180

// Haversine returns the great-circle distance in metres between two points
// given in degrees.
func Haversine(lat1, lon1, lat2, lon2 float64) float64 {
	p1, p2 := lat1*rad, lat2*rad
	dLat := (lat2 - lat1) * rad
	dLon := (lon2 - lon1) * rad
	s1, s2 := math.Sin(dLat/2), math.Sin(dLon/2)
	a := s1*s1 + math.Cos(p1)*math.Cos(p2)*s2*s2
	return 2 * EarthRadiusM * math.Asin(math.Sqrt(min(a, 1))) // rounding can push a past 1 for antipodes
}

// Fix is one accepted GPS position of a courier.
type Fix struct {
	TS       int64   // event time, ms
	Lat, Lon float64 // degrees
	Acc      float64 // reported accuracy in metres; 0 when unknown
}

// Filter turns a courier's fixes, in timestamp order, into distance
// (contract §5, rules in docs/semantics.md). Its state is a Track, fed one
// fix at a time by Step; with both fields 0 the filter is off and each fix
// adds plain haversine from the previous one (contract §3).
type Filter struct {
	// MinMoveM: when > 0, the radius in metres of the anchor scheme (Step):
	// movement that stays within max(MinMoveM, the fix's accuracy) of the
	// anchor is GPS jitter, and an isolated fix out of it is a spike.
	// Default 15.
	MinMoveM float64
	// MaxSpeedKmh: when > 0, a segment implying a higher speed is an
	// outlier jump and counts 0 m. Default 150.
	MaxSpeedKmh float64
}

// On reports whether any filter is on.
func (f Filter) On() bool { return f.MinMoveM > 0 || f.MaxSpeedKmh > 0 }

// Segment returns the metres that cur adds after its predecessor pred
// (pred.TS < cur.TS) by the per-pair rule Step uses with MinMoveM 0:
// haversine, or 0 when it implies more than MaxSpeedKmh.
func (f Filter) Segment(pred, cur Fix) float64 {
	d := Haversine(pred.Lat, pred.Lon, cur.Lat, cur.Lon)
	if f.MaxSpeedKmh > 0 {
		dt := float64(cur.TS - pred.TS)
		if dt <= 0 || d*3600/dt > f.MaxSpeedKmh {
			return 0
		}
	}
	return d
}

// MaxAccuracyCM is the largest accuracy, in centimetres, the filter tells
// apart (655.35 m): a fix reported less accurate than that is taken to be
// that accurate, already far beyond any jitter radius.
const MaxAccuracyCM = 1<<16 - 1

// AccuracyCM is a reported accuracy_m (finite, >= 0) as the filter takes
// it, in whole centimetres, rounded half away from zero and capped at
// MaxAccuracyCM: a courier's fixes keep it in 16 bits (see window), and
// GPS accuracy means nothing below a centimetre.
func AccuracyCM(a float64) uint16 { return uint16(min(math.Round(a*100), MaxAccuracyCM)) }

// Accuracy is a reported accuracy_m (finite, >= 0) as the filter takes it:
// AccuracyCM in metres. Accuracy(Accuracy(a)) == Accuracy(a).
func Accuracy(a float64) float64 { return float64(AccuracyCM(a)) / 100 }

// Cell returns the H3 cell holding the point at resolution res (0..15).
// It costs about 1.5 µs: call it once per emitted result, never per position.
func Cell(lat, lon float64, res int) h3.Cell {
	return h3.LatLngToCell(h3.NewLatLng(lat, lon), res)
}
