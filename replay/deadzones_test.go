package replay

import (
	"fmt"
	"testing"

	"github.com/km0/edgeproc/engine"
)

// deadZoneCases are TestReplay_ContractBoundaries's cases of the dead
// zones (docs/semantics.md): cfg()'s 60 s gap and wm = max_ts - 30 s,
// dead zones over 10-minute windows of resolution-8 cells. zb starts a
// dead-zone window; every position is at the same place unless a case
// moves it, so in one cell.
func deadZoneCases() []boundaryCase {
	const w = 600_000
	zb := (t0/w + 1) * w
	zones := func(cells int) func(*engine.Config) {
		return func(c *engine.Config) { c.DeadZoneWindow, c.DeadZoneResolution, c.DeadZoneCells = w, 8, cells }
	}
	return []boundaryCase{
		{
			// a's no_signal (last seen zb+10s) fires at wm = zb+70s; its
			// window [zb, zb+10m) fires at wm = end + gap = zb+660s: the
			// first line to get there is the third, not the second at 1 ms
			// short of it.
			name:  "dead zone: fires at wm = window end + gap, not 1 ms before",
			setup: zones(10),
			lines: []string{
				pos("a", zb+10_000, 0, zb+10_000),
				pos("b", zb+690_000-1, 0, zb+690_000),
				pos("b", zb+690_000, 0, zb+691_000),
			},
			check: func(t *testing.T, recs []map[string]any, _ engine.Stats) {
				zs := ofType(recs, "dead_zone")
				if len(zs) != 1 {
					t.Fatalf("got dead zones %v, want one", zs)
				}
				z := zs[0]
				if num(t, z, "emitted_at_ms") != zb+691_000 || num(t, z, "window_start_ms") != zb || num(t, z, "window_end_ms") != zb+w ||
					num(t, z, "warnings") != 1 || num(t, z, "couriers") != 1 || num(t, z, "open") != 1 || num(t, z, "restored") != 0 ||
					z["key"] != fmt.Sprintf("dead_zone|m|%s|%d", z["cell"], zb) {
					t.Errorf("got %v, want a's one open warning, emitted at the third line's arrival", z)
				}
			},
		},
		{
			name:  "dead zone: a no_signal only at the end of input counts nowhere",
			setup: zones(10),
			lines: []string{pos("a", zb+10_000, 0, -1)},
			check: func(t *testing.T, recs []map[string]any, _ engine.Stats) {
				if zs := ofType(recs, "dead_zone"); len(zs) != 0 || len(ofType(recs, "no_signal")) != 1 {
					t.Errorf("got dead zones %v, want none for an end_of_input no_signal", zs)
				}
			},
		},
		{
			// a silent from zb+10s (no_signal when c moves wm to zb+80s),
			// back at zb+200s: restored, 190 s. c silent from zb+110s (its
			// no_signal when a moves wm to zb+170s), never back. a silent
			// again from zb+200s: its no_signal comes with d, which fires
			// the window too, open.
			name:  "dead zone: restores before the window fires add their silence, the rest are open",
			setup: zones(10),
			lines: []string{
				pos("a", zb+10_000, 0, -1),
				pos("c", zb+110_000, 0, -1),
				pos("a", zb+200_000, 0, -1),
				pos("d", zb+1_000_000, 0, -1),
			},
			check: func(t *testing.T, recs []map[string]any, _ engine.Stats) {
				zs := ofType(recs, "dead_zone")
				if len(zs) != 1 {
					t.Fatalf("got dead zones %v, want one", zs)
				}
				z := zs[0]
				if num(t, z, "warnings") != 3 || num(t, z, "couriers") != 2 || num(t, z, "restored") != 1 || num(t, z, "open") != 2 ||
					num(t, z, "silence_ms") != 190_000 || num(t, z, "longest_silence_ms") != 190_000 {
					t.Errorf("got %v, want 3 warnings of 2 couriers, 1 restored after 190 s, 2 open", z)
				}
			},
		},
		{
			// a and b silent in the same window, 11 km apart: the window
			// takes one cell, a's (its no_signal comes first: same time,
			// smaller id), and refuses b's warning.
			name:  "dead zone: a window at max_cells refuses a new cell",
			setup: zones(1),
			lines: []string{
				pos("a", zb+10_000, 0, -1),
				pos("b", zb+10_000, 0.1, -1),
				pos("d", zb+1_000_000, 0, -1),
			},
			check: func(t *testing.T, recs []map[string]any, st engine.Stats) {
				zs := ofType(recs, "dead_zone")
				if len(zs) != 1 || num(t, zs[0], "warnings") != 1 || st.DeadZoneRefused != 1 {
					t.Errorf("got dead zones %v, %d refused; want a's one warning, b's refused", zs, st.DeadZoneRefused)
				}
				for _, r := range ofType(recs, "no_signal") {
					if r["courier"] == "a" && r["cell"] == zs[0]["cell"] {
						t.Errorf("the dead zone's cell %v is a's resolution-9 cell: want resolution 8", r["cell"])
					}
				}
			},
		},
	}
}
