package geo

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/uber/h3-go/v4"
)

func mustLoadArea(tb testing.TB, path string, res int) *Area {
	tb.Helper()
	a, err := LoadArea(path, res)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// square is a closed ring round [w, e] × [s, n], counter-clockwise.
func square(w, s, e, n float64) string {
	return fmt.Sprintf("[[%v,%v],[%v,%v],[%v,%v],[%v,%v],[%v,%v]]", w, s, e, s, e, n, w, n, w, s)
}

func polygonJSON(rings ...string) string {
	return `{"type":"Polygon","coordinates":[` + strings.Join(rings, ",") + `]}`
}

func featureJSON(geometry string) string {
	return `{"type":"Feature","properties":{},"geometry":` + geometry + `}`
}

func collectionJSON(features ...string) string {
	return `{"type":"FeatureCollection","features":[` + strings.Join(features, ",") + `]}`
}

func TestParseArea_Errors(t *testing.T) {
	good := polygonJSON(square(2.70, 41.80, 2.74, 41.83))
	cases := []struct {
		name string
		data string
		res  int
		err  error
		want []string // in the message, besides the file name
	}{
		{"not JSON", `{"type": "Polygon",`, 9, ErrAreaJSON, []string{"unexpected end of JSON input"}},
		{"not an object", `[1, 2]`, 9, ErrAreaJSON, []string{"cannot unmarshal array"}},
		{"no type", `{}`, 9, ErrAreaType, []string{`no "type" member`}},
		{"wrong type", `{"type":"Point","coordinates":[2.8,41.9]}`, 9, ErrAreaType, []string{`type "Point", want Polygon`}},
		{"feature of the wrong type", collectionJSON(featureJSON(good), featureJSON(`{"type":"LineString","coordinates":[[2.8,41.9],[2.9,41.9]]}`)),
			9, ErrAreaType, []string{"feature 1: ", `geometry type "LineString"`}},
		{"collection member not a feature", collectionJSON(good), 9, ErrAreaType, []string{"feature 0: ", `type "Polygon" in a FeatureCollection, want Feature`}},
		{"feature without geometry", featureJSON("null"), 9, ErrAreaType, []string{"feature 0: ", "no geometry"}},
		{"coordinates not nested right", `{"type":"Polygon","coordinates":[[2.7,41.8],[2.8,41.8]]}`, 9, ErrAreaJSON, []string{"coordinates: ", "cannot unmarshal"}},
		{"no coordinates", `{"type":"MultiPolygon"}`, 9, ErrAreaJSON, []string{`MultiPolygon without "coordinates"`}},
		{"polygon without a ring", `{"type":"Polygon","coordinates":[]}`, 9, ErrAreaRing, []string{"the polygon has no ring"}},
		{"ring of 3 positions", collectionJSON(featureJSON(good), featureJSON(polygonJSON(`[[2.7,41.8],[2.8,41.8],[2.7,41.8]]`))),
			9, ErrAreaRing, []string{"feature 1: ring 0 (outer): 3 positions, a closed ring needs at least 4"}},
		{"ring not closed", polygonJSON(square(2.70, 41.80, 2.74, 41.83), `[[2.71,41.81],[2.72,41.81],[2.72,41.82],[2.71,41.82]]`),
			9, ErrAreaRing, []string{"ring 1 (hole): not closed: the first position is [2.71, 41.81], the last [2.71, 41.82]"}},
		{"ring not closed in a multipolygon", `{"type":"MultiPolygon","coordinates":[[` + square(2.70, 41.80, 2.74, 41.83) + `],[[[2.8,41.8],[2.9,41.8],[2.9,41.9],[2.8,41.9]]]]}`,
			9, ErrAreaRing, []string{"polygon 1: ring 0 (outer): not closed"}},
		{"position of one number", polygonJSON(`[[2.7,41.8],[2.8,41.8],[2.8],[2.7,41.8]]`), 9, ErrAreaCoord,
			[]string{"ring 0 (outer): position 2: want [longitude, latitude], got [2.8]"}},
		{"longitude out of range", featureJSON(polygonJSON(`[[2.7,41.8],[181,41.8],[2.8,41.9],[2.7,41.8]]`)), 9, ErrAreaCoord,
			[]string{"feature 0: ring 0 (outer): position 1: longitude 181 is outside [-180, 180]"}},
		{"latitude out of range", polygonJSON(`[[2.7,41.8],[2.8,41.8],[2.8,-90.5],[2.7,41.8]]`), 9, ErrAreaCoord,
			[]string{"position 2: latitude -90.5 is outside [-90, 90]"}},
		{"coordinate not finite", polygonJSON(`[[2.7,41.8],[2.8,1e400],[2.8,41.9],[2.7,41.8]]`), 9, ErrAreaCoord,
			[]string{"position 1: latitude 1e400 is not a finite number"}},
		{"edge across the antimeridian", polygonJSON(square(179.5, 10, -179.5, 11)), 9, ErrAreaRing,
			[]string{"ring 0 (outer): position 0: ", "crosses the antimeridian"}},
		{"ring on one parallel", polygonJSON(`[[2.7,41.8],[2.8,41.8],[2.75,41.8],[2.7,41.8]]`), 9, ErrAreaRing,
			[]string{"ring 0 (outer): encloses no area"}},
		{"hole outside its polygon", polygonJSON(square(2.70, 41.80, 2.74, 41.83), square(2.72, 41.81, 2.76, 41.82)), 9, ErrAreaRing,
			[]string{"ring 1 (hole): the hole reaches outside its polygon"}},
		{"no polygon in a collection", collectionJSON(), 9, ErrAreaEmpty, []string{"no polygon"}},
		{"no polygon in a multipolygon", `{"type":"MultiPolygon","coordinates":[]}`, 9, ErrAreaEmpty, []string{"no polygon"}},
		// A 40 m triangle holds no res-9 cell centre (cells are ~0.1 km²).
		{"no cell", polygonJSON(`[[2.8,41.9],[2.8005,41.9],[2.8,41.9003],[2.8,41.9]]`), 9, ErrAreaEmpty, []string{"no cell centre at res 9"}},
		{"no cell at res 0", good, 0, ErrAreaEmpty, []string{"no cell centre at res 0"}},
		// 10° × 10° at res 9 is ~10^8 cells: refused before H3 allocates.
		{"too large to fill", featureJSON(polygonJSON(square(0, 40, 10, 50))), 9, ErrAreaTooLarge,
			[]string{"feature 0: its bounding box needs ~", "cells of working memory to fill at res 9"}},
		{"long thin polygon", polygonJSON(square(-60, 40, 60, 40.001)), 9, ErrAreaTooLarge, []string{"working memory"}},
		{"resolution 16", good, 16, ErrAreaResolution, []string{"resolution 16 is outside 0..15"}},
		{"resolution -1", good, -1, ErrAreaResolution, []string{"resolution -1 is outside 0..15"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := ParseArea("bad.geojson", []byte(c.data), c.res)
			if err == nil {
				t.Fatalf("got an area of %d cells, want an error", a.Len())
			}
			if !errors.Is(err, c.err) {
				t.Fatalf("got %v, want %v", err, c.err)
			}
			var ae *AreaError
			if !errors.As(err, &ae) {
				t.Fatalf("got %T, want *AreaError", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "area bad.geojson: ") {
				t.Fatalf("got %q, want it to start with the file", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Fatalf("got %q, want it to contain %q", msg, w)
				}
			}
		})
	}
}

// TestParseArea_CellCap: the cap counts the cells of each polygon and of
// the union so far.
func TestParseArea_CellCap(t *testing.T) {
	data, err := os.ReadFile("testdata/multipolygon.geojson")
	if err != nil {
		t.Fatal(err)
	}
	full, err := ParseArea("multi", data, 9)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		max  int
		want string
	}{
		{100, "feature 0: polygon 0: fills to"},
		{full.Len() - 1, "feature 0: polygon 2: the polygons so far fill to"},
	}
	for _, c := range cases {
		_, err := parseArea("multi", data, 9, AreaBand, c.max)
		if !errors.Is(err, ErrAreaTooLarge) || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), fmt.Sprintf("more than %d", c.max)) {
			t.Fatalf("cap %d: got %v, want ErrAreaTooLarge with %q", c.max, err, c.want)
		}
	}
	if _, err := parseArea("multi", data, 9, AreaBand, full.Len()); err != nil {
		t.Fatalf("cap %d, the area's own size: got %v, want it accepted", full.Len(), err)
	}
}

func TestLoadArea_NoFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.geojson")
	_, err := LoadArea(path, 9)
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "open area "+path+": ") {
		t.Fatalf("got %v, want 'open area %s: ...' wrapping fs.ErrNotExist", err, path)
	}
}

// offsetLon returns lon moved east by m metres at latitude lat.
func offsetLon(lat, lon, m float64) float64 {
	return lon + m/(EarthRadiusM*rad*math.Cos(lat*rad))
}

func TestArea_SquareWithHole(t *testing.T) {
	a := mustLoadArea(t, "testdata/square-hole.geojson", 9)
	if a.Resolution() != 9 || a.Name() != "testdata/square-hole.geojson" {
		t.Fatalf("got resolution %d, name %q", a.Resolution(), a.Name())
	}
	cases := []struct {
		name     string
		lat, lon float64
		side     Side
		contains bool
	}{
		{"well inside", 41.815, 2.75, Inside, true},
		{"in the hole", 41.85, 2.75, Outside, false},
		{"far outside", 42.5, 3.5, Outside, false},
		{"on the outer edge", 41.85, 2.70, Border, false}, // contains depends on the cell: not checked
		{"50 m inside the outer edge", 41.85, offsetLon(41.85, 2.70, 50), Border, false},
		{"50 m outside the outer edge", 41.85, offsetLon(41.85, 2.70, -50), Border, false},
		{"on the hole's edge", 41.85, 2.73, Border, false},
		{"1 km inside the outer edge", 41.85, offsetLon(41.85, 2.70, 1000), Inside, true},
		{"1 km outside the outer edge", 41.85, offsetLon(41.85, 2.70, -1000), Outside, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cell := a.Cell(c.lat, c.lon)
			if got := a.Side(cell); got != c.side {
				t.Fatalf("got %v, want %v", got, c.side)
			}
			if c.side != Border && a.Contains(cell) != c.contains {
				t.Fatalf("Contains: got %v, want %v", a.Contains(cell), c.contains)
			}
		})
	}
}

// fillCells fills the polygons of an area file with H3 directly: the truth
// the Area's own sets are checked against.
func fillCells(tb testing.TB, path string, res int) map[h3.Cell]bool {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	polys, err := decodeArea(path, data)
	if err != nil {
		tb.Fatal(err)
	}
	in := make(map[h3.Cell]bool)
	for _, p := range polys {
		for _, c := range h3.PolygonToCells(p.geo, res) {
			in[c] = true
		}
	}
	return in
}

// TestArea_SideFollowsTheBand checks Side against its definition, cell by
// cell, round the whole outline: Inside when the cell and every cell within
// band rings are in the area, Outside when none is, Border otherwise.
func TestArea_SideFollowsTheBand(t *testing.T) {
	cases := []struct {
		path      string
		res, band int
	}{
		{"../demo/girona-area.geojson", 9, 1},
		{"../demo/girona-area.geojson", 10, 1},
		{"testdata/square-hole.geojson", 9, 2},
		{"testdata/square-hole.geojson", 9, 0},
		{"testdata/multipolygon.geojson", 9, 3},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s res %d band %d", filepath.Base(c.path), c.res, c.band), func(t *testing.T) {
			data, err := os.ReadFile(c.path)
			if err != nil {
				t.Fatal(err)
			}
			a, err := parseArea(c.path, data, c.res, c.band, MaxAreaCells)
			if err != nil {
				t.Fatal(err)
			}
			in := fillCells(t, c.path, c.res)
			if a.Len() != len(in) {
				t.Fatalf("Len: got %d, want %d", a.Len(), len(in))
			}
			seen := make(map[h3.Cell]bool)
			counts := make(map[Side]int)
			for c0 := range in {
				for _, x := range h3.GridDisk(c0, c.band+2) {
					if seen[x] {
						continue
					}
					seen[x] = true
					inside, outside := 0, 0
					for _, y := range h3.GridDisk(x, c.band) {
						if in[y] {
							inside++
						} else {
							outside++
						}
					}
					want := Border
					switch {
					case outside == 0:
						want = Inside
					case inside == 0:
						want = Outside
					}
					if got := a.Side(x); got != want {
						t.Fatalf("cell %v (in the area: %v): got %v, want %v", x, in[x], got, want)
					}
					if a.Contains(x) != in[x] {
						t.Fatalf("cell %v: Contains got %v, want %v", x, a.Contains(x), in[x])
					}
					counts[want]++
				}
			}
			if counts[Inside] == 0 || counts[Outside] == 0 || (c.band > 0) != (counts[Border] > 0) {
				t.Fatalf("sides seen %v: want each of inside, outside, and border when the band is > 0", counts)
			}
		})
	}
}

func TestArea_Union(t *testing.T) {
	for _, path := range []string{"testdata/multipolygon.geojson", "testdata/featurecollection.geojson"} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			a := mustLoadArea(t, path, 9)
			in := fillCells(t, path, 9)
			if a.Len() != len(in) {
				t.Fatalf("Len: got %d, want %d", a.Len(), len(in))
			}
			// The middle of the west square, and of the east part.
			for _, p := range [][2]float64{{41.815, 2.72}, {41.815, 2.82}} {
				if got := a.Side(a.Cell(p[0], p[1])); got != Inside {
					t.Fatalf("%v: got %v, want inside", p, got)
				}
			}
			if got := a.Side(a.Cell(41.815, 2.77)); got != Outside {
				t.Fatalf("between the parts: got %v, want outside", got)
			}
		})
	}
	// In the multipolygon the third square overlaps the second: the union
	// holds each shared cell once.
	data, err := os.ReadFile("testdata/multipolygon.geojson")
	if err != nil {
		t.Fatal(err)
	}
	polys, err := decodeArea("multi", data)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, p := range polys {
		sum += len(h3.PolygonToCells(p.geo, 9))
	}
	if a := mustLoadArea(t, "testdata/multipolygon.geojson", 9); a.Len() >= sum {
		t.Fatalf("overlapping squares: got %d cells, want fewer than the %d of the parts", a.Len(), sum)
	}
}

// ringAreaKm2 is the area of a ring of [lon, lat] degrees on the sphere of
// EarthRadiusM: R²/2 |Σ (λ2−λ1)(2 + sin φ1 + sin φ2)|, exact for edges
// along parallels and within 0.1 % for a city-sized polygon.
func ringAreaKm2(ring h3.GeoLoop) float64 {
	s := 0.0
	for i, p := range ring {
		q := ring[(i+1)%len(ring)]
		s += (q.Lng - p.Lng) * rad * (2 + math.Sin(p.Lat*rad) + math.Sin(q.Lat*rad))
	}
	r := EarthRadiusM / 1000
	return math.Abs(s) * r * r / 2
}

// TestArea_Girona: the hand-drawn outline loads, holds the old town, not
// Barcelona, and its cells cover the drawn area to within a few percent.
func TestArea_Girona(t *testing.T) {
	const path = "../demo/girona-area.geojson"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	polys, err := decodeArea(path, data)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(polys[0].geo.GeoLoop); len(polys) != 1 || n < 15 || n > 30 {
		t.Fatalf("got %d polygons, the first of %d vertices: want one of 15 to 30", len(polys), n)
	}
	drawn := ringAreaKm2(polys[0].geo.GeoLoop)
	if drawn < 25 || drawn > 40 {
		t.Fatalf("drawn area %.1f km²: want 25 to 40", drawn)
	}
	for _, res := range []int{9, 10} {
		a := mustLoadArea(t, path, res)
		cells := 0.0
		for c := range fillCells(t, path, res) {
			cells += h3.CellAreaKm2(c)
		}
		if math.Abs(cells-drawn)/drawn > 0.05 {
			t.Fatalf("res %d: %d cells cover %.2f km², want within 5%% of the drawn %.2f", res, a.Len(), cells, drawn)
		}
		t.Logf("res %d: drawn %.2f km², %d cells covering %.2f km²", res, drawn, a.Len(), cells)
		if got := a.Side(a.Cell(41.9869, 2.8246)); got != Inside { // the cathedral
			t.Fatalf("res %d: Girona cathedral: got %v, want inside", res, got)
		}
		if got := a.Side(a.Cell(41.3874, 2.1686)); got != Outside {
			t.Fatalf("res %d: Barcelona: got %v, want outside", res, got)
		}
	}
}

// TestArea_BorderWidth measures how far a position must move across the
// outline, on transects across the square's west and south edges, for its
// side to go from Outside to Inside: the band's real width, which the
// AreaBand comment quotes.
func TestArea_BorderWidth(t *testing.T) {
	a := mustLoadArea(t, "testdata/square-hole.geojson", 9)
	const stepM = 2.0
	lo, hi := math.Inf(1), 0.0
	measure := func(name string, start func(i int) (lat, lon float64), step func(lat, lon float64) (float64, float64)) {
		for i := range 40 {
			lat, lon := start(i)
			lastOut, firstIn := -1, -1
			for k := range 1500 { // 3 km
				switch a.Side(a.Cell(lat, lon)) {
				case Outside:
					lastOut = k
				case Inside:
					if firstIn < 0 {
						firstIn = k
					}
				}
				lat, lon = step(lat, lon)
			}
			if lastOut < 0 || firstIn < 0 || lastOut > firstIn {
				t.Fatalf("%s transect %d: last outside at %d, first inside at %d (steps of %v m): want outside, then inside", name, i, lastOut, firstIn, stepM)
			}
			w := float64(firstIn-lastOut) * stepM
			lo, hi = min(lo, w), max(hi, w)
		}
	}
	// West to east across the west edge (lon 2.70), 1.5 km each side.
	measure("west edge", func(i int) (float64, float64) {
		lat := 41.81 + float64(i)*0.0005
		return lat, offsetLon(lat, 2.70, -1500)
	}, func(lat, lon float64) (float64, float64) { return lat, offsetLon(lat, lon, stepM) })
	// South to north across the south edge (lat 41.80).
	dLat := stepM / (EarthRadiusM * rad)
	measure("south edge", func(i int) (float64, float64) {
		return 41.80 - 1500/(EarthRadiusM*rad), 2.71 + float64(i)*0.0007
	}, func(lat, lon float64) (float64, float64) { return lat + dLat, lon })
	t.Logf("res 9, band %d: outside to inside takes %.0f to %.0f m", AreaBand, lo, hi)
	if lo < 400 {
		t.Fatalf("the shortest move from outside to inside is %.0f m: want at least 400 m at res 9", lo)
	}
}

func TestArea_SideOfOddCells(t *testing.T) {
	a := mustLoadArea(t, "testdata/square-hole.geojson", 9)
	inside := a.Cell(41.815, 2.75)
	if a.Side(inside) != Inside {
		t.Fatalf("well inside: got %v, want inside", a.Side(inside))
	}
	cases := []struct {
		name string
		c    h3.Cell
		want Side
	}{
		{"zero", 0, Border},
		{"a point that is not finite", a.Cell(math.NaN(), 2.75), Border},
		{"negative", -1, Border},
		{"a directed edge", h3.Cell(inside.DirectedEdges()[0]), Border},
		{"coarser", inside.Parent(7), Border},
		{"finer: its parent's side", h3.LatLngToCell(h3.NewLatLng(41.815, 2.75), 12), Inside},
		{"finer, outside", h3.LatLngToCell(h3.NewLatLng(41.85, 2.75), 11), Outside},
	}
	for _, c := range cases {
		if got := a.Side(c.c); got != c.want {
			t.Fatalf("%s (%v): got %v, want %v", c.name, c.c, got, c.want)
		}
	}
	// cellRes reads the bits H3 does.
	for _, res := range []int{0, 5, 9, 15} {
		c := h3.LatLngToCell(h3.NewLatLng(41.9, 2.8), res)
		if r, ok := cellRes(c); !ok || r != c.Resolution() {
			t.Fatalf("cellRes(%v) = %d, %v: want %d, true", c, r, ok, c.Resolution())
		}
	}
}

func TestSide_String(t *testing.T) {
	for s, want := range map[Side]string{Inside: "inside", Outside: "outside", Border: "border", 0: "Side(0)"} {
		if got := s.String(); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}

// TestFillLimit: the estimate of H3's working memory is H3's own (h3-go
// returns the fill in a slice of that capacity), and for a square at
// Girona's latitude small enough that a square at the MaxAreaCells cap is
// not refused for it.
func TestFillLimit(t *testing.T) {
	for _, path := range []string{"../demo/girona-area.geojson", "testdata/square-hole.geojson", "testdata/multipolygon.geojson"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		polys, err := decodeArea(path, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range []int{5, 9} {
			for i, p := range polys {
				if got, want := newFillLimit(res).cells(p.geo), cap(h3.PolygonToCells(p.geo, res)); got != float64(want) {
					t.Fatalf("%s polygon %d res %d: estimate %v, H3 allocates %d", path, i, res, got, want)
				}
			}
		}
	}
	// A square of 11 km a side at 41.8°N.
	w, s, n := 2.7, 41.8, 41.9
	e := offsetLon(s, w, 11120)
	p := h3.GeoPolygon{GeoLoop: h3.GeoLoop{{Lat: s, Lng: w}, {Lat: s, Lng: e}, {Lat: n, Lng: e}, {Lat: n, Lng: w}}}
	cells := float64(len(h3.PolygonToCells(p, 9)))
	ratio := newFillLimit(9).cells(p) / cells
	t.Logf("res 9: a square of %v cells needs %.2f times as many of working memory", cells, ratio)
	if ratio < 1 || ratio*MaxAreaCells > maxFillScratch {
		t.Fatalf("square: estimate %.2f times its cells: want 1 to %d", ratio, maxFillScratch/MaxAreaCells)
	}
}

// FuzzParseArea: no input panics, every refusal is an *AreaError, and
// every area accepted has cells, the first of them in it.
func FuzzParseArea(f *testing.F) {
	paths, err := filepath.Glob("testdata/*.geojson")
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint8(10)) // res 9
	}
	f.Add([]byte(polygonJSON(square(179, 89, 180, 90))), uint8(6))
	f.Add([]byte(polygonJSON(`[[2.7,41.8],[2.8,1e400],[2.8,41.9],[2.7,41.8]]`)), uint8(10))
	f.Fuzz(func(t *testing.T, data []byte, r uint8) {
		res := int(r%17) - 1 // -1..15
		a, err := ParseArea("fuzz", data, res)
		if err != nil {
			var ae *AreaError
			if !errors.As(err, &ae) {
				t.Fatalf("got %T %v, want *AreaError", err, err)
			}
			return
		}
		if a.Len() <= 0 || a.Resolution() != res {
			t.Fatalf("accepted an area of %d cells at res %d, want > 0 cells at res %d", a.Len(), a.Resolution(), res)
		}
		for c, s := range a.state {
			if (s == stateInside || s == stateBorderIn) != a.Contains(c) || a.Side(c) == 0 {
				t.Fatalf("cell %v: state %d, Contains %v, Side %v", c, s, a.Contains(c), a.Side(c))
			}
		}
	})
}

// benchPoints returns n positions on a grid over Girona and its
// surroundings: a mix of inside, border and outside.
func benchPoints(n int) [][2]float64 {
	side := int(math.Sqrt(float64(n)))
	pts := make([][2]float64, 0, side*side)
	for i := range side {
		for j := range side {
			pts = append(pts, [2]float64{41.93 + 0.09*float64(i)/float64(side), 2.77 + 0.10*float64(j)/float64(side)})
		}
	}
	return pts
}

// BenchmarkAreaSide: the per-position cost of placing a courier, the cell
// (LatLngToCell) and its Side, and of Side alone.
func BenchmarkAreaSide(b *testing.B) {
	a := mustLoadArea(b, "../demo/girona-area.geojson", 9)
	pts := benchPoints(4096)
	b.Run("cell+side", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for i := 0; b.Loop(); i++ {
			p := pts[i%len(pts)]
			if a.Side(a.Cell(p[0], p[1])) == Inside {
				n++
			}
		}
		runtime.KeepAlive(n)
	})
	cells := make([]h3.Cell, len(pts))
	for i, p := range pts {
		cells[i] = a.Cell(p[0], p[1])
	}
	b.Run("side", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for i := 0; b.Loop(); i++ {
			if a.Side(cells[i%len(cells)]) == Inside {
				n++
			}
		}
		runtime.KeepAlive(n)
	})
}

// BenchmarkLoadArea500km2 loads a 500 km² square at res 9 and reports its
// cells and the heap the loaded Area keeps (retained-B, after a GC).
func BenchmarkLoadArea500km2(b *testing.B) {
	// 22.36 km a side: 0.2011° of latitude, and of longitude at 41.98°N
	// 0.2011/cos(41.98°); ringAreaKm2 checks it.
	const s, w = 41.88, 2.70
	side := math.Sqrt(500) * 1000
	n := s + side/(EarthRadiusM*rad)
	e := offsetLon((s+n)/2, w, side)
	if km2 := ringAreaKm2(h3.GeoLoop{{Lat: s, Lng: w}, {Lat: s, Lng: e}, {Lat: n, Lng: e}, {Lat: n, Lng: w}}); math.Abs(km2-500) > 2 {
		b.Fatalf("square of %.1f km², want 500", km2)
	}
	path := filepath.Join(b.TempDir(), "square.geojson")
	if err := os.WriteFile(path, []byte(polygonJSON(square(w, s, e, n))), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var a *Area
	for b.Loop() {
		a = mustLoadArea(b, path, 9)
	}
	a = nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	a = mustLoadArea(b, path, 9)
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	border := 0
	for _, st := range a.state {
		if st != stateInside {
			border++
		}
	}
	b.ReportMetric(float64(a.Len()), "cells")
	b.ReportMetric(float64(border), "border-cells")
	b.ReportMetric(kept, "retained-B")
	b.ReportMetric(kept/float64(len(a.state)), "B/stored-cell")
	runtime.KeepAlive(a)
}
