package ratelog

import (
	"testing"
	"time"
)

func TestLimiter_CountsSuppressed(t *testing.T) {
	l := Limiter{Every: time.Hour}
	if ok, n := l.Allow(); !ok || n != 0 {
		t.Fatalf("first: got %v %d, want true 0", ok, n)
	}
	for i := 0; i < 3; i++ {
		if ok, _ := l.Allow(); ok {
			t.Fatalf("within the period: got allowed, want suppressed")
		}
	}
	l.mu.Lock()
	l.last = time.Now().Add(-2 * time.Hour)
	l.mu.Unlock()
	if ok, n := l.Allow(); !ok || n != 3 {
		t.Fatalf("after the period: got %v %d, want true 3", ok, n)
	}
}

func TestBackoff_FirstThenOnePerStep(t *testing.T) {
	now := time.Unix(0, 0)
	b := Backoff{Min: time.Second, Max: 4 * time.Second, now: func() time.Time { return now }}
	// A failure every 250 ms for 20 s: let through at 0, 1, 3, 7, 11,
	// 15, 19 s (steps 1, 2, 4, 4, ...), each with the count held back.
	type line struct {
		at         time.Duration
		suppressed int
	}
	var got []line
	for at := time.Duration(0); at <= 20*time.Second; at += 250 * time.Millisecond {
		now = time.Unix(0, 0).Add(at)
		if ok, n := b.Allow(); ok {
			got = append(got, line{at, n})
		}
	}
	want := []line{{0, 0}, {time.Second, 3}, {3 * time.Second, 7}, {7 * time.Second, 15}, {11 * time.Second, 15}, {15 * time.Second, 15}, {19 * time.Second, 15}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	// 19.25 s to 20 s were held back.
	if n := b.Reset(); n != 4 {
		t.Errorf("Reset: got %d held back, want 4", n)
	}
	if ok, n := b.Allow(); !ok || n != 0 {
		t.Errorf("after Reset: got %v %d, want the first line at once", ok, n)
	}
}
