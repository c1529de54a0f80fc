package geo

import (
	"math"
	"testing"
)

func TestHaversine(t *testing.T) {
	// One degree of latitude on the contract's sphere is R*pi/180.
	want := EarthRadiusM * math.Pi / 180
	if got := Haversine(10, 20, 11, 20); math.Abs(got-want) > 1e-6 {
		t.Fatalf("1 degree of latitude: got %v, want %v", got, want)
	}
	// A quarter of the equator.
	want = EarthRadiusM * math.Pi / 2
	if got := Haversine(0, 0, 0, 90); math.Abs(got-want) > 1e-6 {
		t.Fatalf("quarter equator: got %v, want %v", got, want)
	}
	if got := Haversine(41.9794, 2.8214, 41.9794, 2.8214); got != 0 {
		t.Fatalf("same point: got %v, want 0", got)
	}
}

func TestFilter_Segment(t *testing.T) {
	// 0.001 degree of latitude is ~111.2 m.
	a := Fix{TS: 0, Lat: 41, Lon: 2}
	b := Fix{TS: 10_000, Lat: 41.001, Lon: 2}
	d := Haversine(a.Lat, a.Lon, b.Lat, b.Lon) // ~111 m in 10 s = ~40 km/h
	cases := []struct {
		name string
		f    Filter
		a, b Fix
		want float64
	}{
		{"off", Filter{}, a, b, d},
		{"accuracy ignored", Filter{}, a, Fix{TS: b.TS, Lat: b.Lat, Lon: b.Lon, Acc: 150}, d},
		{"too fast", Filter{MaxSpeedKmh: 39}, a, b, 0},
		{"fast enough", Filter{MaxSpeedKmh: 41}, a, b, d},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.f.Segment(c.a, c.b); got != c.want {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestCell(t *testing.T) {
	c := Cell(41.9794, 2.8214, 9)
	if !c.IsValid() || c.Resolution() != 9 {
		t.Fatalf("got cell %v (valid %v, res %d), want a valid res-9 cell", c, c.IsValid(), c.Resolution())
	}
	if Cell(41.9794, 2.8214, 9) != Cell(41.97941, 2.82141, 9) {
		t.Fatalf("points 1 m apart should share a res-9 cell")
	}
}

func TestAccuracy_CentimetresCapped(t *testing.T) {
	for _, c := range []struct {
		in, want float64
		cm       uint16
	}{
		{0, 0, 0},
		{3.9, 3.9, 390}, // as phones send it: unchanged
		{7.5, 7.5, 750},
		{3.924, 3.92, 392},
		{3.925, 3.93, 393}, // half away from zero (3.925*100 rounds up in float64)
		{0.004, 0, 0},
		{655.35, 655.35, 65535},
		{655.354, 655.35, 65535},
		{1e300, 655.35, 65535},
	} {
		if got := Accuracy(c.in); got != c.want {
			t.Errorf("Accuracy(%v) = %v, want %v", c.in, got, c.want)
		}
		if got := AccuracyCM(c.in); got != c.cm {
			t.Errorf("AccuracyCM(%v) = %v, want %v", c.in, got, c.cm)
		}
		if got := Accuracy(Accuracy(c.in)); got != c.want {
			t.Errorf("Accuracy(Accuracy(%v)) = %v, want %v", c.in, got, c.want)
		}
	}
}
