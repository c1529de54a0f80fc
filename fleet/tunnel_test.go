package fleet

import (
	"testing"
	"time"
)

func TestFleet_TunnelBounds(t *testing.T) {
	tests := []struct {
		name             string
		min, max         time.Duration
		wantMin, wantMax int64 // ms
	}{
		{"defaults", 0, 0, 210_000, 360_000},
		{"short demo tunnels", 20 * time.Second, 40 * time.Second, 20_000, 40_000},
		{"max below min is raised", 30 * time.Second, 10 * time.Second, 30_000, 30_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Couriers: 20, Duration: hour, Seed: 5, TunnelFraction: 1, TunnelRate: 6,
				TunnelMin: tt.min, TunnelMax: tt.max}
			got := New(cfg).Config()
			if got.TunnelMin.Milliseconds() != tt.wantMin || got.TunnelMax.Milliseconds() != tt.wantMax {
				t.Fatalf("got tunnels %v–%v, want %d–%d ms", got.TunnelMin, got.TunnelMax, tt.wantMin, tt.wantMax)
			}
			silences := 0
			for id, s := range positions(mustCollect(t, cfg)) {
				for i := 1; i < len(s); i++ {
					// Without a tunnel a gap is at most 5 s + 20 %.
					gap := s[i].TS - s[i-1].TS
					if gap <= 6000 {
						continue
					}
					silences++
					if gap < tt.wantMin || gap > tt.wantMax {
						t.Errorf("%s: silence of %d ms, want %d–%d ms", id, gap, tt.wantMin, tt.wantMax)
					}
				}
			}
			if silences == 0 {
				t.Errorf("got no silences, want some")
			}
		})
	}
}
