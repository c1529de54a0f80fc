package replay

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/reference"
)

// The differential tests replay random inputs through the engine and through
// internal/reference, a slow literal implementation of the contract written
// independently, and require the same records.

func refParams(c engine.Config) reference.Params {
	return reference.Params{
		Market: c.Market, SizeMs: c.Size, SlideMs: c.Slide, GapMs: c.Gap, DelayMs: c.ToleratedDelay, AllowedLatenessMs: c.AllowedLateness,
		IdleTimeoutMs: c.IdleTimeout, FutureSkewMs: c.MaxFutureSkew, RestoreTTLMs: c.RestoreTTL,
		MaxCouriers: cmp.Or(c.MaxCouriers, engine.DefaultMaxCouriers),
		MinMoveM:    c.Filter.MinMoveM, MaxSpeedKmh: c.Filter.MaxSpeedKmh, StoppedBelowM: c.StoppedBelowM,
		H3Resolution:     c.H3Resolution,
		DeadZoneWindowMs: c.DeadZoneWindow, DeadZoneRes: c.DeadZoneResolution,
		DeadZoneMaxCells: cmp.Or(c.DeadZoneCells, defaults.DeadZoneCells),
		Area:             c.Area,
		Format:           c.Format.String(), Topic: c.Topic, CourierLevel: c.CourierLevel,
	}
}

// halfArea is a service area whose edge, lat 41.004, cuts randomInput's
// square in two: its fixes fall inside, outside and in the border band.
var halfArea = sync.OnceValue(func() *geo.Area {
	a, err := geo.LoadArea("testdata/half.geojson", geo.AreaResolution)
	if err != nil {
		panic(err)
	}
	return a
})

// canon splits a record into a sortable identity (everything but
// distance_m, which sums floats in another order) and its distance.
func canon(t *testing.T, m map[string]any) (string, float64) {
	t.Helper()
	d := math.NaN()
	c := map[string]any{}
	for k, v := range m {
		if k == "distance_m" {
			switch x := v.(type) {
			case float64:
				d = x
			case json.Number:
				d, _ = x.Float64()
			}
			continue
		}
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				v = i
			} else {
				v, _ = n.Float64()
			}
		}
		if s, ok := v.(string); ok {
			v = string([]rune(s)) // invalid UTF-8 → U+FFFD per byte, as a JSON round trip does
		}
		if i, ok := v.(int); ok {
			v = int64(i)
		}
		if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1<<53 && k != "last_lat" && k != "last_lon" {
			v = int64(f)
		}
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), d
}

type rec struct {
	id   string
	dist float64
}

func canonAll(t *testing.T, ms []map[string]any) []rec {
	out := make([]rec, 0, len(ms))
	for _, m := range ms {
		id, d := canon(t, m)
		out = append(out, rec{id, d})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// compare requires the engine's records over input to be the
// reference's, whatever the shard count, and returns how many of them are
// revisions.
func compare(t *testing.T, name string, c engine.Config, input []byte) (revisions int) {
	t.Helper()
	return compareCounts(t, name, c, input).revisions
}

// counts are what compareCounts found in the output.
type counts struct{ revisions, zones, moves int }

// compareCounts is compare, and it also counts the dead zones and the
// moves across the service area.
func compareCounts(t *testing.T, name string, c engine.Config, input []byte) (n counts) {
	t.Helper()
	got, raw := replayRecords(t, c, input)
	for _, m := range got {
		if _, ok := m["revision"]; ok {
			n.revisions++
		}
		switch m["type"] {
		case "dead_zone":
			n.zones++
		case "left_area", "entered_area":
			n.moves++
		}
	}
	want := reference.Run(refParams(c), input)
	g, w := canonAll(t, got), canonAll(t, want)
	i, j := 0, 0
	var diffs []string
	for (i < len(g) || j < len(w)) && len(diffs) < 10 {
		switch {
		case j == len(w) || (i < len(g) && g[i].id < w[j].id):
			diffs = append(diffs, "extra:   "+g[i].id)
			i++
		case i == len(g) || w[j].id < g[i].id:
			diffs = append(diffs, "missing: "+w[j].id)
			j++
		default:
			if gd, wd := g[i].dist, w[j].dist; !(math.IsNaN(gd) && math.IsNaN(wd)) && math.Abs(gd-wd) > 1e-6*math.Max(1, math.Abs(wd)) {
				diffs = append(diffs, fmt.Sprintf("distance_m %v, want %v: %s", gd, wd, g[i].id))
			}
			i++
			j++
		}
	}
	if len(diffs) > 0 {
		t.Fatalf("%s: engine and reference differ (%d vs %d records):\n%s\ninput:\n%s", name, len(g), len(w), join(diffs), head(input, 60))
	}
	// The output must not depend on the shard count.
	for _, shards := range []int{1, 3} {
		c2 := c
		c2.Shards = shards
		if _, raw2 := replayRecords(t, c2, input); !bytes.Equal(raw, raw2) {
			t.Fatalf("%s: output with %d shards differs from %d shards", name, shards, c.Shards)
		}
	}
	return n
}

func join(s []string) string {
	var b bytes.Buffer
	for _, x := range s {
		b.WriteString(x)
		b.WriteByte('\n')
	}
	return b.String()
}

func head(b []byte, lines int) string {
	n := 0
	for i, c := range b {
		if c == '\n' {
			if n++; n == lines {
				return string(b[:i])
			}
		}
	}
	return string(b)
}

// randomConfig draws window geometry, delays and filters on a small scale so
// that every rule is exercised often.
func randomConfig(r *rand.Rand) engine.Config {
	slide := int64(1+r.IntN(4)) * 5_000
	size := slide * int64(1+r.IntN(4))
	if r.IntN(5) == 0 {
		size = slide + int64(r.IntN(3)+1)*2_000 // not a multiple of slide
	}
	c := engine.Config{
		Market: "mk", Size: size, Slide: slide,
		Gap: int64(1+r.IntN(6)) * 5_000, ToleratedDelay: int64(r.IntN(4)) * 5_000,
		MaxFutureSkew: int64(r.IntN(3)) * 20_000,
		StoppedBelowM: 50, H3Resolution: r.IntN(16), Shards: 1 + r.IntN(4),
	}
	if r.IntN(2) == 0 { // allowed lateness, from a fraction of a slide to several windows
		c.AllowedLateness = []int64{1_000, slide, 2 * size, int64(1+r.IntN(120)) * 1_000}[r.IntN(4)]
	}
	c.RestoreTTL = max(c.Size+c.AllowedLateness, c.Gap) + int64(r.IntN(4))*int64(r.IntN(30_000))
	if r.IntN(2) == 0 { // a full table: couriers evicted and refused
		c.MaxCouriers = 1 + r.IntN(3)
	}
	if r.IntN(2) == 0 {
		c.IdleTimeout = int64(1+r.IntN(3)) * 10_000
	}
	if r.IntN(2) == 0 {
		c.Filter = geo.Filter{MinMoveM: float64(r.IntN(30)), MaxSpeedKmh: float64(20 + r.IntN(100))}
	}
	if r.IntN(3) > 0 { // dead zones: windows of a few gaps, coarse to fine cells, few of them
		c.DeadZoneWindow = int64(1+r.IntN(6)) * 10_000
		c.DeadZoneResolution = []int{0, 3, 8, 12}[r.IntN(4)]
		c.DeadZoneCells = 1 + r.IntN(3)
	}
	if r.IntN(2) == 0 {
		c.Area = halfArea()
	}
	return c
}

// randomInput is an adversarial stream: few couriers, out-of-order
// timestamps, duplicates, silences, missing arrival_ms, bad lines, and
// tunnels: a courier's positions held back for a while and delivered at
// once, late, as a phone that lost the network does.
func randomInput(r *rand.Rand, n int) []byte {
	var b bytes.Buffer
	const base = int64(1_750_000_000_000)
	arrival := base
	couriers := []string{"a", "b", "c", "d", "e"}[:1+r.IntN(5)]
	type fix struct {
		ts       int64
		lat, lon float64
	}
	last := map[string]fix{}
	held := map[string][]fix{} // a courier in a tunnel: its positions so far
	var prev []byte
	// Whole seconds make equalities at every boundary (ts+gap == other ts,
	// wm == window end) frequent.
	grain := int64(1)
	if r.IntN(2) == 0 {
		grain = 1000
	}
	for i := 0; i < n; i++ {
		switch k := r.IntN(100); {
		case k < 3 && prev != nil: // redelivery of the previous line
			b.Write(prev)
			continue
		case k < 6 && r.IntN(2) == 0: // the edges of the timestamp range
			fmt.Fprintf(&b, `{"courier":"e","lat":1,"lon":1,"timestamp_ms":%d}`+"\n", []int64{253402300799999, 253402300800000, 1}[r.IntN(3)])
			continue
		case k < 6:
			b.WriteString([]string{`{"courier":"a","lat":1}`, `not json`, `{"courier":"a","lat":91,"lon":0,"timestamp_ms":5}`, `{"courier":"a","lat":1,"lon":1,"timestamp_ms":1.5}`, ``, `   `}[r.IntN(6)])
			b.WriteByte('\n')
			continue
		}
		if r.IntN(30) == 0 {
			arrival += int64(r.IntN(120_000)) // a silence
		} else {
			arrival += int64(r.IntN(3_000))
		}
		c := couriers[r.IntN(len(couriers))]
		if hs, in := held[c]; in && r.IntN(6) == 0 { // out of the tunnel
			delete(held, c)
			for _, h := range hs {
				prev = []byte(fmt.Sprintf(`{"courier":%q,"lat":%.6f,"lon":%.6f,"timestamp_ms":%d,"arrival_ms":%d}`+"\n", c, h.lat, h.lon, h.ts, arrival-arrival%grain))
				b.Write(prev)
			}
			continue
		} else if !in && r.IntN(25) == 0 {
			held[c] = []fix{}
		}
		f, ok := last[c]
		if !ok {
			f = fix{ts: arrival - int64(r.IntN(10_000)), lat: 41 + r.Float64()*0.01, lon: 2 + r.Float64()*0.01}
		}
		f.ts = max(f.ts+int64(r.IntN(8_000)), arrival-int64(r.IntN(20_000))) // mostly recent
		if r.IntN(8) == 0 {
			f.ts -= int64(r.IntN(90_000)) // very late
		}
		if r.IntN(40) == 0 {
			f.ts = arrival + int64(r.IntN(60_000)) // maybe in the future
		}
		f.ts -= f.ts % grain
		f.lat += (r.Float64() - 0.5) * 0.002
		f.lon += (r.Float64() - 0.5) * 0.002
		last[c] = f
		if hs, in := held[c]; in {
			held[c] = append(hs, f)
			continue
		}
		line := fmt.Sprintf(`{"courier":%q,"lat":%.6f,"lon":%.6f,"timestamp_ms":%d`, c, f.lat, f.lon, f.ts)
		if r.IntN(3) == 0 {
			line += fmt.Sprintf(`,"accuracy_m":%d`, r.IntN(40))
		}
		if r.IntN(10) != 0 {
			line += fmt.Sprintf(`,"arrival_ms":%d`, arrival-arrival%grain)
		}
		prev = []byte(line + "}\n")
		b.Write(prev)
	}
	return b.Bytes()
}

func TestReplay_MatchesReference_Random(t *testing.T) {
	seeds := 150
	if testing.Short() {
		seeds = 50
	}
	revised, zoned, moved := 0, 0, 0 // inputs with revisions, dead zones, moves across the area
	for seed := 0; seed < seeds; seed++ {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		c := randomConfig(r)
		n := compareCounts(t, fmt.Sprintf("seed %d config %+v", seed, c), c, randomInput(r, 50+r.IntN(400)))
		if n.revisions > 0 {
			revised++
		}
		if n.zones > 0 {
			zoned++
		}
		if n.moves > 0 {
			moved++
		}
	}
	if revised < seeds/10 || zoned < seeds/4 || moved == 0 { // TestReplay_MatchesReference_Area moves more
		t.Errorf("%d of %d inputs gave revisions, %d dead zones, %d moves across the service area; the inputs are meant to exercise each", revised, seeds, zoned, moved)
	}
	t.Logf("%d of %d inputs gave revisions, %d dead zones, %d moves across the service area", revised, seeds, zoned, moved)
}

func TestReplay_MatchesReference_Fleet(t *testing.T) {
	seeds := int64(2)
	if testing.Short() {
		seeds = 1
	}
	for seed := int64(1); seed <= seeds; seed++ {
		f := fleet.New(fleet.Config{Couriers: 30, Duration: 40 * time.Minute, Seed: seed, DuplicateRate: 0.01, BadRate: 0.005, TunnelFraction: 0.3, TunnelRate: 3})
		var in []byte
		for e, ok := f.Next(); ok; e, ok = f.Next() {
			in = fleet.AppendJSON(in, e, true)
			in = append(in, '\n')
		}
		c := engine.Config{
			Market: "girona", Size: 300_000, Slide: 60_000, Gap: 180_000, ToleratedDelay: 45_000,
			IdleTimeout: 30_000, MaxFutureSkew: 60_000, RestoreTTL: 24 * 3600_000,
			Filter: geo.Filter{MinMoveM: 15, MaxSpeedKmh: 150}, StoppedBelowM: 50, H3Resolution: 9, Shards: 2,
		}
		if n := compare(t, fmt.Sprintf("fleet seed %d", seed), c, in); n != 0 {
			t.Errorf("fleet seed %d: %d revisions without allowed lateness", seed, n)
		}
		c.AllowedLateness, c.Shards = 5*60_000, 3
		n := compare(t, fmt.Sprintf("fleet seed %d allowed_lateness 5m", seed), c, in)
		t.Logf("fleet seed %d, allowed_lateness 5m: %d revisions", seed, n)
	}
}
