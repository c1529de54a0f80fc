package geo

// This file owns the geometry of an area's rings that H3 does not do fast
// enough: which cells' centres a polygon holds, and whether a ring crosses
// itself. H3 v4.1.0's fill tests every cell against every edge (its
// pointInsideGeoLoop walks the whole ring), so a 50 000-vertex outline of
// a city took seconds at every start; here each test looks only at the
// edges in the centre's latitude band.

import (
	"fmt"
	"math"
	"slices"

	"github.com/uber/h3-go/v4"
)

// dblEpsilon is C's DBL_EPSILON, by which H3 nudges a point level with a
// vertex.
const dblEpsilon = 2.220446049250313e-16

// ringIndex answers whether a point is inside a ring, in radians, with
// H3's ray-casting rule (pointInsideGeoLoop of H3 v4.1.0: a ray cast east
// along the parallel, the same arithmetic and tie-breaks), but looking
// only at the edges whose latitude span meets the point's band.
type ringIndex struct {
	lat, lng   []float64 // the vertices, radians
	s, n, w, e float64   // bounding box, radians
	rowH       float64   // latitude height of a band
	// The edges of band r (edge i runs from vertex i to i+1) are
	// edges[start[r]:start[r+1]], in ring order as H3 walks them.
	start []int32
	edges []int32
}

func newRingIndex(loop h3.GeoLoop) *ringIndex {
	v := len(loop)
	ix := &ringIndex{lat: make([]float64, v), lng: make([]float64, v)}
	for i, p := range loop {
		ix.lat[i], ix.lng[i] = h3.DegsToRads*p.Lat, h3.DegsToRads*p.Lng
	}
	ix.s, ix.n = slices.Min(ix.lat), slices.Max(ix.lat)
	ix.w, ix.e = slices.Min(ix.lng), slices.Max(ix.lng)
	// As many bands as keep the stored entries near two per edge: the
	// edges' summed latitude spans over the band height, plus one each.
	var spans float64
	for i := range v {
		spans += math.Abs(ix.lat[(i+1)%v] - ix.lat[i])
	}
	rows := 1
	if h := ix.n - ix.s; h > 0 && spans > 0 {
		rows = int(min(float64(v), max(1, float64(v)*h/spans)))
	}
	ix.rowH = (ix.n - ix.s) / float64(rows)
	ix.start = make([]int32, rows+1)
	count := func(fn func(r, i int)) {
		for i := range v {
			a, b := ix.lat[i], ix.lat[(i+1)%v]
			for r := ix.row(min(a, b)); r <= ix.row(max(a, b)); r++ {
				fn(r, i)
			}
		}
	}
	count(func(r, _ int) { ix.start[r+1]++ })
	for r := range rows {
		ix.start[r+1] += ix.start[r]
	}
	ix.edges = make([]int32, ix.start[rows])
	next := slices.Clone(ix.start[:rows])
	count(func(r, i int) { ix.edges[next[r]] = int32(i); next[r]++ })
	return ix
}

// row is the band of latitude lat (radians), clamped to the bands.
func (ix *ringIndex) row(lat float64) int {
	rows := len(ix.start) - 1
	if ix.rowH <= 0 {
		return 0
	}
	return min(rows-1, max(0, int((lat-ix.s)/ix.rowH)))
}

// contains reports whether (lat, lng), radians, is inside the ring.
func (ix *ringIndex) contains(lat, lng float64) bool {
	if lat < ix.s || lat > ix.n || lng < ix.w || lng > ix.e {
		return false
	}
	r := ix.row(lat)
	v := len(ix.lat)
	in := false
	for _, i := range ix.edges[ix.start[r]:ix.start[r+1]] {
		j := (int(i) + 1) % v
		aLat, aLng, bLat, bLng := ix.lat[i], ix.lng[i], ix.lat[j], ix.lng[j]
		if aLat > bLat {
			aLat, aLng, bLat, bLng = bLat, bLng, aLat, aLng
		}
		if lat == aLat || lat == bLat {
			lat += dblEpsilon
		}
		if lat < aLat || lat > bLat {
			continue
		}
		if aLng == lng || bLng == lng {
			lng -= dblEpsilon
		}
		ratio := (lat - aLat) / (bLat - aLat)
		if aLng+(bLng-aLng)*ratio > lng {
			in = !in
		}
	}
	return in
}

// fillPolygon returns the cells at res whose centre is inside p (inside
// its outer ring and in none of its holes): H3's rule, without H3's cost
// per edge. The candidates are the cells of the outer ring's bounding
// box, which H3 fills fast (four vertices); each is then tested against
// the rings' indexes.
func fillPolygon(p h3.GeoPolygon, res int) []h3.Cell {
	outer := newRingIndex(p.GeoLoop)
	holes := make([]*ringIndex, len(p.Holes))
	for i, h := range p.Holes {
		holes[i] = newRingIndex(h)
	}
	// A hair wider than the box, so that a centre on its edge is a
	// candidate; the rings decide.
	const pad = 1e-9
	s, n, w, e := bounds(p.GeoLoop)
	box := h3.GeoPolygon{GeoLoop: h3.GeoLoop{
		{Lat: s - pad, Lng: w - pad}, {Lat: s - pad, Lng: e + pad}, {Lat: n + pad, Lng: e + pad}, {Lat: n + pad, Lng: w - pad},
	}}
	cells := h3.PolygonToCells(box, res)
	kept := cells[:0]
	for _, c := range cells {
		ll := h3.CellToLatLng(c)
		lat, lng := h3.DegsToRads*ll.Lat, h3.DegsToRads*ll.Lng
		if !outer.contains(lat, lng) || slices.ContainsFunc(holes, func(h *ringIndex) bool { return h.contains(lat, lng) }) {
			continue
		}
		kept = append(kept, c)
	}
	return kept
}

// maxCrossingTests bounds the pairs of edges crossingOf compares (about a
// second of work). Real outlines need a few per edge; only a ring of many
// long edges spanning one another (a star, a zigzag) needs more, and is
// refused rather than checked for minutes.
const maxCrossingTests = 200_000_000

// crossing is where a ring crosses or touches itself: the edge from
// position i to i+1 meets the edge from j to j+1 (i < j) at (lng, lat).
type crossing struct {
	i, j     int
	lng, lat float64
}

// crossingOf finds where a ring (without its closing position) crosses or
// touches itself, in its own plane of longitude and latitude (the plane
// H3's fill works in); ok is false when it does not. It compares only the
// edges that share a cell of a grid over the ring, so an outline of
// 50 000 vertices takes milliseconds, not the 10⁹ comparisons of every
// pair. Of several crossings it returns the one with the smallest i, then
// j. tests is how many pairs of edges it compared; past budget it stops
// (ok false, tests > budget).
func crossingOf(loop h3.GeoLoop, budget int) (c crossing, ok bool, tests int) {
	pts, pos := distinctVertices(loop)
	m := len(pts)
	if m < 3 {
		return crossing{}, false, 0
	}
	best := crossing{i: math.MaxInt}
	found := func(i, j int, at h3.LatLng) {
		if i > j {
			i, j = j, i
		}
		pi, pj := pos[i], pos[j]
		if pi < best.i || (pi == best.i && pj < best.j) {
			best = crossing{i: pi, j: pj, lng: at.Lng, lat: at.Lat}
		}
	}
	// Adjacent edges share a vertex; they meet elsewhere only when the
	// second turns straight back along the first.
	for i := range m {
		a, b, c := pts[i], pts[(i+1)%m], pts[(i+2)%m]
		if orient(a, b, c) == 0 && (a.Lng-b.Lng)*(c.Lng-b.Lng)+(a.Lat-b.Lat)*(c.Lat-b.Lat) > 0 {
			found(i, (i+1)%m, b)
		}
	}

	grid := edgeGrid(pts)
	for _, es := range grid {
		tests += len(es) * (len(es) - 1) / 2
		if tests > budget {
			return crossing{}, false, tests
		}
		for x, i := range es {
			for _, j := range es[x+1:] {
				ii, jj := int(i), int(j)
				if (ii+1)%m == jj || (jj+1)%m == ii {
					continue // adjacent: checked above
				}
				if p, ok := segmentsMeet(pts[ii], pts[(ii+1)%m], pts[jj], pts[(jj+1)%m]); ok {
					found(ii, jj, p)
				}
			}
		}
	}
	return best, best.i != math.MaxInt, tests
}

// orient is the sign of the turn a→b→c: positive counter-clockwise,
// negative clockwise, 0 collinear.
func orient(a, b, c h3.LatLng) int {
	v := (b.Lng-a.Lng)*(c.Lat-a.Lat) - (b.Lat-a.Lat)*(c.Lng-a.Lng)
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

// onSegment reports whether c, collinear with a and b, lies between them.
func onSegment(a, b, c h3.LatLng) bool {
	return min(a.Lng, b.Lng) <= c.Lng && c.Lng <= max(a.Lng, b.Lng) && min(a.Lat, b.Lat) <= c.Lat && c.Lat <= max(a.Lat, b.Lat)
}

// segmentsMeet reports whether segments ab and cd share a point, and one
// such point.
func segmentsMeet(a, b, c, d h3.LatLng) (h3.LatLng, bool) {
	o1, o2, o3, o4 := orient(a, b, c), orient(a, b, d), orient(c, d, a), orient(c, d, b)
	if o1 != o2 && o3 != o4 && o1 != 0 && o2 != 0 && o3 != 0 && o4 != 0 {
		// A proper crossing: where along ab.
		den := (b.Lng-a.Lng)*(d.Lat-c.Lat) - (b.Lat-a.Lat)*(d.Lng-c.Lng)
		t := ((c.Lng-a.Lng)*(d.Lat-c.Lat) - (c.Lat-a.Lat)*(d.Lng-c.Lng)) / den
		return h3.LatLng{Lat: a.Lat + t*(b.Lat-a.Lat), Lng: a.Lng + t*(b.Lng-a.Lng)}, true
	}
	switch {
	case o1 == 0 && onSegment(a, b, c):
		return c, true
	case o2 == 0 && onSegment(a, b, d):
		return d, true
	case o3 == 0 && onSegment(c, d, a):
		return a, true
	case o4 == 0 && onSegment(c, d, b):
		return b, true
	}
	return h3.LatLng{}, false
}

// String says where, for an error.
func (c crossing) String() string {
	return fmt.Sprintf("the edge from position %d meets the edge from position %d at about [%.7f, %.7f]: a ring must not cross or touch itself",
		c.i, c.j, c.lng, c.lat)
}

// distinctVertices drops repeated consecutive positions of loop (they make
// zero-length edges), the closing repeat of the first included, keeping
// each kept vertex's position in the file for the report.
func distinctVertices(loop h3.GeoLoop) (pts []h3.LatLng, pos []int) {
	for i, p := range loop {
		if len(pts) > 0 && pts[len(pts)-1] == p {
			continue
		}
		pts, pos = append(pts, p), append(pos, i)
	}
	for len(pts) > 1 && pts[len(pts)-1] == pts[0] {
		pts, pos = pts[:len(pts)-1], pos[:len(pos)-1]
	}
	return pts, pos
}

// gridKey is a cell of edgeGrid's grid.
type gridKey struct{ x, y int }

// edgeGrid puts the ring's edges in a sparse grid of square cells about
// twice the mean edge long, so that an edge lies in a few cells and a
// cell holds a few edges; long edges that would fill too many cells make
// the cells coarser. Only edges sharing a cell can cross.
func edgeGrid(pts []h3.LatLng) map[gridKey][]int32 {
	m := len(pts)
	var length float64
	for i := range m {
		a, b := pts[i], pts[(i+1)%m]
		length += math.Hypot(b.Lng-a.Lng, b.Lat-a.Lat)
	}
	size := 2 * length / float64(m)
	s, _, w, _ := bounds(pts)
	var grid map[gridKey][]int32
	for {
		at := func(v, lo float64) int { return int(math.Floor((v - lo) / size)) }
		entries := 0
		for i := range m {
			a, b := pts[i], pts[(i+1)%m]
			entries += (at(max(a.Lng, b.Lng), w) - at(min(a.Lng, b.Lng), w) + 1) * (at(max(a.Lat, b.Lat), s) - at(min(a.Lat, b.Lat), s) + 1)
		}
		if entries > 16*m {
			size *= 2
			continue
		}
		grid = make(map[gridKey][]int32, entries)
		for i := range m {
			a, b := pts[i], pts[(i+1)%m]
			for y := at(min(a.Lat, b.Lat), s); y <= at(max(a.Lat, b.Lat), s); y++ {
				for x := at(min(a.Lng, b.Lng), w); x <= at(max(a.Lng, b.Lng), w); x++ {
					grid[gridKey{x, y}] = append(grid[gridKey{x, y}], int32(i))
				}
			}
		}
		return grid
	}
}
