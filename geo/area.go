package geo

// This file owns a market's service area: a GeoJSON outline read once at
// start, filled into H3 cells, and the three-way Side of a cell that lets a
// caller ignore GPS noise along the outline. It keeps no per-courier state;
// the caller keeps each courier's last definite side.

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/uber/h3-go/v4"
)

const (
	// MaxAreaCells caps the cells of an area. At res 9 (0.105 km² a cell)
	// it is about 210 000 km², fifty times a large metropolitan area. A
	// stored cell costs 20 to 40 bytes (a map; 29 in
	// BenchmarkLoadArea500km2), so the cap bounds an area to ~80 MB; it
	// loads at ~3.6 µs a cell, ~7 s at the cap.
	MaxAreaCells = 2_000_000

	// AreaBand is the width, in H3 rings, of the border on each side of the
	// outline (see Side). With 1 ring at res 9 (edges ~174 m, centres
	// ~300 m apart) the border is the two rows of cells that touch across
	// the outline, and a position must move 520 to 950 m across it to go
	// from Outside to Inside (TestArea_BorderWidth): far more than the tens
	// of metres phone GPS wanders.
	AreaBand = 1

	// maxFillScratch caps the working arrays of H3's fill of one polygon,
	// in cells (24 bytes each, freed after the fill: ~190 MB at the cap).
	// H3 v4.1.0 sizes them from the outer ring's bounding box, not the
	// polygon's area, so a long thin polygon needs far more than its cells;
	// this refuses it before H3 allocates. A square at Girona's latitude
	// needs 3.7 times its cells (TestFillLimit), so one near MaxAreaCells
	// still fills; a larger or thinner polygon must be split into several.
	maxFillScratch = 4 * MaxAreaCells
)

// Errors an area is refused with, each wrapped in an *AreaError that says
// where in the file.
var (
	// ErrAreaJSON: the file is not JSON, or a member has the wrong JSON
	// shape (coordinates that are not arrays of arrays of numbers).
	ErrAreaJSON = errors.New("not GeoJSON")
	// ErrAreaType: a GeoJSON type other than Polygon, MultiPolygon, Feature
	// or FeatureCollection, a feature whose geometry is another type or
	// null, or a collection member that is not a Feature.
	ErrAreaType = errors.New("wrong GeoJSON type")
	// ErrAreaRing: a ring that cannot outline an area: fewer than 4
	// positions, not closed, all on one meridian or parallel, an edge that
	// crosses the antimeridian, a ring that crosses or touches itself
	// (the error's Position is the first of the two edges that meet), or
	// a hole outside its polygon's bounds.
	ErrAreaRing = errors.New("bad ring")
	// ErrAreaCoord: a position that is not [longitude, latitude] in
	// range: longitude in [-180, 180], latitude in [-90, 90], finite.
	ErrAreaCoord = errors.New("bad position")
	// ErrAreaEmpty: no polygon at all, or polygons that hold no cell
	// centre at the area's resolution.
	ErrAreaEmpty = errors.New("empty area")
	// ErrAreaTooLarge: more than MaxAreaCells cells, or a polygon whose
	// bounding box would make H3's fill allocate too much.
	ErrAreaTooLarge = errors.New("area too large")
	// ErrAreaResolution: a resolution outside 0..15.
	ErrAreaResolution = errors.New("bad resolution")
)

// AreaError is why an area file was refused and where. The indexes are -1
// where they do not apply.
type AreaError struct {
	Name     string // the file, or the name given to ParseArea
	Feature  int    // index in the FeatureCollection; 0 for a lone Feature
	Polygon  int    // index in a MultiPolygon
	Ring     int    // 0 is the outer ring, 1.. the holes
	Position int    // index in the ring
	Detail   string // what is wrong, with the offending value
	Err      error  // one of the ErrArea sentinels
}

func (e *AreaError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "area %s: ", e.Name)
	if e.Feature >= 0 {
		fmt.Fprintf(&b, "feature %d: ", e.Feature)
	}
	if e.Polygon >= 0 {
		fmt.Fprintf(&b, "polygon %d: ", e.Polygon)
	}
	switch {
	case e.Ring == 0:
		b.WriteString("ring 0 (outer): ")
	case e.Ring > 0:
		fmt.Fprintf(&b, "ring %d (hole): ", e.Ring)
	}
	if e.Position >= 0 {
		fmt.Fprintf(&b, "position %d: ", e.Position)
	}
	b.WriteString(e.Detail)
	return b.String()
}

func (e *AreaError) Unwrap() error { return e.Err }

// Side is where a cell is relative to an area, with a border band that
// absorbs GPS noise. The zero Side is no side: nothing has been placed yet.
type Side uint8

const (
	// Inside: the cell is in the area and no cell within AreaBand rings
	// of it is outside.
	Inside Side = iota + 1
	// Outside: the cell is not in the area and no cell within AreaBand
	// rings of it is inside.
	Outside
	// Border: anything else, within the band on either side of the
	// outline; also a value that is not a cell. A caller keeps a courier's
	// last Inside or Outside and changes it only on the other one, so
	// noise along the outline never flips it.
	Border
)

func (s Side) String() string {
	switch s {
	case Inside:
		return "inside"
	case Outside:
		return "outside"
	case Border:
		return "border"
	}
	return "Side(" + strconv.Itoa(int(s)) + ")"
}

// cellState is what an Area stores of a cell it knows; cells it does not
// store are Outside.
type cellState uint8

const (
	stateInside    cellState = iota + 1 // in the area, away from the outline
	stateBorderIn                       // in the area, within the band
	stateBorderOut                      // outside the area, within the band
)

// Area is a service area filled into H3 cells. It is read-only after
// LoadArea, so any number of goroutines may use it.
type Area struct {
	name  string
	res   int
	cells int // cells in the area, border ones included
	// state holds the area's cells and the outer border; one lookup
	// answers Side. A map rather than a sorted slice (9 bytes a cell): one
	// probe instead of ~13 for a city, and a 500 km² city at res 9 still
	// keeps only ~150 KB.
	state map[h3.Cell]cellState
}

// LoadArea reads the GeoJSON file at path and fills it into cells at
// resolution res (the engine uses 9, its results' resolution). See
// ParseArea for what the file may hold.
func LoadArea(path string, res int) (*Area, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("open area %s: %w", path, err)
	}
	return ParseArea(path, data, res)
}

// ParseArea reads a GeoJSON area named name (for errors) and fills it into
// cells at resolution res. data is a Polygon or MultiPolygon geometry, a
// Feature with one, or a FeatureCollection of such Features; all their
// polygons are united and their holes (inner rings) left out. A cell is in
// the area when its centre is (H3's rule), so the outline is honoured to
// within a cell. Positions are [longitude, latitude] in degrees (RFC 7946;
// an altitude is ignored). Winding order is not checked, and a polygon
// that crosses the antimeridian must be split there, as RFC 7946 asks. A
// ring must not cross or touch itself; rings of one polygon are not
// checked against one another. An outline of 50 000 vertices loads in
// ~0.1 s (BenchmarkParseArea_Vertices).
//
// Errors are *AreaError, wrapping one of the ErrArea sentinels.
func ParseArea(name string, data []byte, res int) (*Area, error) {
	return parseArea(name, data, res, AreaBand, MaxAreaCells)
}

func parseArea(name string, data []byte, res, band, maxCells int) (*Area, error) {
	if res < 0 || res > h3.MaxResolution {
		return nil, &AreaError{Name: name, Feature: -1, Polygon: -1, Ring: -1, Position: -1,
			Detail: fmt.Sprintf("resolution %d is outside 0..%d", res, h3.MaxResolution), Err: ErrAreaResolution}
	}
	polys, err := decodeArea(name, data)
	if err != nil {
		return nil, err
	}
	in := make(map[h3.Cell]struct{})
	scratch := newFillLimit(res)
	for _, p := range polys {
		if need := scratch.cells(p.geo); need > maxFillScratch {
			return nil, p.at.err(ErrAreaTooLarge, -1, -1,
				"its bounding box needs ~%.0f cells of working memory to fill at res %d, more than %d: split it into smaller polygons", need, res, maxFillScratch)
		}
		cells := fillPolygon(p.geo, res)
		if len(cells) > maxCells {
			return nil, p.at.err(ErrAreaTooLarge, -1, -1, "fills to %d cells at res %d, more than %d", len(cells), res, maxCells)
		}
		for _, c := range cells {
			in[c] = struct{}{}
		}
		if len(in) > maxCells {
			return nil, p.at.err(ErrAreaTooLarge, -1, -1, "the polygons so far fill to %d cells at res %d, more than %d", len(in), res, maxCells)
		}
	}
	if len(in) == 0 {
		return nil, &AreaError{Name: name, Feature: -1, Polygon: -1, Ring: -1, Position: -1,
			Detail: fmt.Sprintf("no cell centre at res %d lies within it (a cell is ~%.3g km²)", res, h3.HexagonAreaAvgKm2(res)),
			Err:    ErrAreaEmpty}
	}
	return &Area{name: name, res: res, cells: len(in), state: border(in, band)}, nil
}

// border returns the state of each cell in the area and of each outside
// cell within band rings of it. A cell is on the border when a cell of the
// other side is within band rings of it; for a cell in the area that is
// when it is within band-1 rings of an area cell touching the outside (and
// likewise for an outside cell), so the band is grown from the two rows of
// cells that touch across the outline.
func border(in map[h3.Cell]struct{}, band int) map[h3.Cell]cellState {
	state := make(map[h3.Cell]cellState, len(in)+len(in)/8)
	var edgeIn []h3.Cell
	edgeOut := make(map[h3.Cell]struct{})
	for c := range in {
		state[c] = stateInside
		touches := false
		for _, n := range h3.GridDisk(c, 1) {
			if _, ok := in[n]; !ok {
				touches = true
				edgeOut[n] = struct{}{}
			}
		}
		if touches {
			edgeIn = append(edgeIn, c)
		}
	}
	if band <= 0 {
		return state
	}
	for _, e := range edgeIn {
		for _, c := range h3.GridDisk(e, band-1) {
			if _, ok := in[c]; ok {
				state[c] = stateBorderIn
			}
		}
	}
	for e := range edgeOut {
		for _, c := range h3.GridDisk(e, band-1) {
			if _, ok := in[c]; !ok {
				state[c] = stateBorderOut
			}
		}
	}
	return state
}

// Name is the file the area was read from.
func (a *Area) Name() string { return a.name }

// Resolution is the H3 resolution the area is filled at.
func (a *Area) Resolution() int { return a.res }

// Len is the number of cells in the area.
func (a *Area) Len() int { return a.cells }

// Cells yields the area's cells (those Contains reports), Len of them, in
// no particular order. The fleet board draws the area's outline from them.
func (a *Area) Cells() iter.Seq[h3.Cell] {
	return func(yield func(h3.Cell) bool) {
		for c, s := range a.state {
			if (s == stateInside || s == stateBorderIn) && !yield(c) {
				return
			}
		}
	}
}

// Cell returns the cell at the area's resolution holding the point, in
// degrees; 0, which Side takes as Border, when the point is not finite.
// It costs about 1.5 µs.
func (a *Area) Cell(lat, lon float64) h3.Cell {
	return h3.LatLngToCell(h3.NewLatLng(lat, lon), a.res)
}

// Contains reports whether c, a cell at the area's resolution, is in the
// area, border or not.
func (a *Area) Contains(c h3.Cell) bool {
	s := a.state[c]
	return s == stateInside || s == stateBorderIn
}

// Side returns where c is relative to the area. c should be at the area's
// resolution (Cell gives one); a finer cell is taken as its parent at a
// cost of a cgo call, and a coarser one, or a value that is not a cell
// (such as the 0 of a point that is not finite), is Border: it cannot
// move a courier's side. At the area's resolution it is one map lookup
// and allocates nothing.
func (a *Area) Side(c h3.Cell) Side {
	if r, ok := cellRes(c); !ok || r < a.res {
		return Border
	} else if r > a.res {
		c = c.Parent(a.res)
	}
	switch a.state[c] {
	case stateInside:
		return Inside
	case stateBorderIn, stateBorderOut:
		return Border
	}
	return Outside
}

// cellRes reads a cell's resolution from its bits (H3 index layout: bit 63
// reserved 0, bits 59-62 the mode, 1 for a cell, bits 52-55 the
// resolution) without a cgo call.
func cellRes(c h3.Cell) (int, bool) {
	if c <= 0 || uint64(c)>>59 != 1 {
		return 0, false
	}
	return int(uint64(c) >> 52 & 0xf), true
}

// fillLimit estimates the working memory of H3's fill as H3 v4.1.0 sizes
// it (maxPolygonToCellsSize): cells for the outer ring's bounding box,
// counted with 80% of a pentagon's area, at least one per vertex, plus 12.
type fillLimit struct {
	pentagonKm2 float64
}

func newFillLimit(res int) fillLimit {
	p := h3.Pentagons(res)[0]
	r := h3.GreatCircleDistanceKm(h3.CellToLatLng(p), h3.CellToBoundary(p)[0])
	return fillLimit{pentagonKm2: 0.8 * 2.59807621135 * r * r}
}

// cells returns the estimate for p, whose rings decodeArea has checked:
// no edge crosses the antimeridian and the outer ring spans some latitude
// and longitude, so the bounding box is plain and the estimate finite.
func (l fillLimit) cells(p h3.GeoPolygon) float64 {
	s, n, w, e := bounds(p.GeoLoop)
	d := h3.GreatCircleDistanceKm(h3.NewLatLng(n, e), h3.NewLatLng(s, w))
	dLat, dLon := n-s, e-w
	ratio := max(dLat, dLon) / min(dLat, dLon)
	est := max(1, math.Ceil(d*d/min(3, ratio)/l.pentagonKm2))
	verts := len(p.GeoLoop)
	for _, h := range p.Holes {
		verts += len(h)
	}
	return max(est, float64(verts)) + 12
}

// bounds returns a ring's south, north, west and east in degrees.
func bounds(ring h3.GeoLoop) (s, n, w, e float64) {
	s, n, w, e = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, p := range ring {
		s, n = min(s, p.Lat), max(n, p.Lat)
		w, e = min(w, p.Lng), max(e, p.Lng)
	}
	return s, n, w, e
}

// polygon is one polygon of the area, ready for H3, and where it was read.
type polygon struct {
	geo h3.GeoPolygon
	at  where
}

// where is a place in an area file, for errors.
type where struct {
	name             string
	feature, polygon int // -1 where they do not apply
}

func (w where) err(sentinel error, ring, pos int, format string, args ...any) *AreaError {
	return &AreaError{Name: w.name, Feature: w.feature, Polygon: w.polygon, Ring: ring, Position: pos,
		Detail: fmt.Sprintf(format, args...), Err: sentinel}
}

// geoObject holds the members of a GeoJSON object the area reads.
type geoObject struct {
	Type        string            `json:"type"`
	Coordinates json.RawMessage   `json:"coordinates"`
	Geometry    json.RawMessage   `json:"geometry"`
	Features    []json.RawMessage `json:"features"`
}

// decodeArea returns the polygons of an area file, each checked.
func decodeArea(name string, data []byte) ([]polygon, error) {
	top := where{name: name, feature: -1, polygon: -1}
	var o geoObject
	if err := json.Unmarshal(data, &o); err != nil {
		return nil, top.err(ErrAreaJSON, -1, -1, "%v", err)
	}
	var polys []polygon
	switch o.Type {
	case "Polygon", "MultiPolygon":
		ps, err := decodeGeometry(top, o)
		if err != nil {
			return nil, err
		}
		polys = ps
	case "Feature":
		top.feature = 0
		ps, err := decodeFeature(top, o)
		if err != nil {
			return nil, err
		}
		polys = ps
	case "FeatureCollection":
		for i, raw := range o.Features {
			at := top
			at.feature = i
			var f geoObject
			if err := json.Unmarshal(raw, &f); err != nil {
				return nil, at.err(ErrAreaJSON, -1, -1, "%v", err)
			}
			if f.Type != "Feature" {
				return nil, at.err(ErrAreaType, -1, -1, "type %q in a FeatureCollection, want Feature", f.Type)
			}
			ps, err := decodeFeature(at, f)
			if err != nil {
				return nil, err
			}
			polys = append(polys, ps...)
		}
	case "":
		return nil, top.err(ErrAreaType, -1, -1, `no "type" member: want a GeoJSON Polygon, MultiPolygon, Feature or FeatureCollection`)
	default:
		return nil, top.err(ErrAreaType, -1, -1, "type %q, want Polygon, MultiPolygon, Feature or FeatureCollection", o.Type)
	}
	if len(polys) == 0 {
		return nil, top.err(ErrAreaEmpty, -1, -1, "no polygon")
	}
	return polys, nil
}

func decodeFeature(at where, f geoObject) ([]polygon, error) {
	if len(f.Geometry) == 0 || string(f.Geometry) == "null" {
		return nil, at.err(ErrAreaType, -1, -1, "the feature has no geometry")
	}
	var g geoObject
	if err := json.Unmarshal(f.Geometry, &g); err != nil {
		return nil, at.err(ErrAreaJSON, -1, -1, "geometry: %v", err)
	}
	if g.Type != "Polygon" && g.Type != "MultiPolygon" {
		return nil, at.err(ErrAreaType, -1, -1, "geometry type %q, want Polygon or MultiPolygon", g.Type)
	}
	return decodeGeometry(at, g)
}

// decodeGeometry decodes a Polygon or MultiPolygon.
func decodeGeometry(at where, g geoObject) ([]polygon, error) {
	if len(g.Coordinates) == 0 {
		return nil, at.err(ErrAreaJSON, -1, -1, `%s without "coordinates"`, g.Type)
	}
	if g.Type == "Polygon" {
		var rings [][][]json.Number
		if err := json.Unmarshal(g.Coordinates, &rings); err != nil {
			return nil, at.err(ErrAreaJSON, -1, -1, "coordinates: %v", err)
		}
		p, err := decodePolygon(at, rings)
		if err != nil {
			return nil, err
		}
		return []polygon{p}, nil
	}
	var multi [][][][]json.Number
	if err := json.Unmarshal(g.Coordinates, &multi); err != nil {
		return nil, at.err(ErrAreaJSON, -1, -1, "coordinates: %v", err)
	}
	polys := make([]polygon, 0, len(multi))
	for i, rings := range multi {
		at.polygon = i
		p, err := decodePolygon(at, rings)
		if err != nil {
			return nil, err
		}
		polys = append(polys, p)
	}
	return polys, nil
}

// decodePolygon checks a polygon's rings: the first is its outline, the
// others holes, each within the outline's bounding box (H3's fill sizes
// its work from that box, and a hole outside it removes nothing).
func decodePolygon(at where, rings [][][]json.Number) (polygon, error) {
	if len(rings) == 0 {
		return polygon{}, at.err(ErrAreaRing, -1, -1, "the polygon has no ring")
	}
	p := polygon{at: at}
	var s, n, w, e float64
	for r, ring := range rings {
		loop, err := decodeRing(at, r, ring)
		if err != nil {
			return polygon{}, err
		}
		if r == 0 {
			p.geo.GeoLoop = loop
			s, n, w, e = bounds(loop)
			continue
		}
		hs, hn, hw, he := bounds(loop)
		if hs < s || hn > n || hw < w || he > e {
			return polygon{}, at.err(ErrAreaRing, r, -1,
				"the hole reaches outside its polygon: lat %v..%v, lon %v..%v, the outer ring's bounds are lat %v..%v, lon %v..%v",
				hs, hn, hw, he, s, n, w, e)
		}
		p.geo.Holes = append(p.geo.Holes, loop)
	}
	return p, nil
}

// decodeRing checks a ring and returns it without its closing position.
func decodeRing(at where, r int, ring [][]json.Number) (h3.GeoLoop, error) {
	if len(ring) < 4 {
		return nil, at.err(ErrAreaRing, r, -1, "%d positions, a closed ring needs at least 4", len(ring))
	}
	loop := make(h3.GeoLoop, len(ring))
	for i, pos := range ring {
		if len(pos) < 2 {
			return nil, at.err(ErrAreaCoord, r, i, "want [longitude, latitude], got %v", pos)
		}
		lon, err := coord(pos[0], "longitude", 180)
		if err == nil {
			loop[i].Lat, err = coord(pos[1], "latitude", 90)
		}
		if err != nil {
			return nil, at.err(ErrAreaCoord, r, i, "%v", err)
		}
		loop[i].Lng = lon
	}
	first, last := loop[0], loop[len(loop)-1]
	if first.Lat != last.Lat || first.Lng != last.Lng {
		return nil, at.err(ErrAreaRing, r, -1, "not closed: the first position is [%v, %v], the last [%v, %v]",
			first.Lng, first.Lat, last.Lng, last.Lat)
	}
	loop = loop[:len(loop)-1]
	for i, p := range loop {
		next := loop[(i+1)%len(loop)]
		if math.Abs(next.Lng-p.Lng) > 180 {
			return nil, at.err(ErrAreaRing, r, i,
				"the edge to the next position spans %v° of longitude, more than 180: it crosses the antimeridian (split the polygon there, RFC 7946 §3.1.9)",
				math.Abs(next.Lng-p.Lng))
		}
	}
	// H3 cannot fill a ring whose bounding box is flat in its own
	// radians (it would fail, and h3-go v4.1.0 then indexes an empty slice).
	flatLat, flatLon := true, true
	for _, p := range loop[1:] {
		flatLat = flatLat && h3.DegsToRads*p.Lat == h3.DegsToRads*loop[0].Lat
		flatLon = flatLon && h3.DegsToRads*p.Lng == h3.DegsToRads*loop[0].Lng
	}
	if flatLat || flatLon {
		return nil, at.err(ErrAreaRing, r, -1, "encloses no area: all its positions are on one parallel or one meridian")
	}
	// A ring that crosses itself has no inside the fill could honour: its
	// cells would depend on the crossing's parity, not on the outline
	// meant.
	switch c, crosses, tests := crossingOf(loop, maxCrossingTests); {
	case tests > maxCrossingTests:
		return nil, at.err(ErrAreaRing, r, -1,
			"too many long edges spanning one another to check it for crossings (more than %d comparisons): simplify the outline", maxCrossingTests)
	case crosses:
		return nil, at.err(ErrAreaRing, r, c.i, "%s", c)
	}
	return loop, nil
}

// coord parses a longitude or latitude and checks it is within ±limit.
func coord(n json.Number, what string, limit float64) (float64, error) {
	v, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%s %s is not a finite number", what, n)
	}
	if v < -limit || v > limit {
		return 0, fmt.Errorf("%s %s is outside [%v, %v]", what, n, -limit, limit)
	}
	return v, nil
}
