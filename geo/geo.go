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

// Filter decides how much of the distance between two consecutive fixes is
// real movement. The rules depend on the two fixes only, never on older
// history, so a segment is a pure function of its endpoints and an
// out-of-order fix can be inserted by recomputing two segments (the SQL
// "LAG, then sum" definition of contract §3 stays exact).
//
// With both fields 0 the filter is off and a segment is plain haversine.
type Filter struct {
	// MinMoveM: when > 0, a segment shorter than max(MinMoveM, accuracy of
	// either fix) is GPS jitter and counts 0 m. Default 10.
	MinMoveM float64
	// MaxSpeedKmh: when > 0, a segment implying a higher speed is an outlier
	// jump and counts 0 m. Default 150.
	MaxSpeedKmh float64
}

// Segment returns the metres that cur adds after its predecessor pred
// (pred.TS < cur.TS).
func (f Filter) Segment(pred, cur Fix) float64 {
	d := Haversine(pred.Lat, pred.Lon, cur.Lat, cur.Lon)
	if f.MaxSpeedKmh > 0 {
		dt := float64(cur.TS - pred.TS)
		if dt <= 0 || d*3600/dt > f.MaxSpeedKmh {
			return 0
		}
	}
	if f.MinMoveM > 0 {
		th := f.MinMoveM
		if a := pred.Acc; a > th {
			th = a
		}
		if a := cur.Acc; a > th {
			th = a
		}
		if d < th {
			return 0
		}
	}
	return d
}

// Cell returns the H3 cell holding the point at resolution res (0..15).
// It costs about 1.5 µs: call it once per emitted result, never per position.
func Cell(lat, lon float64, res int) h3.Cell {
	return h3.LatLngToCell(h3.NewLatLng(lat, lon), res)
}
