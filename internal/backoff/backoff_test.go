package backoff

import (
	"testing"
	"time"
)

// TestDelay_CappedDoublingWithJitter: none before the first attempt, then
// min doubling to max, each within ±20 %, never above max, with no
// overflow after many attempts.
func TestDelay_CappedDoublingWithJitter(t *testing.T) {
	minD, maxD := 100*time.Millisecond, time.Second
	if got := Delay(0, minD, maxD); got != 0 {
		t.Errorf("attempt 0: got %v, want 0 (the first attempt is immediate)", got)
	}
	for _, tt := range []struct {
		attempt int
		base    time.Duration
	}{
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, time.Second},
		{1000, time.Second},
	} {
		lo, hi := time.Duration(float64(tt.base)*0.8), min(time.Duration(float64(tt.base)*1.2), maxD)
		varied := false
		first := Delay(tt.attempt, minD, maxD)
		for range 50 {
			got := Delay(tt.attempt, minD, maxD)
			if got < lo || got > hi {
				t.Fatalf("attempt %d: got %v, want within [%v, %v]", tt.attempt, got, lo, hi)
			}
			varied = varied || got != first
		}
		if !varied {
			t.Errorf("attempt %d: 50 delays of %v, want jitter", tt.attempt, first)
		}
	}
}
