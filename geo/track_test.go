package geo

import (
	"math"
	"testing"
)

// at returns a fix ts seconds in, north and east metres from 41°N 2°E.
func at(ts int64, north, east float64) Fix {
	const m = EarthRadiusM * math.Pi / 180
	return Fix{TS: ts * 1000, Lat: 41 + north/m, Lon: 2 + east/(m*math.Cos(41*math.Pi/180))}
}

func dist(a, b Fix) float64 { return Haversine(a.Lat, a.Lon, b.Lat, b.Lon) }

func TestFilter_Step(t *testing.T) {
	on := Filter{MinMoveM: 20, MaxSpeedKmh: 150}
	walk := []Fix{at(0, 0, 0), at(5, 7, 0), at(10, 14, 0), at(15, 21, 0), at(20, 28, 0), at(25, 35, 0), at(30, 42, 0), at(35, 49, 0)}
	cases := []struct {
		name  string
		f     Filter
		fixes []Fix
		want  []float64 // each fix's segment
	}{
		{"off: haversine from the previous fix", Filter{}, walk[:3],
			[]float64{0, dist(walk[0], walk[1]), dist(walk[1], walk[2])}},
		{"off with max speed: per pair", Filter{MaxSpeedKmh: 6}, []Fix{at(0, 0, 0), at(5, 7, 0), at(10, 100, 0)},
			[]float64{0, dist(at(0, 0, 0), at(5, 7, 0)), 0}},
		{"jitter within the radius counts nothing", on, []Fix{at(0, 0, 0), at(5, 8, 3), at(10, -5, 9), at(15, 12, -12)},
			[]float64{0, 0, 0, 0}},
		// 21 m leaves the radius, 28 m confirms it: the anchor moves to the
		// 21 m fix; 42 m leaves the new radius, 49 m confirms.
		{"walking: anchor to anchor once confirmed", on, walk,
			[]float64{0, 0, 0, 0, dist(walk[0], walk[3]), 0, 0, dist(walk[3], walk[6])}},
		{"the fix's accuracy widens the radius", on, []Fix{at(0, 0, 0), {TS: 5000, Lat: at(0, 25, 0).Lat, Lon: 2, Acc: 30}},
			[]float64{0, 0}},
		{"a spike is dropped", on, []Fix{at(0, 0, 0), at(5, 0, 100), at(10, 5, 0), at(15, 6, 0)},
			[]float64{0, 0, 0, 0}},
		{"a spike off a moving path is dropped, the path counts", on,
			[]Fix{at(0, 0, 0), at(5, 40, 0), at(10, 80, 300), at(15, 120, 0), at(20, 160, 0)},
			[]float64{0, 0, dist(at(0, 0, 0), at(5, 40, 0)), 0, dist(at(5, 40, 0), at(15, 120, 0))}},
		{"a corner is not a spike", on, []Fix{at(0, 0, 0), at(5, 40, 0), at(10, 40, 40)},
			[]float64{0, 0, dist(at(0, 0, 0), at(5, 40, 0))}},
		{"a confirmed jump faster than max speed counts nothing", on, []Fix{at(0, 0, 0), at(5, 3000, 0), at(10, 3010, 0), at(15, 3050, 0), at(20, 3080, 0)},
			[]float64{0, 0, 0, 0, dist(at(5, 3000, 0), at(15, 3050, 0))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tr Track
			for i, x := range c.fixes {
				if got := c.f.Step(&tr, x); math.Abs(got-c.want[i]) > 1e-9 {
					t.Fatalf("fix %d: got %v m, want %v", i, got, c.want[i])
				}
			}
		})
	}
}

// TestFilter_StepSettles: a courier that stays put settles on the mean of
// its fixes and needs SettledFactor times the radius to leave it.
func TestFilter_StepSettles(t *testing.T) {
	f := Filter{MinMoveM: 20}
	var tr Track
	for i := range SettleFixes {
		e := 4.0
		if i%2 == 0 {
			e = -4
		}
		f.Step(&tr, at(int64(5*i), 0, e))
	}
	if !tr.Settled() {
		t.Fatalf("after %d fixes within the radius: not settled (near %d)", SettleFixes, tr.Near)
	}
	if lat, lon := tr.anchor(); dist(Fix{Lat: lat, Lon: lon}, at(0, 0, 0)) > 0.01 {
		t.Fatalf("settled anchor %v,%v: want the fixes' mean, 41,2", lat, lon)
	}
	// 25 m: out of 20 m but within SettledFactor x 20 m.
	for i := range 3 {
		if got := f.Step(&tr, at(int64(100+5*i), 25, 0)); got != 0 || tr.HasPending {
			t.Fatalf("25 m from a settled anchor: got %v m, pending %v; want 0, none", got, tr.HasPending)
		}
	}
	// The anchor is now the mean of all 11 fixes: 75/11 m north.
	// Leaving a stop takes the pending fix and two more out of the radius.
	f.Step(&tr, at(200, 60, 0))
	if got := f.Step(&tr, at(205, 65, 0)); got != 0 {
		t.Fatalf("one fix after the pending one: got %v m, want 0", got)
	}
	if got, want := f.Step(&tr, at(210, 70, 0)), 60-75.0/11; math.Abs(got-want) > 0.01 {
		t.Fatalf("leaving a settled anchor: got %v m, want %v", got, want)
	}
}
