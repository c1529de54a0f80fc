package geo

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/uber/h3-go/v4"
)

// circleRing is a closed ring of n positions on a circle of radius m
// metres round (lat, lon), counter-clockwise, as GeoJSON: the outline of
// a detailed administrative boundary has tens of thousands.
func circleRing(lat, lon, m float64, n int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i <= n; i++ {
		a := 2 * math.Pi * float64(i%n) / float64(n)
		dLat := m * math.Sin(a) / (EarthRadiusM * rad)
		dLon := m * math.Cos(a) / (EarthRadiusM * rad * math.Cos(lat*rad))
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "[%.7f,%.7f]", lon+dLon, lat+dLat)
	}
	b.WriteByte(']')
	return b.String()
}

// BenchmarkParseArea_Vertices: the cost of an outline's vertices, areas
// round Girona at res 9 drawn with more and more; for the largest, H3's
// own fill of the same polygon (h3.PolygonToCells, which tests every cell
// against every edge), which ParseArea used before.
func BenchmarkParseArea_Vertices(b *testing.B) {
	for _, c := range []struct {
		n      int
		radius float64
	}{{1_000, 10_000}, {10_000, 10_000}, {50_000, 10_000}, {50_000, 20_000}} {
		data := []byte(polygonJSON(circleRing(41.98, 2.82, c.radius, c.n)))
		name := fmt.Sprintf("%dvertices-%.0fkm", c.n, c.radius/1000)
		b.Run(name, func(b *testing.B) {
			var a *Area
			for b.Loop() {
				var err error
				if a, err = ParseArea("circle", data, AreaResolution); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(a.Len()), "cells")
		})
		if c.n < 50_000 {
			continue
		}
		b.Run(name+"-h3fill", func(b *testing.B) {
			polys, err := decodeArea("circle", data)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				h3.PolygonToCells(polys[0].geo, AreaResolution)
			}
		})
	}
}

// starRing is a closed, non-convex ring of n positions round (lat, lon):
// radius m metres, every other position pulled in to m*inner.
func starRing(lat, lon, m, inner float64, n int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i <= n; i++ {
		r := m
		if i%2 == 1 {
			r *= inner
		}
		a := 2 * math.Pi * float64(i%n) / float64(n)
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "[%.7f,%.7f]", lon+r*math.Cos(a)/(EarthRadiusM*rad*math.Cos(lat*rad)), lat+r*math.Sin(a)/(EarthRadiusM*rad))
	}
	b.WriteByte(']')
	return b.String()
}

// fillPolygon keeps H3's rule: the cells it returns are exactly those of
// H3's own fill, for convex, concave and holed polygons at two
// resolutions.
func TestFillPolygon_EqualsH3(t *testing.T) {
	cases := []struct {
		name string
		data string
	}{
		{"circle", polygonJSON(circleRing(41.98, 2.82, 5_000, 2_000))},
		{"star", polygonJSON(starRing(41.98, 2.82, 6_000, 0.4, 500))},
		{"star with a hole", polygonJSON(starRing(41.98, 2.82, 6_000, 0.5, 64), circleRing(41.98, 2.82, 1_500, 300))},
		{"square with a hole", polygonJSON(square(2.70, 41.80, 2.80, 41.88), square(2.73, 41.82, 2.76, 41.85))},
	}
	for _, c := range cases {
		polys, err := decodeArea(c.name, []byte(c.data))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, res := range []int{7, 9} {
			want := map[h3.Cell]bool{}
			for _, cell := range h3.PolygonToCells(polys[0].geo, res) {
				want[cell] = true
			}
			got := fillPolygon(polys[0].geo, res)
			if len(got) != len(want) {
				t.Errorf("%s res %d: %d cells, H3 fills %d", c.name, res, len(got), len(want))
			}
			for _, cell := range got {
				if !want[cell] {
					t.Errorf("%s res %d: cell %v is not in H3's fill", c.name, res, cell)
					break
				}
			}
		}
	}
}

// A self-crossing ring is refused with the position of the first edge
// that meets another, and the other's.
func TestParseArea_SelfIntersecting(t *testing.T) {
	// A 50 000-vertex circle with position 30 000 pulled across the
	// circle's centre: its two edges cross the far side.
	big := func() string {
		var pts [][2]float64
		if err := json.Unmarshal([]byte(circleRing(41.98, 2.82, 10_000, 50_000)), &pts); err != nil {
			t.Fatal(err)
		}
		pts[30_000][0] = 2.82 + 2*(2.82-pts[30_000][0]) // well east of the circle
		b, _ := json.Marshal(pts)
		return string(b)
	}()
	cases := []struct {
		name string
		data string
		want string
	}{
		{"bowtie", polygonJSON(`[[2.70,41.80],[2.80,41.90],[2.80,41.80],[2.70,41.90],[2.70,41.80]]`),
			"ring 0 (outer): position 0: the edge from position 0 meets the edge from position 2 at about [2.7500000, 41.8500000]"},
		{"touching itself", polygonJSON(`[[2.70,41.80],[2.80,41.80],[2.75,41.85],[2.80,41.90],[2.70,41.90],[2.75,41.85],[2.70,41.80]]`),
			"ring 0 (outer): position 1: the edge from position 1 meets the edge from position 4 at about [2.7500000, 41.8500000]"},
		{"turning back", polygonJSON(`[[2.70,41.80],[2.80,41.80],[2.75,41.80],[2.75,41.90],[2.70,41.80]]`),
			"ring 0 (outer): position 0: the edge from position 0 meets the edge from position 1 at about [2.8000000, 41.8000000]"},
		{"a hole", polygonJSON(square(2.70, 41.80, 2.80, 41.90), `[[2.72,41.82],[2.78,41.88],[2.78,41.82],[2.72,41.88],[2.72,41.82]]`),
			"ring 1 (hole): position 0: the edge from position 0 meets the edge from position 2"},
		{"50 000 vertices", polygonJSON(big), "ring 0 (outer): position 29999: the edge from position 29999 meets the edge from position 4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseArea("x.geojson", []byte(c.data), 9)
			if !errors.Is(err, ErrAreaRing) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrAreaRing with %q", err, c.want)
			}
		})
	}
	// Repeated positions are not crossings.
	rep := polygonJSON(`[[2.70,41.80],[2.80,41.80],[2.80,41.80],[2.80,41.90],[2.70,41.90],[2.70,41.80]]`)
	if _, err := ParseArea("x.geojson", []byte(rep), 9); err != nil {
		t.Errorf("a repeated position: %v", err)
	}
}

// The checks of a detailed outline look at a few edges per edge, not at
// every pair: 50 000 vertices cost ~10⁵ comparisons for the crossings,
// and a handful of edges per cell centre for the fill.
func TestRing_DetailedOutlineIsCheap(t *testing.T) {
	const n = 50_000
	var pts [][2]float64
	if err := json.Unmarshal([]byte(circleRing(41.98, 2.82, 10_000, n)), &pts); err != nil {
		t.Fatal(err)
	}
	loop := make(h3.GeoLoop, n)
	for i := range loop {
		loop[i] = h3.LatLng{Lat: pts[i][1], Lng: pts[i][0]}
	}
	if _, ok, tests := crossingOf(loop, maxCrossingTests); ok || tests > 4*n {
		t.Errorf("crossings: found %v after %d comparisons, want none after at most %d", ok, tests, 4*n)
	}
	ix := newRingIndex(loop)
	widest, rows := 0, len(ix.start)-1
	for r := range rows {
		widest = max(widest, int(ix.start[r+1]-ix.start[r]))
	}
	if len(ix.edges) > 3*n || len(ix.edges) > 4*rows || widest > 1000 {
		t.Errorf("fill index: %d entries in %d bands (want <= %d, <= 4 a band), %d in the widest (want <= 1000)", len(ix.edges), rows, 3*n, widest)
	}
	// A zigzag of long edges, each spanning the others, exceeds a small
	// budget instead of running on.
	zig := make(h3.GeoLoop, 0, 402)
	for i := range 200 {
		zig = append(zig, h3.LatLng{Lat: 41.8 + 0.1*float64(i%2), Lng: 2.7 + 0.0001*float64(i)})
	}
	zig = append(zig, h3.LatLng{Lat: 41.7, Lng: 2.72}, h3.LatLng{Lat: 41.7, Lng: 2.70})
	if _, _, tests := crossingOf(zig, 1000); tests <= 1000 {
		t.Errorf("zigzag: %d comparisons, want the budget exceeded", tests)
	}
}
