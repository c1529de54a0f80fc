package board

import (
	"math"
	"slices"
	"strconv"

	"github.com/uber/h3-go/v4"

	"github.com/km0/edgeproc/geo"
)

// The service-area layer: each market's area outline, computed once when
// the hub is made, and sent in every snapshot. The couriers outside the
// area are the hub's (courier.outside, from left_area and entered_area).

// DefaultMaxAreaEdges is Config.MaxAreaEdges' default.
const DefaultMaxAreaEdges = 20000

// outline is a market's service-area outline, ready to send.
type outline struct {
	// edges counts the H3 cell edges in rings; truncated is set when the
	// area had more than the cap (the first ones, by cell, are kept).
	edges     int
	truncated bool
	// rings is the outline as JSON, [[[lat,lon],…],…], in degrees to 7
	// decimals; a closed ring ends with its first point.
	rings []byte
}

// vertex is a point of the outline, in units of 1e-7 degree: the
// precision sent, at which the vertex two cells share is one value.
type vertex [2]int64

func toVertex(p h3.LatLng) vertex {
	return vertex{int64(math.Round(p.Lat * 1e7)), int64(math.Round(p.Lng * 1e7))}
}

// newOutline returns the outline of a, nil for no area: the edges between
// its cells and the cells not in it, at most maxEdges of them.
func newOutline(a *geo.Area, maxEdges int) *outline {
	if a == nil {
		return nil
	}
	// A cell Inside has its whole ring of neighbours in the area (geo's
	// border band is at least one ring): no edge of it is on the outline,
	// and telling so is one map lookup, where the neighbours take cgo calls.
	var edge []h3.Cell
	for c := range a.Cells() {
		if a.Side(c) != geo.Inside {
			edge = append(edge, c)
		}
	}
	slices.Sort(edge) // the order of the cells kept at the cap
	return outlineOf(edge, a.Contains, maxEdges)
}

// outlineOf returns the outline of the area whose cells contains reports,
// from the cells cells (every area cell with a neighbour outside, and any
// others), in that order; past maxEdges edges the rest are left out.
// Every vertex of an outline is shared by three cells, two of one side
// and one of the other, so two of its edges are on the outline: the edges
// join into rings with no choice to make.
func outlineOf(cells []h3.Cell, contains func(h3.Cell) bool, maxEdges int) *outline {
	o := &outline{}
	var segs [][]vertex // each an edge's boundary, two points or more
	for _, c := range cells {
		for _, e := range c.DirectedEdges() {
			if contains(e.Destination()) {
				continue
			}
			if len(segs) == maxEdges {
				o.truncated = true
				break
			}
			b := e.Boundary()
			seg := make([]vertex, len(b))
			for i, p := range b {
				seg[i] = toVertex(p)
			}
			segs = append(segs, seg)
		}
		if o.truncated {
			break
		}
	}
	o.edges = len(segs)
	o.rings = appendRings(nil, joinEdges(segs))
	return o
}

// joinEdges joins edges that share an end into polylines, in the edges'
// order; a closed ring ends with its first point.
func joinEdges(segs [][]vertex) [][]vertex {
	at := make(map[vertex][]int, 2*len(segs)) // end point -> edges
	for i, s := range segs {
		at[s[0]] = append(at[s[0]], i)
		at[s[len(s)-1]] = append(at[s[len(s)-1]], i)
	}
	used := make([]bool, len(segs))
	// next returns an unused edge ending at v, oriented to start there.
	next := func(v vertex) []vertex {
		for _, i := range at[v] {
			if used[i] {
				continue
			}
			used[i] = true
			s := segs[i]
			if s[0] != v {
				s = slices.Clone(s)
				slices.Reverse(s)
			}
			return s
		}
		return nil
	}
	var lines [][]vertex
	for i, s := range segs {
		if used[i] {
			continue
		}
		used[i] = true
		line := slices.Clone(s)
		for line[len(line)-1] != line[0] {
			n := next(line[len(line)-1])
			if n == nil {
				break
			}
			line = append(line, n[1:]...)
		}
		// Open (the cap cut it): extend it backwards too.
		for line[len(line)-1] != line[0] {
			n := next(line[0])
			if n == nil {
				break
			}
			slices.Reverse(n)
			line = append(slices.Clone(n[:len(n)-1]), line...)
		}
		lines = append(lines, line)
	}
	return lines
}

// appendRings appends lines as JSON, [[[lat,lon],…],…].
func appendRings(b []byte, lines [][]vertex) []byte {
	b = append(b, '[')
	for i, line := range lines {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for j, v := range line {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = appendE7(b, v[0])
			b = append(b, ',')
			b = appendE7(b, v[1])
			b = append(b, ']')
		}
		b = append(b, ']')
	}
	return append(b, ']')
}

// appendE7 appends n × 1e-7 in decimal, exactly.
func appendE7(b []byte, n int64) []byte {
	return strconv.AppendFloat(b, float64(n)/1e7, 'f', 7, 64)
}

// appendAreas appends the "areas" member of a snapshot (state.encode
// documents it) for the markets in the filter (-1: all) that have an area.
func appendAreas(b []byte, filter int, areas []*outline) []byte {
	b = append(b, `"areas":[`...)
	first := true
	for i, o := range areas {
		if o == nil || (filter >= 0 && i != filter) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, `{"market":`...)
		b = appendMarketIndex(b, filter, uint16(i))
		b = append(b, `,"edges":`...)
		b = strconv.AppendInt(b, int64(o.edges), 10)
		b = append(b, `,"truncated":`...)
		b = strconv.AppendBool(b, o.truncated)
		b = append(b, `,"outline":`...)
		b = append(b, o.rings...)
		b = append(b, '}')
	}
	return append(b, ']')
}
