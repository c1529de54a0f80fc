package main

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/result"
)

// tunnelFleet is the fleet of the tunnel measurement: every
// courier tunnel-prone, four tunnels an hour of driving, each 1-6 min
// without network, the phone delivering what it queued on the way out.
func tunnelFleet(couriers int, d time.Duration, seed int64, mode fleet.TunnelMode) fleet.Config {
	return fleet.Config{Couriers: couriers, Duration: d, Seed: seed, TunnelFraction: 1, TunnelRate: 4,
		TunnelMin: time.Minute, TunnelMax: 6 * time.Minute, Tunnel: mode}
}

// windowKey names one courier's window.
type windowKey struct {
	courier string
	start   int64
}

// lastFiring is a window's newest firing.
type lastFiring struct {
	dist      float64
	positions int
	revision  int
}

// fleetWindows runs a fleet through the engine, each event arriving when
// the fleet says, and returns every window's newest firing, the
// revisions and the positions late for distance.
func fleetWindows(cfg engine.Config, fc fleet.Config) (map[windowKey]lastFiring, int, int64) {
	out := map[windowKey]lastFiring{}
	revisions := 0
	e := engine.New(cfg, func(rs []result.Record) {
		for _, r := range rs {
			if r.Type != result.Distance {
				continue
			}
			k := windowKey{r.Courier, r.Start}
			if r.Revision > 0 {
				revisions++
			}
			if old, ok := out[k]; !ok || r.Revision > old.revision {
				out[k] = lastFiring{r.DistanceM, r.Positions, r.Revision}
			}
		}
	})
	f := fleet.New(fc)
	var b []byte
	for ev, ok := f.Next(); ok; ev, ok = f.Next() {
		b = fleet.AppendJSON(b[:0], ev, false)
		e.Push(&engine.Input{Payload: b, Arrival: ev.Arrival, HasArrival: true})
	}
	e.EndOfInput()
	return out, revisions, e.Stats().LateDistance
}

// tunnelRow is one configuration's comparison with the on-time fleet.
type tunnelRow struct {
	name                    string
	windows, equal, within2 int
	missing                 int     // on-time windows that never fired
	missedM, onTimeM        float64 // distance short of the on-time windows', and theirs
	revisions               int
	lateDistance            int64
}

// compareTunnels compares the buffered fleet's windows under cfg with the
// on-time fleet's under the same cfg.
func compareTunnels(name string, cfg engine.Config, couriers int, d time.Duration, seed int64) tunnelRow {
	want, _, _ := fleetWindows(cfg, tunnelFleet(couriers, d, seed, fleet.TunnelOnTime))
	got, revs, late := fleetWindows(cfg, tunnelFleet(couriers, d, seed, fleet.TunnelBuffered))
	r := tunnelRow{name: name, revisions: revs, lateDistance: late}
	for k, w := range want {
		r.windows++
		r.onTimeM += w.dist
		g, ok := got[k]
		if !ok {
			r.missing++
			r.missedM += w.dist
			continue
		}
		if g.dist == w.dist && g.positions == w.positions {
			r.equal++
		}
		if math.Abs(g.dist-w.dist) <= 0.02*math.Max(w.dist, 50) {
			r.within2++
		}
		r.missedM += max(w.dist-g.dist, 0)
	}
	return r
}

// measureTunnels returns the rows of the tunnel table: filters off and on,
// allowed lateness 0 and lateness.
func measureTunnels(c config.Config, couriers int, d time.Duration, seed int64, lateness time.Duration) []tunnelRow {
	base := market.EngineConfig(c)
	base.Market, base.Shards = "tunnel", 2
	var rows []tunnelRow
	for _, filtered := range []bool{false, true} {
		for _, l := range []time.Duration{0, lateness} {
			cfg := base
			if !filtered {
				cfg.Filter = geo.Filter{}
			}
			cfg.AllowedLateness = l.Milliseconds()
			cfg.RestoreTTL = max(cfg.RestoreTTL, cfg.Size+cfg.AllowedLateness)
			name := fmt.Sprintf("filters off, allowed_lateness %v", l)
			if filtered {
				name = fmt.Sprintf("default filters, allowed_lateness %v", l)
			}
			rows = append(rows, compareTunnels(name, cfg, couriers, d, seed))
		}
	}
	return rows
}

func runTunnels(w io.Writer, c config.Config, couriers int, d time.Duration, seed int64, lateness time.Duration) {
	fmt.Fprintf(w, "tunnels: %d couriers for %v (seed %d), all tunnel-prone, 4 tunnels/h of driving, 1-6 min without network, queued positions delivered on the way out\n", couriers, d, seed)
	fmt.Fprintf(w, "each window's newest firing compared with the same fleet delivered on time, under the same configuration\n\n")
	fmt.Fprintln(w, "| configuration | windows | equal | within 2 % | never fired | distance missed | revisions | late for distance |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range measureTunnels(c, couriers, d, seed, lateness) {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %d | %.1f km of %.1f km (%.2f %%) | %d | %d |\n", r.name, r.windows,
			pct(r.equal, r.windows), pct(r.within2, r.windows), r.missing, r.missedM/1000, r.onTimeM/1000, 100*r.missedM/r.onTimeM, r.revisions, r.lateDistance)
	}
}
