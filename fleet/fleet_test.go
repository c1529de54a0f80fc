package fleet

import (
	"bytes"
	"math"
	"regexp"
	"testing"
	"time"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

func replayBytes(tb testing.TB, cfg Config) []byte {
	tb.Helper()
	f := New(cfg)
	var buf []byte
	for {
		e, ok := f.Next()
		if !ok {
			return buf
		}
		buf = AppendJSON(buf, e, true)
		buf = append(buf, '\n')
	}
}

func TestFleet_Deterministic(t *testing.T) {
	cfg := Config{Couriers: 30, Duration: 20 * time.Minute, Seed: 42, DuplicateRate: 0.05, BadRate: 0.05,
		TunnelFraction: 1, TunnelRate: 3}
	a, b := replayBytes(t, cfg), replayBytes(t, cfg)
	if len(a) == 0 {
		t.Fatal("got no events")
	}
	if !bytes.Equal(a, b) {
		t.Errorf("two runs with seed %d differ (%d vs %d bytes)", cfg.Seed, len(a), len(b))
	}
	cfg.Seed = 43
	if c := replayBytes(t, cfg); bytes.Equal(a, c) {
		t.Errorf("seeds 42 and 43 gave the same %d bytes", len(a))
	}
}

func TestFleet_ArrivalOrder(t *testing.T) {
	evs := mustCollect(t, Config{Couriers: 50, Duration: 30 * time.Minute, Seed: 1, DuplicateRate: 0.05, BadRate: 0.02})
	inversions := 0
	for i, e := range evs {
		if e.Arrival < e.TS+100 {
			t.Fatalf("event %d: arrival %d < timestamp %d + 100 ms", i, e.Arrival, e.TS)
		}
		if i == 0 {
			continue
		}
		if e.Arrival < evs[i-1].Arrival {
			t.Fatalf("event %d: arrival %d < previous arrival %d", i, e.Arrival, evs[i-1].Arrival)
		}
		if e.TS < evs[i-1].TS {
			inversions++
		}
	}
	// Out-of-order event time is the point of the arrival profile.
	if inversions < len(evs)/10 {
		t.Errorf("got %d event-time inversions in %d events, want ≥ 10%%", inversions, len(evs))
	}
}

func TestFleet_TimestampsPerCourier(t *testing.T) {
	cfg := Config{Couriers: 40, Duration: time.Hour, Seed: 3, TunnelRate: -1}
	evs := mustCollect(t, cfg)
	full := New(cfg).Config()
	end := full.Start + cfg.Duration.Milliseconds()
	byC := positions(evs)
	if len(byC) != cfg.Couriers {
		t.Fatalf("got %d couriers, want %d", len(byC), cfg.Couriers)
	}
	for id, s := range byC {
		if !idPattern.MatchString(id) {
			t.Errorf("courier id %q does not match %v", id, idPattern)
		}
		if s[0].TS < full.Start || s[0].TS >= full.Start+5000 {
			t.Errorf("%s: first timestamp %d, want in [%d, %d)", id, s[0].TS, full.Start, full.Start+5000)
		}
		if last := s[len(s)-1].TS; last >= end {
			t.Errorf("%s: last timestamp %d, want < %d", id, last, end)
		}
		for i := 1; i < len(s); i++ {
			// Without tunnels every gap is Interval ± 20 %, so never 0.
			if gap := s[i].TS - s[i-1].TS; gap < 4000 || gap > 6000 {
				t.Fatalf("%s: gap %d ms between %d and %d, want 4000..6000", id, gap, s[i-1].TS, s[i].TS)
			}
		}
	}
}

func TestFleet_Tunnels(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		wantProne  int
		wantSilent bool
	}{
		{"default demo fleet", Config{Duration: hour, Seed: 5}, 14, true},
		{"all prone", Config{Couriers: 20, Duration: hour, Seed: 5, TunnelFraction: 1, TunnelRate: 4}, 20, true},
		{"tunnels off", Config{Couriers: 20, Duration: hour, Seed: 5, TunnelFraction: 1, TunnelRate: -1}, 0, false},
		{"no prone couriers", Config{Couriers: 20, Duration: hour, Seed: 5, TunnelFraction: -1}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := New(tt.cfg)
			prone := map[string]bool{}
			for _, c := range f.couriers {
				if c.prone {
					prone[c.id] = true
				}
			}
			if len(prone) != tt.wantProne {
				t.Errorf("got %d tunnel-prone couriers, want %d", len(prone), tt.wantProne)
			}
			silences := 0
			for id, s := range positions(mustCollect(t, tt.cfg)) {
				for i := 1; i < len(s); i++ {
					gap := s[i].TS - s[i-1].TS
					if gap <= 6000 {
						continue
					}
					silences++
					if !prone[id] {
						t.Errorf("%s is not tunnel-prone but was silent %d ms", id, gap)
					}
					if gap < 210_000 || gap > 360_000 {
						t.Errorf("%s: silence of %d ms, want 3.5–6 min", id, gap)
					}
				}
			}
			if got := silences > 0; got != tt.wantSilent {
				t.Errorf("got %d silences, want some: %v", silences, tt.wantSilent)
			}
		})
	}
}

// TestFleet_Motion checks the true motion (via the test hook) and how the
// reported fixes scatter around it.
func TestFleet_Motion(t *testing.T) {
	cfg := Config{Couriers: 60, Duration: 2 * hour, Seed: 11}
	f := New(cfg)
	type obs struct {
		ts         int64
		parked     bool
		leg        int
		x, y       float64 // true position, plane metres
		tLat, tLon float64 // true position
		lat, lon   float64 // reported
		acc        float64
	}
	byC := map[string][]obs{}
	f.observe = func(c *courier, e Event) {
		tLat, tLon := f.proj.latLon(c.x, c.y)
		byC[c.id] = append(byC[c.id], obs{e.TS, c.parked, c.leg, c.x, c.y, tLat, tLon, e.Lat, e.Lon, e.Accuracy})
		// Destinations lie in the disk; corners of a trip in its bounding square.
		if r := f.cfg.Radius; math.Abs(c.x) > r || math.Abs(c.y) > r {
			t.Errorf("%s at (%.0f, %.0f) m from the centre, want within ±%.0f", c.id, c.x, c.y, r)
		}
	}
	for {
		if _, ok := f.Next(); !ok {
			break
		}
	}
	var parked, moving, speeds int
	minKmh, maxKmh := math.Inf(1), math.Inf(-1)
	for id, s := range byC {
		for i, o := range s {
			off := haversineM(o.tLat, o.tLon, o.lat, o.lon)
			if o.parked {
				parked++
				if off > 30.5 || o.acc < 5 || o.acc > 20 {
					t.Errorf("%s parked at %d: %.1f m from its point, accuracy %v; want ≤ 30 m, 5–20", id, o.ts, off, o.acc)
				}
			} else {
				moving++
				if off > 12 || o.acc < 5 || o.acc > 12 {
					t.Errorf("%s driving at %d: %.1f m from true position, accuracy %v; want ≤ 12 m, 5–12", id, o.ts, off, o.acc)
				}
			}
			if i == 0 {
				continue
			}
			p := s[i-1]
			if p.parked || o.parked || p.leg != o.leg {
				continue
			}
			kmh := math.Hypot(o.x-p.x, o.y-p.y) / (float64(o.ts-p.ts) / 1000) * 3.6
			minKmh, maxKmh = math.Min(minKmh, kmh), math.Max(maxKmh, kmh)
			speeds++
		}
	}
	if minKmh < 10-1e-9 || maxKmh > 35+1e-9 {
		t.Errorf("driving speeds in [%.2f, %.2f] km/h, want within [10, 35]", minKmh, maxKmh)
	}
	if speeds < 1000 {
		t.Errorf("got %d speed samples, want ≥ 1000", speeds)
	}
	// Both stops and driving must be common for the dashboard to be
	// interesting.
	if frac := float64(parked) / float64(parked+moving); frac < 0.15 || frac > 0.7 {
		t.Errorf("parked fraction = %.2f, want in [0.15, 0.7]", frac)
	}
}

// TestProjection checks the local plane against the contract's haversine,
// which is what the processor measures distance with.
func TestProjection(t *testing.T) {
	tests := []struct {
		lat0, lon0, x1, y1, x2, y2 float64
	}{
		{41.9794, 2.8214, 0, 0, 4000, 0},
		{41.9794, 2.8214, -4000, -4000, 4000, 4000},
		{41.9794, 2.8214, 100, 200, 113, 205},
		{60, 10, -3000, 1000, 2500, -3500},
		{-33.9, 151.2, 0, -4000, 0, 4000},
	}
	for _, tt := range tests {
		p := newProjection(tt.lat0, tt.lon0)
		lat1, lon1 := p.latLon(tt.x1, tt.y1)
		lat2, lon2 := p.latLon(tt.x2, tt.y2)
		want := math.Hypot(tt.x2-tt.x1, tt.y2-tt.y1)
		got := haversineM(lat1, lon1, lat2, lon2)
		// 0.3 % plus 0.15 m for the rounding of coordinates to 1e-6°.
		if math.Abs(got-want) > 0.003*want+0.15 {
			t.Errorf("centre (%v, %v): haversine = %.2f m, plane = %.2f m", tt.lat0, tt.lon0, got, want)
		}
	}
}

func TestFleet_Duplicates(t *testing.T) {
	evs := mustCollect(t, Config{Couriers: 40, Duration: time.Hour, Seed: 9, DuplicateRate: 0.1})
	type key struct {
		c  string
		ts int64
	}
	orig := map[key]Event{}
	dups, n := 0, 0
	for _, e := range evs {
		k := key{e.Courier, e.TS}
		if !e.Duplicate {
			if _, seen := orig[k]; seen {
				t.Fatalf("%s: two original positions at %d", e.Courier, e.TS)
			}
			orig[k] = e
			n++
			continue
		}
		dups++
		o, ok := orig[k]
		if !ok {
			t.Fatalf("duplicate %s@%d arrived before its original", e.Courier, e.TS)
		}
		if o.Lat != e.Lat || o.Lon != e.Lon || o.Accuracy != e.Accuracy {
			t.Errorf("duplicate %s@%d = %+v, want the original's values %+v", e.Courier, e.TS, e, o)
		}
		if d := e.Arrival - o.Arrival; d < 200 || d > 5000 {
			t.Errorf("duplicate %s@%d arrives %d ms after the original, want 200–5000", e.Courier, e.TS, d)
		}
	}
	if frac := float64(dups) / float64(n); math.Abs(frac-0.1) > 0.01 {
		t.Errorf("duplicate fraction = %.3f, want 0.1 ± 0.01", frac)
	}
}

func TestNew_Defaults(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		check   func(Config) bool
		firstID string
	}{
		{"zero", Config{}, func(c Config) bool {
			return c.Couriers == 140 && c.Interval == 5*time.Second && c.Start == DefaultStart &&
				c.CenterLat == DefaultCenterLat && c.CenterLon == DefaultCenterLon &&
				c.TunnelRate == 1 && c.TunnelFraction == 0.1 && c.Radius == 4000
		}, "c0001"},
		{"negative and NaN", Config{Couriers: -3, Interval: -time.Second, Duration: -time.Hour,
			TunnelRate: -2, DuplicateRate: math.NaN(), BadRate: 7}, func(c Config) bool {
			return c.Couriers == 140 && c.Interval == 5*time.Second && c.Duration == 0 &&
				c.TunnelRate == 0 && c.DuplicateRate == 0 && c.BadRate == 1
		}, "c0001"},
		{"market prefix sanitized", Config{Market: "giro na/é", Couriers: 12345}, func(c Config) bool {
			return c.Market == "giro_na__" && c.Couriers == 12345
		}, "giro_na__-c00001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := New(tt.cfg)
			if got := f.Config(); !tt.check(got) {
				t.Errorf("Config() = %+v, not the expected defaults", got)
			}
			ids := f.CourierIDs()
			if ids[0] != tt.firstID {
				t.Errorf("first id = %q, want %q", ids[0], tt.firstID)
			}
			seen := map[string]bool{}
			for _, id := range ids {
				if seen[id] || !idPattern.MatchString(id) {
					t.Fatalf("id %q repeated or invalid", id)
				}
				seen[id] = true
			}
		})
	}
}

// TestFleet_BoundedMemory runs an unbounded fleet and checks that pending
// events stay within what the maximum delay allows.
func TestFleet_BoundedMemory(t *testing.T) {
	f := New(Config{Couriers: 500, Seed: 2, DuplicateRate: 0.05})
	// Pending events arrive within MaxDelay + 5 s (duplicates) of the
	// earliest next timestamp, and a courier emits at most every 4 s.
	limit := 500 * (int(MaxDelay/time.Second) + 5 + 10) / 4
	for i := range 500 * 720 { // 1 hour of event time
		if _, ok := f.Next(); !ok {
			t.Fatalf("unbounded fleet ended after %d events", i)
		}
		if len(f.slots) > limit {
			t.Fatalf("after %d events %d are pending, want ≤ %d", i, len(f.slots), limit)
		}
	}
}

func BenchmarkNextAppendJSON(b *testing.B) {
	f := New(Config{Couriers: 500, Seed: 1})
	buf := make([]byte, 0, 256)
	// Warm up so the heaps have reached their steady size.
	for range 200_000 {
		f.Next()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e, _ := f.Next()
		buf = AppendJSON(buf[:0], e, true)
	}
}

// Roamers drive round their own centre from the start, the others round
// the fleet's; with no roamers the roaming fields change nothing.
func TestFleet_Roamers(t *testing.T) {
	base := Config{Couriers: 40, Duration: 15 * time.Minute, Seed: 7, TunnelRate: -1}
	roaming := base
	// 40 km north: no path of one disk comes near the other.
	roaming.RoamFraction, roaming.RoamLat, roaming.RoamLon, roaming.RoamRadius = 0.1, DefaultCenterLat+0.36, DefaultCenterLon, 1500
	near := func(e Event, lat, lon, m float64) bool {
		dy := (e.Lat - lat) * 111_195
		dx := (e.Lon - lon) * 111_195 * math.Cos(lat*math.Pi/180)
		return math.Hypot(dx, dy) <= m
	}
	where := map[string][2]int{} // courier -> fixes near the fleet's centre, near the roamers'
	firsts := map[string]Event{}
	f := New(roaming)
	for e, ok := f.Next(); ok; e, ok = f.Next() {
		if e.Raw != nil {
			continue
		}
		w := where[e.Courier]
		// Legs go through a corner: within √2 × the radius, and the noise.
		if near(e, DefaultCenterLat, DefaultCenterLon, DefaultRadius*1.5) {
			w[0]++
		} else if near(e, roaming.RoamLat, roaming.RoamLon, DefaultRadius*1.5) { // its first leg is from a point of the fleet's disk, moved
			w[1]++
		} else {
			t.Fatalf("%s at %v, %v: near neither centre", e.Courier, e.Lat, e.Lon)
		}
		where[e.Courier] = w
		if _, ok := firsts[e.Courier]; !ok {
			firsts[e.Courier] = e
		}
	}
	roamers := 0
	for id, w := range where {
		if w[0] > 0 && w[1] > 0 {
			t.Errorf("%s drove round both centres: %v", id, w)
		}
		if w[1] > 0 {
			roamers++
		}
	}
	if roamers != 4 {
		t.Errorf("%d roamers, want 4 (a tenth of 40)", roamers)
	}
	// Without roamers, the roaming fields change nothing.
	unused := roaming
	unused.RoamFraction = 0
	if !bytes.Equal(replayBytes(t, base), replayBytes(t, unused)) {
		t.Error("a fleet with RoamFraction 0 differs from the same fleet without the roaming fields")
	}
}
