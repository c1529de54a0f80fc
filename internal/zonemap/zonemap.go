// Package zonemap sums a market's dead_zone results (docs/reference.md)
// by H3 cell and writes them as a GeoJSON FeatureCollection (RFC 7946),
// the map edgeproc deadzones makes: one Feature per cell, its boundary a
// counter-clockwise Polygon, its windows summed. Features are sorted by
// cell, so the same results give the same bytes.
package zonemap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/uber/h3-go/v4"
)

// deadZonePrefix starts every dead_zone line a replay writes
// (result.Record.AppendJSON); other lines are skipped undecoded.
var deadZonePrefix = []byte(`{"type":"dead_zone"`)

// Lines is the io.Writer a replay's JSON lines go to: it adds each
// dead_zone line to Set and drops the others. Close reports a last line
// without its end.
type Lines struct {
	Set     *Set
	partial []byte // a line begun by one Write, not yet ended
	line    int64  // lines ended so far
}

// Close returns an error if the last line written has no end.
func (w *Lines) Close() error {
	if len(w.partial) > 0 {
		return fmt.Errorf("result line %d: no line end", w.line+1)
	}
	return nil
}

func (w *Lines) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.partial = append(w.partial, p...)
			break
		}
		line := p[:i]
		if len(w.partial) > 0 {
			w.partial = append(w.partial, line...)
			line = w.partial
		}
		w.line++
		if bytes.HasPrefix(line, deadZonePrefix) {
			if err := w.Set.Add(line); err != nil {
				return 0, fmt.Errorf("result line %d: %w", w.line, err)
			}
		}
		w.partial = w.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

// deadZone is the part of a dead_zone result (docs/reference.md) summed.
type deadZone struct {
	Type        string `json:"type"`
	WindowStart int64  `json:"window_start_ms"`
	WindowEnd   int64  `json:"window_end_ms"`
	Cell        string `json:"cell"`
	Warnings    int    `json:"warnings"`
	Couriers    int    `json:"couriers"`
	Restored    int    `json:"restored"`
	Open        int    `json:"open"`
	SilenceMs   int64  `json:"silence_ms"`
	LongestMs   int64  `json:"longest_silence_ms"`
}

// Set sums dead_zone results by cell. The zero value is not usable: see
// NewSet.
type Set struct {
	cells   map[h3.Cell]*cellZones
	windows int // windows added, over every cell
}

// cellZones is one cell's windows, summed.
type cellZones struct {
	seen                         map[int64]bool // window starts added
	warnings, couriers, restored int
	open                         int
	silenceMs, longestMs         int64
	first, last                  int64 // first window's start, last window's end
}

// NewSet returns an empty Set.
func NewSet() *Set { return &Set{cells: make(map[h3.Cell]*cellZones)} }

// Cells is how many cells have a dead zone.
func (zs *Set) Cells() int { return len(zs.cells) }

// Windows is how many dead-zone windows were added, over every cell.
func (zs *Set) Windows() int { return zs.windows }

// Add adds one dead_zone result, given as its JSON. A window already added
// (the same key: a dead zone is never revised) is skipped.
func (zs *Set) Add(data []byte) error {
	var d deadZone
	if err := json.Unmarshal(data, &d); err != nil {
		return fmt.Errorf("decode dead_zone: %w", err)
	}
	if d.Type != "dead_zone" {
		return fmt.Errorf("decode dead_zone: type %q", d.Type)
	}
	u, err := strconv.ParseUint(d.Cell, 16, 64)
	if c := h3.Cell(u); err != nil || !c.IsValid() {
		return fmt.Errorf("dead_zone: cell %q is not an H3 cell", d.Cell)
	}
	c := h3.Cell(u)
	z := zs.cells[c]
	if z == nil {
		z = &cellZones{seen: make(map[int64]bool), first: d.WindowStart, last: d.WindowEnd}
		zs.cells[c] = z
	}
	if z.seen[d.WindowStart] {
		return nil
	}
	z.seen[d.WindowStart] = true
	zs.windows++
	z.warnings += d.Warnings
	z.couriers += d.Couriers
	z.restored += d.Restored
	z.open += d.Open
	z.silenceMs += d.SilenceMs
	z.longestMs = max(z.longestMs, d.LongestMs)
	z.first = min(z.first, d.WindowStart)
	z.last = max(z.last, d.WindowEnd)
	return nil
}

// The GeoJSON written (RFC 7946).
type (
	featureCollection struct {
		Type     string    `json:"type"` // FeatureCollection
		Features []feature `json:"features"`
	}
	feature struct {
		Type       string         `json:"type"` // Feature
		ID         string         `json:"id"`   // the cell
		Geometry   polygon        `json:"geometry"`
		Properties zoneProperties `json:"properties"`
	}
	polygon struct {
		Type        string         `json:"type"` // Polygon
		Coordinates [][][2]float64 `json:"coordinates"`
	}
	zoneProperties struct {
		Cell             string   `json:"cell"`
		Warnings         int      `json:"warnings"`
		Couriers         int      `json:"couriers"`
		Restored         int      `json:"restored"`
		Open             int      `json:"open"`
		SilenceMs        int64    `json:"silence_ms"`
		LongestMs        int64    `json:"longest_silence_ms"`
		Windows          int      `json:"windows"`
		FirstWindowStart int64    `json:"first_window_start_ms"`
		LastWindowEnd    int64    `json:"last_window_end_ms"`
		MeanSilenceS     *float64 `json:"mean_silence_s"` // null when none restored
	}
)

// WriteGeoJSON writes zs as a FeatureCollection, features sorted by cell,
// one a line.
func (zs *Set) WriteGeoJSON(w io.Writer) error {
	cells := make([]h3.Cell, 0, len(zs.cells))
	for c := range zs.cells {
		cells = append(cells, c)
	}
	slices.Sort(cells)
	var b bytes.Buffer
	b.WriteString(`{"type":"FeatureCollection","features":[`)
	for i, c := range cells {
		z := zs.cells[c]
		f := feature{
			Type:     "Feature",
			ID:       c.String(),
			Geometry: polygon{Type: "Polygon", Coordinates: [][][2]float64{cellRing(c)}},
			Properties: zoneProperties{
				Cell: c.String(), Warnings: z.warnings, Couriers: z.couriers, Restored: z.restored, Open: z.open,
				SilenceMs: z.silenceMs, LongestMs: z.longestMs, Windows: len(z.seen),
				FirstWindowStart: z.first, LastWindowEnd: z.last,
			},
		}
		if z.restored > 0 {
			mean := float64(z.silenceMs) / float64(z.restored) / 1000
			f.Properties.MeanSilenceS = &mean
		}
		line, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("encode cell %s: %w", c, err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n")
		b.Write(line)
	}
	b.WriteString("\n]}\n")
	_, err := w.Write(b.Bytes())
	return err
}

// cellRing is c's boundary as a closed GeoJSON linear ring: [lon, lat]
// positions rounded to 1e-7° (about a centimetre), counter-clockwise,
// the first repeated at the end. A cell across the antimeridian keeps its
// longitudes continuous (some beyond ±180) rather than wrapping round the
// world.
func cellRing(c h3.Cell) [][2]float64 {
	b := h3.CellToBoundary(c)
	ring := make([][2]float64, 0, len(b)+1)
	wraps := false
	for i, v := range b {
		ring = append(ring, [2]float64{round7(v.Lng), round7(v.Lat)})
		if i > 0 && math.Abs(v.Lng-b[i-1].Lng) > 180 {
			wraps = true
		}
	}
	if wraps {
		for i := range ring {
			if ring[i][0] < 0 {
				ring[i][0] += 360
			}
		}
	}
	// Shoelace: twice the signed area, positive counter-clockwise.
	area := 0.0
	for i := range ring {
		p, q := ring[i], ring[(i+1)%len(ring)]
		area += p[0]*q[1] - q[0]*p[1]
	}
	if area < 0 {
		slices.Reverse(ring)
	}
	return append(ring, ring[0])
}

func round7(x float64) float64 { return math.Round(x*1e7) / 1e7 }
