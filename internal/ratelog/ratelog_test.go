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
