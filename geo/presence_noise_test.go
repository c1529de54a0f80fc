package geo_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/gpsnoise"
)

// gironaOutline returns the area and its outline's vertices.
func gironaOutline(t *testing.T) (*geo.Area, [][2]float64) {
	t.Helper()
	a, err := geo.LoadArea("../demo/girona-area.geojson", geo.AreaResolution)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../demo/girona-area.geojson")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Features []struct {
			Geometry struct{ Coordinates [][][2]float64 }
		}
		Geometry struct{ Coordinates [][][2]float64 }
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	ring := doc.Geometry.Coordinates
	if len(doc.Features) > 0 {
		ring = doc.Features[0].Geometry.Coordinates
	}
	if len(ring) == 0 {
		t.Fatal("no ring in girona-area.geojson")
	}
	return a, ring[0][:len(ring[0])-1]
}

func moves(a *geo.Area, fs []geo.Fix) int {
	var p geo.Presence
	n := 0
	for _, x := range fs {
		if _, _, ok := p.Step(a, x); ok {
			n++
		}
	}
	return n
}

// TestPresence_PhoneNoiseDoesNotFlap measures the service area's rule
// under the phone model of gpsnoise (σ 6 m correlated over 50 s, 2 %
// spikes of σ 30 m) plus 2-5 km jumps, one fix every 5 s: a courier
// parked on the outline for 10 hours at each of its vertices moves at
// most once an hour, and one driving straight across the outline at each
// vertex (3 km each way at 8 m/s) moves exactly as often as its true path
// does: once, where the true path crosses once.
func TestPresence_PhoneNoiseDoesNotFlap(t *testing.T) {
	a, outline := gironaOutline(t)
	rng := rand.New(rand.NewPCG(9, 24))
	const step, hour = 5_000, 3_600_000
	parkedMoves, parkedHours, worst := 0, 0, 0
	crossings, once := 0, 0
	var cLat, cLon float64
	for _, v := range outline {
		cLon += v[0] / float64(len(outline))
		cLat += v[1] / float64(len(outline))
	}
	for _, v := range outline {
		lon, lat := v[0], v[1]
		pts := gpsnoise.Synthetic(rng, gpsnoise.Course{}, lat, lon, 1_767_225_600_000, step, 10*hour)
		fs := gpsnoise.Phone.Apply(rng, pts)
		gpsnoise.Jump(rng, fs, 30) // three an hour
		m := moves(a, fs)
		parkedMoves += m
		parkedHours += 10
		worst = max(worst, m)
		if m > 10 {
			t.Errorf("parked on the outline at %.5f,%.5f: %d moves in 10 h, want at most 1 an hour", lat, lon, m)
		}

		// From 3 km inside to 3 km outside, along the line from the
		// outline's centre through the vertex.
		dLat, dLon := lat-cLat, (lon-cLon)*math.Cos(lat*math.Pi/180)
		norm := math.Hypot(dLat, dLon)
		dLat, dLon = dLat/norm, dLon/norm/math.Cos(lat*math.Pi/180)
		const km = 1 / 111.2
		var drive []gpsnoise.Point
		for i, n := 0, 6000/40; i <= n; i++ { // 40 m a fix: 8 m/s
			f := -3*km + 6*km*float64(i)/float64(n)
			drive = append(drive, gpsnoise.Point{TS: 1_767_225_600_000 + int64(i)*step, Lat: lat + f*dLat, Lon: lon + f*dLon})
		}
		truth := moves(a, gpsnoise.Clean(drive, 10))
		noisy := gpsnoise.Phone.Apply(rng, drive)
		gpsnoise.Jump(rng, noisy, 2)
		if got := moves(a, noisy); got != truth {
			t.Errorf("driving across at %.5f,%.5f: %d moves with phone noise, %d on the true path", lat, lon, got, truth)
		}
		crossings++
		if truth == 1 {
			once++
		}
	}
	if once < crossings/2 {
		t.Errorf("only %d of %d drives cross the outline once: the test drives are meant to", once, crossings)
	}
	t.Logf("parked on the outline: %d moves in %d hours at %d vertices (at most %d in 10 h at one); driving across: %d of %d drives cross once, each gives as many moves as its true path",
		parkedMoves, parkedHours, len(outline), worst, once, crossings)
}
