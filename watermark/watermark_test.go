package watermark

import (
	"testing"

	"github.com/km0/edgeproc/internal/tmath"
)

func TestWatermark_BoundedDelay(t *testing.T) {
	w := New(45_000, 0, 60_000)
	if w.Current() != tmath.Never {
		t.Fatalf("start: got %d, want -inf", w.Current())
	}
	w.Observe(100_000)
	w.Observe(90_000) // older: no change
	if got := w.Current(); got != 55_000 {
		t.Fatalf("got %d, want 100000-45000", got)
	}
}

func TestWatermark_IdleAdvance(t *testing.T) {
	w := New(10_000, 30_000, 60_000)
	w.Idle(1_000_000)
	w.Received()
	w.Observe(500_000) // arrives at 1_000_000
	if w.Idle(1_029_999) {
		t.Fatalf("idle for 29.999 s of a 30 s timeout: want no advance")
	}
	if !w.Idle(1_030_000) {
		t.Fatalf("idle for the timeout: want an advance")
	}
	// max_ts + (now - arrival_of(max_ts)) - delay = 500000 + 30000 - 10000
	if got := w.Current(); got != 520_000 {
		t.Fatalf("got %d, want 520000", got)
	}
}

func TestWatermark_IdleNeedsClockAndTimeout(t *testing.T) {
	w := New(0, 0, 0)
	w.Idle(1)
	w.Received()
	w.Observe(5)
	if w.Idle(1 << 40) {
		t.Fatalf("idle_timeout 0 must never advance")
	}
	w = New(0, 10, 0)
	w.Received() // no clock: not a timed arrival
	w.Observe(5)
	if w.Idle(1 << 40) {
		t.Fatalf("a max_ts reached without a clock has no arrival: want no advance")
	}
}

func TestWatermark_Future(t *testing.T) {
	w := New(0, 0, 60_000)
	if w.Future(1 << 50) {
		t.Fatalf("no clock: nothing is in the future")
	}
	w.Idle(1_000_000)
	if w.Future(1_060_000) {
		t.Fatalf("exactly the skew ahead must be accepted")
	}
	if !w.Future(1_060_001) {
		t.Fatalf("skew + 1 ms ahead must be rejected")
	}
}

func TestWatermark_ListenRestartsTheIdleClock(t *testing.T) {
	w := New(10_000, 30_000, 60_000)
	w.Idle(1_000_000)
	w.Received()
	w.Observe(995_000) // arrives at 1_000_000
	// Deaf from 1_000_000 to 1_100_000, listening again from there.
	w.Listen(1_100_000)
	if _, ok := w.IdleAt(1_129_999); ok {
		t.Fatalf("29.999 s after the listen: want no idle advance")
	}
	if w.Idle(1_129_999) {
		t.Fatalf("Idle advanced 29.999 s after the listen")
	}
	v, ok := w.IdleAt(1_130_000)
	// max_ts + (now - arrival_of(max_ts)) - delay: the rule's formula,
	// only its start moved.
	if want := int64(995_000 + 130_000 - 10_000); !ok || v != want {
		t.Fatalf("IdleAt(1_130_000) = %d, %v; want %d, true", v, ok, want)
	}
	if w.Current() != 985_000 {
		t.Fatalf("IdleAt moved the watermark to %d", w.Current())
	}
	if !w.Idle(1_130_000) || w.Current() != v {
		t.Fatalf("Idle at the timeout: got %d, want %d", w.Current(), v)
	}
}

func TestWatermark_ListenNeverMovesTheIdleClockBack(t *testing.T) {
	w := New(0, 100, 0)
	w.Idle(1_000)
	w.Received()
	w.Observe(1_000)
	w.Listen(900) // an older listen changes nothing
	if _, ok := w.IdleAt(1_099); ok {
		t.Fatalf("idle before the timeout after the last message")
	}
	if _, ok := w.IdleAt(1_100); !ok {
		t.Fatalf("want the idle rule to apply 100 ms after the last message")
	}
}

func TestWatermark_EffectiveTimestamp(t *testing.T) {
	for _, tt := range []struct {
		name      string
		ts, want  int64
		wantMaxTS int64
	}{
		{"exactly at the clock", 1_000_000, 1_000_000 - 45_000, 1_000_000},
		{"1 ms ahead counts at the clock", 1_000_001, 1_000_000 - 45_000, 1_000_000},
		{"a minute ahead counts at the clock", 1_060_000, 1_000_000 - 45_000, 1_000_000},
		{"behind the clock counts as itself", 999_999, 999_999 - 45_000, 999_999},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := New(45_000, 0, 60_000)
			w.Idle(1_000_000)
			w.Received()
			w.Observe(tt.ts)
			if w.Current() != tt.want || w.MaxTS() != tt.wantMaxTS {
				t.Errorf("wm %d max_ts %d, want %d and %d", w.Current(), w.MaxTS(), tt.want, tt.wantMaxTS)
			}
		})
	}
	w := New(45_000, 0, 60_000) // no clock yet: the timestamp as it is
	w.Observe(1 << 50)
	if w.MaxTS() != 1<<50 {
		t.Errorf("without a clock: max_ts %d, want %d", w.MaxTS(), int64(1<<50))
	}
}
