package fleet

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestDelayQuantile_Knots(t *testing.T) {
	tests := []struct {
		u    float64
		want time.Duration
	}{
		{-1, 100 * time.Millisecond},
		{math.NaN(), 100 * time.Millisecond},
		{0, 100 * time.Millisecond},
		{0.5, 1200 * time.Millisecond},
		{0.95, 8 * time.Second},
		{0.99, 45 * time.Second},
		{0.999, 4 * time.Minute},
		{1, 6 * time.Minute},
		{2, 6 * time.Minute},
		// log-linear between knots: halfway from p50 to p95 in u is the
		// geometric mean of 1.2 s and 8 s.
		{0.725, time.Duration(math.Sqrt(1.2*8) * 1e9)},
	}
	for _, tt := range tests {
		got := DelayQuantile(tt.u)
		if d := got - tt.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("DelayQuantile(%v) = %v, want %v", tt.u, got, tt.want)
		}
	}
}

func TestDelayQuantile_Monotonic(t *testing.T) {
	prev := DelayQuantile(0)
	for i := 1; i <= 100_000; i++ {
		u := float64(i) / 100_000
		got := DelayQuantile(u)
		if got < prev {
			t.Fatalf("DelayQuantile(%v) = %v < DelayQuantile(previous) = %v", u, got, prev)
		}
		prev = got
	}
}

// TestFleet_DelayProfile checks the delays the fleet actually draws (arrival
// minus event time, in whole ms) against the measured profile.
func TestFleet_DelayProfile(t *testing.T) {
	evs := mustCollect(t, Config{Couriers: 140, Duration: 2 * hour, Seed: 7})
	var d []float64
	for _, e := range evs {
		if e.Raw == nil && !e.Duplicate {
			d = append(d, float64(e.Arrival-e.TS))
		}
	}
	if len(d) < 200_000 {
		t.Fatalf("got %d samples, want ≥ 200000", len(d))
	}
	slices.Sort(d)
	tests := []struct {
		q, wantMs, tol float64
	}{
		{0.50, 1200, 0.03},
		{0.95, 8000, 0.03},
		{0.99, 45000, 0.05},
		{0.999, 240000, 0.20},
	}
	for _, tt := range tests {
		got := d[int(tt.q*float64(len(d)))]
		if math.Abs(got-tt.wantMs) > tt.tol*tt.wantMs {
			t.Errorf("p%v delay = %v ms, want %v ms ± %v%%", tt.q*100, got, tt.wantMs, tt.tol*100)
		}
	}
	if d[0] < 100 || d[len(d)-1] > 360_000 {
		t.Errorf("delay range = [%v, %v] ms, want within [100, 360000]", d[0], d[len(d)-1])
	}
}
