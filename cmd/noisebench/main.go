// Command noisebench measures distance_m and stopped under phone-GPS
// noise: couriers whose true path is known — synthetic ones, and real
// GPX tracks taken as truth — get the noise model of gpsnoise.Phone, go
// through the engine with edgeproc's default distance filter and with the
// filters off (raw haversine), and every full 5-minute window is compared
// with the same window of the clean path (filters off).
//
//	go run ./cmd/noisebench [-seeds 10] [-hours 2]
//
// With -tunnels it measures allowed lateness instead: a fleet
// whose phones queue their positions in tunnels and deliver them on the
// way out, against the same fleet delivered on time (-seeds is then the
// fleet's seed).
//
//	go run ./cmd/noisebench -tunnels [-couriers 200] [-hours 2] [-lateness 7m]
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/gpsnoise"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/result"
)

const stepMs = 5_000 // one fix every 5 s

func main() {
	seeds := flag.Int("seeds", 10, "synthetic couriers of each kind, and noise draws of each real trace")
	hours := flag.Float64("hours", 2, "length of each synthetic courier's trace")
	c := config.Default()
	flag.Float64Var(&c.Distance.MinMoveM, "min-move", c.Distance.MinMoveM, "distance.min_move_m to measure (default: edgeproc's)")
	flag.Float64Var(&c.Distance.MaxSpeedKmh, "max-speed", c.Distance.MaxSpeedKmh, "distance.max_speed_kmh to measure (default: edgeproc's)")
	tunnels := flag.Bool("tunnels", false, "measure allowed lateness instead: a fleet whose phones deliver what they queued in tunnels, against the same fleet on time")
	couriers := flag.Int("couriers", 200, "with -tunnels: couriers of the fleet")
	lateness := flag.Duration("lateness", 7*time.Minute, "with -tunnels: windows.allowed_lateness to measure besides 0s")
	flag.Parse()
	if *tunnels {
		runTunnels(os.Stdout, c, *couriers, time.Duration(*hours*float64(time.Hour)), int64(*seeds), *lateness)
		return
	}
	if err := run(os.Stdout, c, *seeds, int64(*hours*3600_000)); err != nil {
		fmt.Fprintln(os.Stderr, "noisebench:", err)
		os.Exit(1)
	}
}

// window is one fired distance window.
type window struct {
	dist            float64
	stopped, sparse bool
}

// windows runs fixes through the engine, each arriving at its timestamp,
// and returns the distance windows by start that lie entirely within the
// trace.
func windows(cfg engine.Config, fixes []geo.Fix) map[int64]window {
	return windowsArriving(cfg, fixes, nil)
}

// windowsArriving is windows with fix i arriving at arrival[i] (nil: at its
// timestamp), in the order given.
func windowsArriving(cfg engine.Config, fixes []geo.Fix, arrival []int64) map[int64]window {
	out := map[int64]window{}
	first, last := fixes[0].TS, fixes[0].TS
	for _, x := range fixes {
		first, last = min(first, x.TS), max(last, x.TS)
	}
	e := engine.New(cfg, func(rs []result.Record) {
		for _, r := range rs {
			if r.Type == result.Distance && r.Start >= first && r.End <= last+1 {
				out[r.Start] = window{r.DistanceM, r.Stopped, r.InsufficientEvidence}
			}
		}
	})
	var b []byte
	for i, x := range fixes {
		b = fleet.AppendJSON(b[:0], fleet.Event{Courier: "c", Lat: x.Lat, Lon: x.Lon, TS: x.TS, Accuracy: x.Acc}, false)
		at := x.TS
		if arrival != nil {
			at = arrival[i]
		}
		e.Push(&engine.Input{Payload: b, Arrival: at, HasArrival: true})
	}
	e.EndOfInput()
	return out
}

// tally collects one row of the table for one configuration.
type tally struct {
	n, stopped, within, sparse int
	maxDist                    float64
	errs                       []float64
}

func (t *tally) add(truth, got window, bound float64) {
	t.n++
	if got.sparse {
		t.sparse++
	}
	if truth.dist < 50 { // a courier that did not move
		if got.stopped {
			t.stopped++
		}
		t.maxDist = max(t.maxDist, got.dist)
		if got.dist < 50 {
			t.within++
		}
		return
	}
	e := math.Abs(got.dist-truth.dist) / truth.dist
	t.errs = append(t.errs, e)
	if e <= bound {
		t.within++
	}
}

func pct(a, b int) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f %%", 100*float64(a)/float64(b))
}

func (t *tally) String() string {
	var parts []string
	if moving := len(t.errs); t.n-moving > 0 {
		parts = append(parts, fmt.Sprintf("still: max %.0f m, stopped %s", t.maxDist, pct(t.stopped, t.n-moving)))
	}
	if len(t.errs) > 0 {
		slices.Sort(t.errs)
		parts = append(parts, fmt.Sprintf("median error %.1f %%", 100*t.errs[len(t.errs)/2]))
	}
	parts = append(parts, fmt.Sprintf("**%s** within bound", pct(t.within, t.n)))
	if t.sparse > 0 {
		parts = append(parts, fmt.Sprintf("%d insufficient_evidence", t.sparse))
	}
	return strings.Join(parts, "; ")
}

// boundOf is the distance bound for a window whose true distance is d:
// < 50 m when still, else within 10 % at walking pace (under 3 m/s), 5 %
// faster.
func boundOf(d float64) float64 {
	if d < 3*300 {
		return 0.10
	}
	return 0.05
}

type row struct {
	name, truth string
	filter, raw tally
}

func run(w io.Writer, c config.Config, seeds int, durMs int64) error {
	rows, err := measure(c, seeds, durMs)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "noise: %+v; one fix every %d s; %d seeds; full 5-min windows sliding 1 min\n", gpsnoise.Phone, stepMs/1000, seeds)
	fmt.Fprintf(w, "filter: min_move_m %v, max_speed_kmh %v, stopped_below_m %v\n", c.Distance.MinMoveM, c.Distance.MaxSpeedKmh, c.Distance.StoppedBelowM)
	fmt.Fprintf(w, "bound: still (truth < 50 m) → < 50 m and stopped; under 3 m/s → within 10 %%; faster → within 5 %%\n\n")
	fmt.Fprintln(w, "| courier | truth | edgeproc | raw haversine |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %v | %v |\n", r.name, r.truth, &r.filter, &r.raw)
	}
	return nil
}

// measure returns the table's rows: the synthetic couriers, then the real
// traces.
func measure(c config.Config, seeds int, durMs int64) ([]*row, error) {
	c.Market = "bench"
	def := market.EngineConfig(c)
	def.Shards = 1
	off := def
	off.Filter = geo.Filter{}
	compare := func(r *row, pts []gpsnoise.Point, rng *rand.Rand, jumps int) {
		truth := windows(off, gpsnoise.Clean(pts, gpsnoise.Phone.AccuracyM))
		noisy := gpsnoise.Phone.Apply(rng, pts)
		if jumps > 0 {
			gpsnoise.Jump(rng, noisy, jumps)
		}
		got, raw := windows(def, noisy), windows(off, noisy)
		for start, tw := range truth {
			b := boundOf(tw.dist)
			r.filter.add(tw, got[start], b)
			r.raw.add(tw, raw[start], b)
		}
	}
	var rows []*row
	for _, k := range []struct {
		name, truth string
		course      gpsnoise.Course
		jumps       int
	}{
		{"parked", "0 m", gpsnoise.Course{}, 0},
		{"walking 1.4 m/s, turns", "420 m / 5 min", gpsnoise.Course{SpeedMps: 1.4, TurnEveryS: 90}, 0},
		{"driving 8 m/s, turns", "2400 m / 5 min", gpsnoise.Course{SpeedMps: 8, TurnEveryS: 60}, 0},
		{"driving + three 2–5 km jumps", "2400 m / 5 min", gpsnoise.Course{SpeedMps: 8, TurnEveryS: 60}, 3},
	} {
		r := &row{name: k.name, truth: k.truth}
		for seed := range seeds {
			rng := rand.New(rand.NewPCG(uint64(seed), 9))
			pts := gpsnoise.Synthetic(rng, k.course, 41.98, 2.82, 1_750_000_000_000, stepMs, durMs)
			compare(r, pts, rng, k.jumps)
		}
		rows = append(rows, r)
	}
	traces, err := gpsnoise.RealTraces(stepMs)
	if err != nil {
		return nil, err
	}
	for _, tr := range traces {
		r := &row{name: "real: " + tr.Name}
		var total float64
		for _, tw := range windows(off, gpsnoise.Clean(tr.Points, 0)) {
			total += tw.dist
		}
		for seed := range seeds {
			compare(r, tr.Points, rand.New(rand.NewPCG(uint64(seed), 11)), 0)
		}
		n := r.filter.n / max(seeds, 1)
		r.truth = fmt.Sprintf("%d windows, mean %.0f m / 5 min", n, total/float64(max(n, 1)))
		rows = append(rows, r)
	}
	return rows, nil
}
