package partition

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/uber/h3-go/v4"

	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/result"
)

// zoneFleet is a fleet's inputs, a third of its couriers through tunnels
// (no_signal, then signal_restored), in arrival order.
func zoneFleet(seed int64) []engine.Input {
	f := fleet.New(fleet.Config{Couriers: 60, Duration: 90 * time.Minute, Seed: seed, TunnelFraction: 0.35, TunnelRate: 3, Radius: 1500})
	var in []engine.Input
	for line := int64(1); ; line++ {
		ev, ok := f.Next()
		if !ok {
			return in
		}
		in = append(in, engine.Input{Payload: fleet.AppendJSON(nil, ev, false), Arrival: ev.Arrival, HasArrival: true, Line: line})
	}
}

// zoneConfig is an engine of a market with 10-minute dead-zone windows at
// resolution 7 (cells of several couriers).
func zoneConfig() engine.Config {
	return engine.Config{
		Market: "girona", Size: 300_000, Slide: 60_000, Gap: 180_000, ToleratedDelay: 45_000,
		IdleTimeout: 30_000, MaxFutureSkew: 60_000, StoppedBelowM: 50, H3Resolution: 9,
		DeadZoneWindow: 600_000, DeadZoneResolution: 7, DeadZoneCells: 10_000, Shards: 2,
	}
}

// run applies inputs to an engine of cfg and returns its results.
func run(cfg engine.Config, inputs []engine.Input) []result.Record {
	var out []result.Record
	e := engine.New(cfg, func(rs []result.Record) { out = append(out, rs...) })
	for i := range inputs {
		in := inputs[i]
		e.Push(&in)
	}
	e.EndOfInput()
	return out
}

// ofType returns the records of type t among rs.
func ofType(rs []result.Record, t result.Type) []result.Record {
	var out []result.Record
	for _, r := range rs {
		if r.Type == t {
			out = append(out, r)
		}
	}
	return out
}

// splitInputs deals inputs to n partitions by their courier (the
// partitioned source's rule), keeping arrival order in each.
func splitInputs(t *testing.T, inputs []engine.Input, n int) [][]engine.Input {
	t.Helper()
	parts := make([][]engine.Input, n)
	for _, in := range inputs {
		var p struct{ Courier string }
		if err := json.Unmarshal(in.Payload, &p); err != nil {
			t.Fatal(err)
		}
		k := partitionOf(p.Courier, n)
		parts[k] = append(parts[k], in)
	}
	return parts
}

// merge feeds each partition's parts to a merger in an order drawn by
// rng (each partition's own in order, or not: the results bridge may
// store a retried part after a later one), and returns the dead zones.
func merge(t *testing.T, parts [][]result.Record, rng *rand.Rand, keepOrder bool) []result.Record {
	t.Helper()
	cfg := zoneConfig()
	m := newZoneMerger(cfg.Market, cfg.DeadZoneWindow, len(parts), cfg.DeadZoneCells)
	var queue []result.Record
	next := make([]int, len(parts))
	for {
		var live []int
		for p := range parts {
			if next[p] < len(parts[p]) {
				live = append(live, p)
			}
		}
		if len(live) == 0 {
			break
		}
		p := live[rng.IntN(len(live))]
		i := next[p]
		if !keepOrder && i+1 < len(parts[p]) && rng.IntN(4) == 0 {
			parts[p][i], parts[p][i+1] = parts[p][i+1], parts[p][i] // a part stored after the next
		}
		queue = append(queue, parts[p][i])
		next[p]++
	}
	var out []result.Record
	for i := range queue {
		out = append(out, m.add(&queue[i])...)
	}
	if m.dropped.Load() != 0 || m.incomplete.Load() != 0 {
		t.Fatalf("%d parts dropped, %d windows incomplete", m.dropped.Load(), m.incomplete.Load())
	}
	return out
}

// TestZoneParts_OnePartitionIsTheMarket: a market of one partition, its
// engine emitting its part of the dead zones and the merger combining
// them, gives exactly the single engine's dead_zone results, emitted_at
// included.
func TestZoneParts_OnePartitionIsTheMarket(t *testing.T) {
	for seed := range int64(2) {
		inputs := zoneFleet(seed)
		cfg := zoneConfig()
		want := ofType(run(cfg, inputs), result.DeadZone)
		cfg.DeadZoneParts = true
		parts := ofType(run(cfg, inputs), result.ZonePart)
		got := merge(t, [][]result.Record{parts}, rand.New(rand.NewPCG(uint64(seed), 1)), true)
		if len(want) == 0 {
			t.Fatal("no dead zones: the test checks nothing")
		}
		if diff := diffZones(got, want, true); diff != "" {
			t.Errorf("seed %d: %s", seed, diff)
		}
	}
}

// TestZoneParts_SumOfPartitions: with the fleet dealt to 4 partitions,
// the merged parts are, cell by cell, the sums of what each partition's
// engine counts alone as a market (its own watermark): warnings,
// couriers (a courier is in one partition), restored and silence, the
// longest silence the largest; and the merger gives the same records,
// emitted_at included, whatever order the parts are read in.
func TestZoneParts_SumOfPartitions(t *testing.T) {
	const n = 4
	for seed := range int64(2) {
		split := splitInputs(t, zoneFleet(seed), n)
		sums := map[string]result.Zone{}
		parts := make([][]result.Record, n)
		for p := range n {
			cfg := zoneConfig()
			for _, z := range ofType(run(cfg, split[p]), result.DeadZone) {
				k := z.Key()
				s := sums[k]
				s.Warnings += z.Zone.Warnings
				s.Couriers += z.Zone.Couriers
				s.Restored += z.Zone.Restored
				s.SilenceMs += z.Zone.SilenceMs
				s.LongestMs = max(s.LongestMs, z.Zone.LongestMs)
				sums[k] = s
			}
			cfg.DeadZoneParts, cfg.Partition = true, p
			parts[p] = ofType(run(cfg, split[p]), result.ZonePart)
		}
		var want []result.Record
		for k, z := range sums {
			var start int64
			var cell uint64
			if _, err := fmt.Sscanf(k, "dead_zone|girona|%x|%d", &cell, &start); err != nil {
				t.Fatal(err)
			}
			want = append(want, result.Record{Type: result.DeadZone, Market: "girona", Start: start, Zone: &z})
			want[len(want)-1].Cell = h3.Cell(cell)
		}
		if len(want) < 10 {
			t.Fatalf("%d dead zones: too few to check anything", len(want))
		}
		first := merge(t, clone(parts), rand.New(rand.NewPCG(uint64(seed), 1)), true)
		if diff := diffZones(first, want, false); diff != "" {
			t.Errorf("seed %d: %s", seed, diff)
		}
		for round := range 5 {
			again := merge(t, clone(parts), rand.New(rand.NewPCG(uint64(seed), uint64(round+2))), false)
			if diff := diffZones(again, first, true); diff != "" {
				t.Errorf("seed %d, read order %d: %s", seed, round, diff)
			}
		}
	}
}

func clone(parts [][]result.Record) [][]result.Record {
	out := make([][]result.Record, len(parts))
	for i, p := range parts {
		out[i] = slices.Clone(p)
	}
	return out
}

// diffZones compares dead_zone records by key (and emitted_at with at).
func diffZones(got, want []result.Record, at bool) string {
	index := func(rs []result.Record) map[string]result.Record {
		m := map[string]result.Record{}
		for _, r := range rs {
			m[r.Key()] = r
		}
		return m
	}
	g, w := index(got), index(want)
	if len(g) != len(got) {
		return fmt.Sprintf("%d dead zones, %d keys: one emitted twice", len(got), len(g))
	}
	for k, wr := range w {
		gr, ok := g[k]
		switch {
		case !ok:
			return fmt.Sprintf("%s missing (of %d)", k, len(w))
		case *gr.Zone != *wr.Zone:
			return fmt.Sprintf("%s: %+v, want %+v", k, *gr.Zone, *wr.Zone)
		case at && gr.EmittedAt != wr.EmittedAt:
			return fmt.Sprintf("%s: emitted at %d, want %d", k, gr.EmittedAt, wr.EmittedAt)
		}
	}
	if len(g) != len(w) {
		return fmt.Sprintf("%d dead zones, want %d", len(g), len(w))
	}
	return ""
}

// TestDecodePart_ReadsWhatIsWritten: a part's JSON reads back as the
// record it was.
func TestDecodePart_ReadsWhatIsWritten(t *testing.T) {
	r := result.Record{Type: result.ZonePart, Market: "girona", Start: 1_800_000, EmittedAt: 99, Part: &result.Part{
		Partition: 3, From: 1_200_000, Cells: []result.PartCell{
			{Start: 1_200_000, Cell: 0x87394460cffffff, Zone: result.Zone{Warnings: 3, Couriers: 2, Restored: 1, SilenceMs: 250_000, LongestMs: 250_000}},
		},
	}}
	got, err := decodePart(r.AppendJSON(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got.Start != r.Start || got.EmittedAt != r.EmittedAt || got.Part.Partition != 3 || got.Part.From != r.Part.From || !slices.Equal(got.Part.Cells, r.Part.Cells) {
		t.Errorf("read %+v %+v, want %+v %+v", got, *got.Part, r, *r.Part)
	}
}

// FuzzDecodePart: no input makes the decoder panic, and what it accepts
// is a part the merger can take.
func FuzzDecodePart(f *testing.F) {
	f.Add([]byte(`{"type":"dead_zone_part","market":"girona","key":"dead_zone_part|girona|p1|1800000","partition":1,"from_ms":1200000,"through_ms":1800000,"cells":[{"window_start_ms":1200000,"cell":"87394460cffffff","warnings":2,"couriers":1,"restored":1,"silence_ms":5,"longest_silence_ms":5}],"emitted_at_ms":7}`))
	f.Add([]byte(`{"type":"dead_zone_part","partition":-1,"from_ms":0,"through_ms":0}`))
	f.Add([]byte(`{"type":"dead_zone"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodePart(data)
		if err != nil {
			return
		}
		m := newZoneMerger("girona", 600_000, 2, 3)
		_ = m.add(&r)
	})
}
