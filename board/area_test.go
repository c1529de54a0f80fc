package board

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/uber/h3-go/v4"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/result"
)

// squareHole is geo's test area: a 0.1° square at Girona's latitude with
// a 0.04° square hole, filled at the service areas' resolution.
const squareHole = "../geo/testdata/square-hole.geojson"

func mustLoadArea(tb testing.TB, path string) *geo.Area {
	tb.Helper()
	a, err := geo.LoadArea(path, geo.AreaResolution)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// segKey is an outline edge by its two end points, in 1e-7 degree, in
// either order.
type segKey [2]vertex

func newSegKey(a, b vertex) segKey {
	if b[0] < a[0] || b[0] == a[0] && b[1] < a[1] {
		a, b = b, a
	}
	return segKey{a, b}
}

// squareHoleEdges returns the edges between the square-hole area's cells
// and the others, found without the board's code: the area's cells are
// H3's fill of the same polygon, and the edge two cells share is the two
// vertices their boundaries have in common.
func squareHoleEdges(tb testing.TB, a *geo.Area) map[segKey]bool {
	tb.Helper()
	ring := func(pts ...[2]float64) h3.GeoLoop {
		var l h3.GeoLoop
		for _, p := range pts {
			l = append(l, h3.LatLng{Lat: p[1], Lng: p[0]})
		}
		return l
	}
	poly := h3.GeoPolygon{
		GeoLoop: ring([2]float64{2.70, 41.80}, [2]float64{2.80, 41.80}, [2]float64{2.80, 41.90}, [2]float64{2.70, 41.90}),
		Holes:   []h3.GeoLoop{ring([2]float64{2.73, 41.83}, [2]float64{2.73, 41.87}, [2]float64{2.77, 41.87}, [2]float64{2.77, 41.83})},
	}
	in := map[h3.Cell]bool{}
	for _, c := range h3.PolygonToCells(poly, geo.AreaResolution) {
		in[c] = true
		if !a.Contains(c) {
			tb.Fatalf("cell %s of the fill is not in the area", c)
		}
	}
	if len(in) != a.Len() {
		tb.Fatalf("the fill has %d cells, the area %d", len(in), a.Len())
	}
	vertices := func(c h3.Cell) map[vertex]bool {
		b := h3.CellToBoundary(c)
		if len(b) != 6 {
			tb.Fatalf("cell %s has %d vertices, want a hexagon's 6", c, len(b))
		}
		vs := map[vertex]bool{}
		for _, p := range b {
			vs[toVertex(p)] = true
		}
		return vs
	}
	edges := map[segKey]bool{}
	for c := range in {
		vc := vertices(c)
		for _, n := range h3.GridDisk(c, 1) {
			if in[n] {
				continue
			}
			var shared []vertex
			for v := range vertices(n) {
				if vc[v] {
					shared = append(shared, v)
				}
			}
			if len(shared) != 2 {
				tb.Fatalf("cells %s and %s share %d vertices, want 2", c, n, len(shared))
			}
			edges[newSegKey(shared[0], shared[1])] = true
		}
	}
	return edges
}

// A market's snapshot carries its service area's outline: every edge
// between the area's cells and the others, the hole's as well as the
// outer ones, joined into two closed rings; a market without an area has
// none, and updates after the snapshot carry no outline.
func TestHub_AreaOutline(t *testing.T) {
	area := mustLoadArea(t, squareHole)
	want := squareHoleEdges(t, area)
	h := newHub(t, func(c *Config) { c.Markets[0].Area = area })
	srv := serve(t, h)
	s := openStream(t, srv.URL+"/board/events")
	_, u := s.next(t)
	if len(u.Areas) != 1 {
		t.Fatalf("snapshot with %d areas, want 1 (market a's)", len(u.Areas))
	}
	a := u.Areas[0]
	if a.Market != 0 || a.Truncated || a.Edges != len(want) {
		t.Errorf("area of market %d, %d edges, truncated %v; want market 0, %d edges, whole", a.Market, a.Edges, a.Truncated, len(want))
	}
	got := map[segKey]bool{}
	var sizes []int
	for i, line := range a.Outline {
		if line[0] != line[len(line)-1] {
			t.Errorf("line %d is not closed: %v … %v", i, line[0], line[len(line)-1])
		}
		sizes = append(sizes, len(line)-1)
		for j := 1; j < len(line); j++ {
			k := newSegKey(toVertex(line[j-1]), toVertex(line[j]))
			if got[k] {
				t.Errorf("edge %v twice", k)
			}
			got[k] = true
		}
	}
	// The outer square's perimeter is 0.4°, the hole's 0.16°.
	if len(sizes) != 2 || sizes[0]+sizes[1] != len(want) || max(sizes[0], sizes[1]) < 2*min(sizes[0], sizes[1]) {
		t.Errorf("rings of %v edges, want an outer ring and a smaller one around the hole, %d edges in all", sizes, len(want))
	}
	for k := range want {
		if !got[k] {
			t.Errorf("edge %v of the outline not sent", k)
		}
	}
	for k := range got {
		if !want[k] {
			t.Errorf("edge %v sent is not on the outline", k)
		}
	}
	t.Logf("%d cells, outline of %d edges in rings of %v", area.Len(), len(want), sizes)

	if _, u := s.next(t); u.Full || u.Areas != nil {
		t.Errorf("an update carries areas %+v", u.Areas)
	}
	if _, u := openStream(t, srv.URL+"/board/events?market=b").next(t); len(u.Areas) != 0 {
		t.Errorf("market b's snapshot carries areas %+v", u.Areas)
	}
	if _, u := openStream(t, srv.URL+"/board/events?market=a").next(t); len(u.Areas) != 1 || u.Areas[0].Market != 0 || u.Areas[0].Edges != len(want) {
		t.Errorf("market a's snapshot carries areas %+v", u.Areas)
	}
}

// Past MaxAreaEdges the outline is cut and says so; at it, it is whole.
func TestOutline_MaxAreaEdges(t *testing.T) {
	area := mustLoadArea(t, squareHole)
	all := newOutline(area, DefaultMaxAreaEdges)
	if all.truncated || all.edges < 100 {
		t.Fatalf("outline of %d edges, truncated %v", all.edges, all.truncated)
	}
	if o := newOutline(area, all.edges); o.truncated || o.edges != all.edges || string(o.rings) != string(all.rings) {
		t.Errorf("at the cap: %d edges, truncated %v; want the whole outline", o.edges, o.truncated)
	}
	for _, n := range []int{all.edges - 1, 10, 1} {
		o := newOutline(area, n)
		if !o.truncated || o.edges != n {
			t.Errorf("cap %d: %d edges, truncated %v", n, o.edges, o.truncated)
		}
	}
	h := newHub(t, func(c *Config) { c.Markets[0].Area = area; c.MaxAreaEdges = 10 })
	_, u := openStream(t, serve(t, h).URL+"/board/events").next(t)
	if len(u.Areas) != 1 || !u.Areas[0].Truncated || u.Areas[0].Edges != 10 {
		t.Fatalf("areas %+v, want one of 10 edges, truncated", u.Areas)
	}
	n := 0
	for _, line := range u.Areas[0].Outline {
		n += len(line) - 1
	}
	if n != 10 {
		t.Errorf("the cut outline draws %d edges, want 10", n)
	}
	if newOutline(nil, 10) != nil {
		t.Error("an outline without an area")
	}
}

// The side first known (Feed.Side) marks a courier outside or inside as
// of its fix; left_area marks it outside, as of the move; entered_area
// clears it; a side dated no later than the one shown is ignored; a
// forgotten courier comes back unmarked.
func TestHub_OutsideTheServiceArea(t *testing.T) {
	type step func(f *Feed)
	pos := func(ts int64) step { return func(f *Feed) { f.Position([]byte("c1"), ts, 41.95, 2.75) } }
	move := func(typ result.Type, ts int64) step {
		return func(f *Feed) {
			f.Result(&result.Record{Type: typ, Courier: "c1", TS: ts, Lat: 41.95, Lon: 2.75})
		}
	}
	left := func(ts int64) step { return move(result.LeftArea, ts) }
	entered := func(ts int64) step { return move(result.EnteredArea, ts) }
	side := func(ts int64, outside bool) step { return func(f *Feed) { f.Side("c1", ts, outside) } }
	forget := func(f *Feed) { f.Forget("c1") }
	tests := []struct {
		name  string
		steps []step
		want  string // "in", "out since TS", or "" (not shown)
	}{
		{"no move", []step{pos(10)}, "in"},
		{"left", []step{pos(10), left(20)}, "out since 20"},
		{"left then entered", []step{pos(10), left(20), entered(30)}, "in"},
		{"left, entered, left again", []step{pos(10), left(20), entered(30), left(40)}, "out since 40"},
		{"entered only", []step{pos(10), entered(30)}, "in"},
		{"an older left after an entered ignored", []step{pos(10), entered(30), left(20)}, "in"},
		{"an older entered after a left ignored", []step{pos(10), left(30), entered(20)}, "out since 30"},
		{"the same left again", []step{pos(10), left(20), left(20)}, "out since 20"},
		{"left of a courier not shown", []step{left(20)}, ""},
		{"forgotten and back", []step{pos(10), left(20), forget, pos(30)}, "in"},
		{"first seen outside", []step{pos(10), side(10, true)}, "out since 10"},
		{"first seen inside", []step{pos(10), side(10, false)}, "in"},
		{"first seen outside, then entered", []step{pos(10), side(10, true), entered(20)}, "in"},
		{"first seen inside, then left", []step{pos(10), side(10, false), left(20)}, "out since 20"},
		{"a side older than the move shown ignored", []step{pos(30), left(20), side(10, false)}, "out since 20"},
		{"side of a courier not shown", []step{side(10, true)}, ""},
		{"forgotten, back and seen outside", []step{pos(10), side(10, true), forget, pos(30), side(30, true)}, "out since 30"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHub(t, nil)
			f := h.Feed("a")
			for _, s := range tt.steps {
				s(f)
			}
			_, u := openStream(t, serve(t, h).URL+"/board/events").next(t)
			got := ""
			for _, c := range u.Couriers {
				got = "in"
				if c.Outside {
					got = fmt.Sprintf("out since %d", c.OutsideSince)
				}
			}
			if len(u.Couriers) > 1 || got != tt.want {
				t.Errorf("got %q (%d couriers), want %q", got, len(u.Couriers), tt.want)
			}
		})
	}
}

// The marking reaches pages in the next update, and so does its clearing.
func TestHub_OutsideInUpdates(t *testing.T) {
	h := newHub(t, nil)
	f := h.Feed("a")
	f.Position([]byte("c1"), 10, 41.95, 2.75)
	s := openStream(t, serve(t, h).URL+"/board/events")
	if _, u := s.next(t); len(u.Couriers) != 1 || u.Couriers[0].Outside {
		t.Fatalf("snapshot %+v, want c1 inside", u.Couriers)
	}
	f.Result(&result.Record{Type: result.LeftArea, Courier: "c1", TS: 20})
	s.until(t, 5*time.Second, func(m map[string]CourierUpdate) bool { return m["c1"].Outside && m["c1"].OutsideSince == 20 })
	f.Result(&result.Record{Type: result.EnteredArea, Courier: "c1", TS: 30})
	s.until(t, 5*time.Second, func(m map[string]CourierUpdate) bool { c, ok := m["c1"]; return ok && !c.Outside })
}

// The outline of one cell is its hexagon, one closed ring of 6 edges.
func TestOutline_OneCell(t *testing.T) {
	cell := h3.LatLngToCell(h3.LatLng{Lat: 41.9794, Lng: 2.8214}, 9)
	o := outlineOf([]h3.Cell{cell}, func(c h3.Cell) bool { return c == cell }, DefaultMaxAreaEdges)
	var a AreaUpdate
	if err := a.UnmarshalJSON(fmt.Appendf(nil, `{"market":0,"edges":%d,"truncated":false,"outline":%s}`, o.edges, o.rings)); err != nil {
		t.Fatal(err)
	}
	b := h3.CellToBoundary(cell)
	if o.edges != 6 || len(a.Outline) != 1 || len(a.Outline[0]) != 7 || a.Outline[0][0] != a.Outline[0][6] {
		t.Fatalf("outline %v of %d edges, want one closed ring of 6", a.Outline, o.edges)
	}
	for _, p := range a.Outline[0] {
		near := false
		for _, q := range b {
			near = near || math.Abs(p.Lat-q.Lat) <= 1e-7 && math.Abs(p.Lng-q.Lng) <= 1e-7
		}
		if !near {
			t.Errorf("point %v is no vertex of the cell %v", p, b)
		}
	}
}
