package wal

import (
	"testing"
	"time"
)

// feed counts rate entries per second into a, in commits every step, for
// long enough that the estimate has settled, and returns the last time.
func feed(a *arrivals, start time.Time, rate float64, step time.Duration) time.Time {
	now := start
	per := rate * step.Seconds()
	carry := 0.0
	for range int(2 * time.Second / step) {
		now = now.Add(step)
		carry += per
		n := int(carry)
		carry -= float64(n)
		a.add(now, n)
	}
	return now
}

func TestArrivals_Linger(t *testing.T) {
	const interval = 40 * time.Millisecond
	tests := []struct {
		name string
		rate float64 // entries per second, steady
		step time.Duration
		want time.Duration // ±10 %
	}{
		{"nothing yet", 0, time.Millisecond, 0},
		{"trickle: 4 entries per interval", 100, 10 * time.Millisecond, 0},
		{"250/s: 10 per interval, below 16", 250, 4 * time.Millisecond, 0},
		{"1 000/s: 256 entries take longer than the interval", 1000, time.Millisecond, interval},
		{"5 000/s: capped at the interval", 5000, 2 * time.Millisecond, interval},
		{"12 800/s: 256 entries in 20 ms", 12800, time.Millisecond, 20 * time.Millisecond},
		{"64 000/s: 256 entries in 4 ms", 64000, time.Millisecond, 4 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a arrivals
			now := feed(&a, time.Unix(1000, 0), tt.rate, tt.step)
			got := a.linger(now, interval)
			lo, hi := tt.want-tt.want/10, tt.want+tt.want/10
			if got < lo || got > hi {
				t.Errorf("linger after a steady %v/s: got %v, want %v", tt.rate, got, tt.want)
			}
		})
	}
}

func TestArrivals_ForgetsABurst(t *testing.T) {
	var a arrivals
	t0 := time.Unix(1000, 0)
	a.add(t0, 500)
	if got := a.linger(t0, 10*time.Millisecond); got <= 0 {
		t.Fatalf("right after 500 entries: got linger %v, want a wait", got)
	}
	// A second later the burst is forgotten: a lone entry goes at once.
	if got := a.linger(t0.Add(time.Second), 10*time.Millisecond); got != 0 {
		t.Errorf("a second after the burst: got linger %v, want 0", got)
	}
}
