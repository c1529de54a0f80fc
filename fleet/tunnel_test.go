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

// A buffered tunnel delays positions, it does not change them: the fleet
// is TunnelOnTime's, position for position, and the positions of a
// tunnel arrive together after it, minutes late.
func TestFleet_BufferedTunnelsDeliverTheOnTimePositionsLate(t *testing.T) {
	cfg := Config{Couriers: 20, Duration: hour, Seed: 7, TunnelFraction: 1, TunnelRate: 6, TunnelMin: time.Minute, TunnelMax: 6 * time.Minute}
	cfg.Tunnel = TunnelOnTime
	onTime := positions(mustCollect(t, cfg))
	cfg.Tunnel = TunnelBuffered
	buffered := positions(mustCollect(t, cfg))
	late := 0
	for id, want := range onTime {
		got := buffered[id]
		if len(got) != len(want) {
			t.Fatalf("%s: %d positions buffered, %d on time", id, len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.TS != w.TS || g.Lat != w.Lat || g.Lon != w.Lon || g.Arrival < w.Arrival {
				t.Fatalf("%s position %d: buffered %+v, on time %+v", id, i, g, w)
			}
			if g.Arrival-g.TS > time.Minute.Milliseconds() {
				late++
			}
			if i > 0 && g.TS-got[i-1].TS > 6000 {
				t.Errorf("%s: a silence of %d ms; a buffered tunnel keeps the fixes", id, g.TS-got[i-1].TS)
			}
		}
	}
	if late == 0 {
		t.Fatalf("no position arrived more than a minute late")
	}
	t.Logf("%d positions arrived more than a minute late", late)
}

// LateRate delays a fraction of the positions by 1-4 minutes and changes
// nothing else.
func TestFleet_LateRateDelaysAFractionOfThePositions(t *testing.T) {
	cfg := Config{Couriers: 50, Duration: hour, Seed: 3}
	onTime := positions(mustCollect(t, cfg))
	cfg.LateRate = 0.10
	late, total := 0, 0
	for id, got := range positions(mustCollect(t, cfg)) {
		want := onTime[id]
		if len(got) != len(want) {
			t.Fatalf("%s: %d positions, want %d", id, len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.TS != w.TS || g.Lat != w.Lat || g.Lon != w.Lon {
				t.Fatalf("%s position %d: %+v, want %+v", id, i, g, w)
			}
			total++
			if d := g.Arrival - w.Arrival; d != 0 {
				late++
				if d < 60_000 || d > 240_000 {
					t.Fatalf("%s position %d delivered %d ms later, want 1-4 min", id, i, d)
				}
			}
		}
	}
	if f := float64(late) / float64(total); f < 0.09 || f > 0.11 {
		t.Fatalf("%d of %d positions late (%.3f), want about 0.10", late, total, f)
	}
}
