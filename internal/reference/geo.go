package reference

import "math"

// earthRadiusM is the mean Earth radius the contract prescribes, in metres.
const earthRadiusM = 6371008.8

// haversine is the great-circle distance in metres.
func haversine(lat1, lon1, lat2, lon2 float64) float64 {
	rad := math.Pi / 180
	phi1, phi2 := lat1*rad, lat2*rad
	dPhi := (lat2 - lat1) * rad
	dLambda := (lon2 - lon1) * rad
	a := math.Sin(dPhi/2)*math.Sin(dPhi/2) +
		math.Cos(phi1)*math.Cos(phi2)*math.Sin(dLambda/2)*math.Sin(dLambda/2)
	// Rounding can push a just above 1 for antipodal points; asin would be NaN.
	a = math.Min(a, 1)
	return 2 * earthRadiusM * math.Asin(math.Sqrt(a))
}

// segment is the distance cur carries from its predecessor with MinMoveM 0
// (decision 5; with MinMoveM > 0 see filtered): an implied speed above MaxSpeedKmh is an outlier jump and
// counts 0; with MaxSpeedKmh 0 too it is plain haversine (contract §3).
func segment(pred, cur *position, p Params) float64 {
	d := haversine(pred.lat, pred.lon, cur.lat, cur.lon)
	dt := float64(cur.ts - pred.ts) // > 0: accepted positions never share a ts
	if p.MaxSpeedKmh > 0 && d*3600/dt > p.MaxSpeedKmh {
		return 0
	}
	return d
}
