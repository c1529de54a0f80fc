package gpsnoise

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/km0/edgeproc/geo"
)

const gpx = `<?xml version="1.0"?>
<gpx version="1.1" xmlns="http://www.topografix.com/GPX/1/1"><trk><trkseg>
 <trkpt lat="41.0" lon="2.0"><time>2024-01-01T00:00:10Z</time></trkpt>
 <trkpt lat="41.1" lon="2.1"><time>2024-01-01T00:00:00Z</time></trkpt>
 <trkpt lat="41.5" lon="2.5"></trkpt>
 <trkpt lat="41.2" lon="2.2"><time>2024-01-01T00:00:10Z</time></trkpt>
</trkseg></trk></gpx>`

func TestReadGPX(t *testing.T) {
	pts, err := ReadGPX(strings.NewReader(gpx))
	if err != nil {
		t.Fatal(err)
	}
	// In time order; the point without a time and the repeat of 00:00:10
	// are left out (the first of the repeats stays).
	t0 := int64(1704067200000)
	want := []Point{{t0, 41.1, 2.1}, {t0 + 10_000, 41.0, 2.0}}
	if len(pts) != len(want) || pts[0] != want[0] || pts[1] != want[1] {
		t.Fatalf("got %v, want %v", pts, want)
	}
	if _, err := ReadGPX(strings.NewReader(`<gpx><trk><trkseg><trkpt lat="1" lon="2"><time>yesterday</time></trkpt></trkseg></trk></gpx>`)); err == nil {
		t.Fatalf("a bad time: want an error")
	}
}

func TestResample(t *testing.T) {
	got := Resample([]Point{{0, 40, 2}, {10_000, 41, 3}, {12_000, 41, 3}}, 5_000)
	want := []Point{{0, 40, 2}, {5_000, 40.5, 2.5}, {10_000, 41, 3}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].TS != want[i].TS || math.Abs(got[i].Lat-want[i].Lat) > 1e-12 || math.Abs(got[i].Lon-want[i].Lon) > 1e-12 {
			t.Fatalf("point %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

func TestRealTraces(t *testing.T) {
	trs, err := RealTraces(5_000)
	if err != nil {
		t.Fatal(err)
	}
	if len(trs) != 2 {
		t.Fatalf("got %d traces, want the 2 of testdata/stoplight", len(trs))
	}
	for _, tr := range trs {
		if n := len(tr.Points); n < 200 {
			t.Errorf("%s: %d points at 1 per 5 s, want >= 200", tr.Name, n)
		}
	}
}

// TestNoise_Apply checks the model's statistics over a long parked trace:
// the error's spread per axis, its correlation after one step, and the
// share of spikes.
func TestNoise_Apply(t *testing.T) {
	n := Noise{SigmaM: 6, TauS: 50, AccuracyM: 10}
	pts := Synthetic(rand.New(rand.NewPCG(1, 1)), Course{}, 41, 2, 0, 5_000, 5_000*200_000)
	fs := n.Apply(rand.New(rand.NewPCG(2, 2)), pts)
	var sum2, lag float64
	north := make([]float64, len(fs))
	for i, f := range fs {
		north[i] = (f.Lat - 41) * mPerDegLat
		sum2 += north[i] * north[i]
		if i > 0 {
			lag += north[i] * north[i-1]
		}
		if f.Acc != 10 {
			t.Fatalf("fix %d: accuracy %v, want 10", i, f.Acc)
		}
	}
	sigma := math.Sqrt(sum2 / float64(len(fs)))
	rho := lag / sum2
	if math.Abs(sigma-6) > 0.3 || math.Abs(rho-math.Exp(-0.1)) > 0.02 {
		t.Fatalf("got sigma %.2f m, lag-1 correlation %.3f; want 6 and %.3f", sigma, rho, math.Exp(-0.1))
	}
	spiky := Noise{SpikeRate: 0.02, SpikeSigmaM: 30}.Apply(rand.New(rand.NewPCG(3, 3)), pts)
	spikes := 0
	for _, f := range spiky {
		if geo.Haversine(41, 2, f.Lat, f.Lon) > 0 {
			spikes++
		}
	}
	if got := float64(spikes) / float64(len(pts)); math.Abs(got-0.02) > 0.002 {
		t.Fatalf("spike share %.4f, want 0.02", got)
	}
}

// FuzzReadGPX: no input makes ReadGPX panic, and what it returns is in
// strictly increasing time order.
func FuzzReadGPX(f *testing.F) {
	f.Add([]byte(gpx))
	f.Add([]byte(`<gpx><trk><trkseg><trkpt lat="x"/></trkseg></trk></gpx>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		pts, err := ReadGPX(strings.NewReader(string(b)))
		if err != nil {
			return
		}
		for i := 1; i < len(pts); i++ {
			if pts[i].TS <= pts[i-1].TS {
				t.Fatalf("points %d and %d out of order: %v", i-1, i, pts)
			}
		}
		if len(pts) > 0 && pts[len(pts)-1].TS-pts[0].TS < 86_400_000 { // a day at most: bounded output
			Resample(pts, 5_000)
		}
	})
}
