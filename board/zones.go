package board

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/uber/h3-go/v4"

	"github.com/km0/edgeproc/result"
)

// The dead-zone layer: the dead_zone results of the last ZoneHorizon,
// summed by cell. It owns the cells and their windows; the hub goroutine
// feeds it (add) and encodes what changed (appendZones). Its horizon is
// event time, the newest window end it has received (of any market), so
// what it shows depends only on the results fed, in their order.

// ZoneHorizon is how far back the dead-zone layer reaches: it sums the
// windows ending within ZoneHorizon of the newest window end received,
// (newest − ZoneHorizon, newest].
const ZoneHorizon = 24 * time.Hour

// zoneWindowsPerCell bounds the windows the layer keeps: at most this many
// times Config.MaxDeadZoneCells, all cells together (with 1 h windows, a
// third of the day's windows of every cell).
const zoneWindowsPerCell = 8

// zoneEvent is one dead_zone result fed, copied by value into the hub's
// mailbox of dead zones.
type zoneEvent struct {
	market     uint16
	cell       h3.Cell
	start, end int64
	zone       result.Zone
}

// zoneKey names a cell of the layer: one market's H3 cell.
type zoneKey struct {
	market uint16
	cell   h3.Cell
}

func (k zoneKey) compare(o zoneKey) int {
	return cmp.Or(cmp.Compare(k.market, o.market), cmp.Compare(k.cell, o.cell))
}

// zoneWindow is one dead_zone result kept: a cell's figures over a window.
type zoneWindow struct {
	cell       *zoneCell
	start, end int64
	zone       result.Zone
}

// older orders windows oldest first: by end, then start, market and cell,
// so that evictions do not depend on map order.
func (w *zoneWindow) older(o *zoneWindow) bool {
	return cmp.Or(cmp.Compare(w.end, o.end), cmp.Compare(w.start, o.start), w.cell.key.compare(o.cell.key)) < 0
}

// zoneCell is a cell on the layer: its windows within the horizon and
// their figures summed.
type zoneCell struct {
	key zoneKey
	// boundary is the cell's outline as JSON, [[lat,lon],…], computed
	// once when the cell joins the layer.
	boundary []byte
	windows  []*zoneWindow
	// sum has the windows' warnings, couriers, restored and SilenceMs
	// summed, LongestMs their longest; first is the earliest window start,
	// last the latest window end.
	sum         result.Zone
	first, last int64
	dirty, gone bool
}

func (c *zoneCell) resum() {
	c.sum, c.first, c.last = result.Zone{}, c.windows[0].start, c.windows[0].end
	for _, w := range c.windows {
		c.sum.Warnings += w.zone.Warnings
		c.sum.Couriers += w.zone.Couriers
		c.sum.Restored += w.zone.Restored
		c.sum.SilenceMs += w.zone.SilenceMs
		c.sum.LongestMs = max(c.sum.LongestMs, w.zone.LongestMs)
		c.first, c.last = min(c.first, w.start), max(c.last, w.end)
	}
}

// windowHeap holds every window kept, oldest on top.
type windowHeap []*zoneWindow

func (h windowHeap) Len() int           { return len(h) }
func (h windowHeap) Less(i, j int) bool { return h[i].older(h[j]) }
func (h windowHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *windowHeap) Push(x any)        { *h = append(*h, x.(*zoneWindow)) }
func (h *windowHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

// zoneLayer is the hub's dead-zone layer; owned by the hub goroutine.
type zoneLayer struct {
	maxCells, maxWindows int
	cells                map[zoneKey]*zoneCell
	windows              windowHeap
	newest               int64 // the newest window end received
	seen                 bool  // newest is set
	dirty                []*zoneCell
	dropped              uint64 // windows dropped at the caps
}

func newZoneLayer(maxCells int) *zoneLayer {
	return &zoneLayer{maxCells: maxCells, maxWindows: zoneWindowsPerCell * maxCells, cells: map[zoneKey]*zoneCell{}}
}

// add puts one dead_zone result on the layer; it reports false for a
// result with no valid cell or window, which the hub refuses. A window
// ending ZoneHorizon or more before the newest is ignored, and so is a
// window the cell already has (a dead zone fires once: the same result
// again). Over the caps, the oldest windows are dropped, counted.
func (l *zoneLayer) add(e *zoneEvent) bool {
	if !e.cell.IsValid() || e.end <= e.start {
		return false
	}
	if l.seen && e.end <= l.cutoff() {
		return true
	}
	k := zoneKey{e.market, e.cell}
	c := l.cells[k]
	if c != nil {
		for _, w := range c.windows {
			if w.start == e.start {
				return true
			}
		}
	}
	if !l.seen || e.end > l.newest {
		l.newest, l.seen = e.end, true
		for len(l.windows) > 0 && l.windows[0].end <= l.cutoff() {
			l.remove(heap.Pop(&l.windows).(*zoneWindow))
		}
		c = l.cells[k] // expiry may have removed it
	}
	isNew := c == nil
	if isNew {
		c = &zoneCell{key: k}
	}
	w := &zoneWindow{cell: c, start: e.start, end: e.end, zone: e.zone}
	// At a cap the oldest window goes first: this one, if it is older than
	// every window kept (and then its cell's outline is never computed).
	if full := isNew && len(l.cells) >= l.maxCells || len(l.windows) >= l.maxWindows; full && w.older(l.windows[0]) {
		l.dropped++
		return true
	}
	if isNew {
		c.boundary = appendBoundary(nil, e.cell)
		l.cells[k] = c
	}
	c.windows = append(c.windows, w)
	heap.Push(&l.windows, w)
	c.resum()
	l.mark(c)
	for len(l.cells) > l.maxCells || len(l.windows) > l.maxWindows {
		l.remove(heap.Pop(&l.windows).(*zoneWindow))
		l.dropped++
	}
	return true
}

// cutoff is the latest window end that is out of the horizon.
func (l *zoneLayer) cutoff() int64 {
	return max(l.newest, math.MinInt64+ZoneHorizon.Milliseconds()) - ZoneHorizon.Milliseconds()
}

// remove takes w, popped from the heap, off its cell; a cell with no
// window left leaves the layer.
func (l *zoneLayer) remove(w *zoneWindow) {
	c := w.cell
	c.windows = slices.DeleteFunc(c.windows, func(o *zoneWindow) bool { return o == w })
	if len(c.windows) == 0 {
		delete(l.cells, c.key)
		c.gone = true
	} else {
		c.resum()
	}
	l.mark(c)
}

func (l *zoneLayer) mark(c *zoneCell) {
	if !c.dirty {
		c.dirty = true
		l.dirty = append(l.dirty, c)
	}
}

// all returns every cell, by market and cell, for a snapshot.
func (l *zoneLayer) all() []*zoneCell {
	cs := make([]*zoneCell, 0, len(l.cells))
	for _, c := range l.cells {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b *zoneCell) int { return a.key.compare(b.key) })
	return cs
}

// sent clears the changes: an update carried them.
func (l *zoneLayer) sent() {
	for _, c := range l.dirty {
		c.dirty = false
	}
	clear(l.dirty)
	l.dirty = l.dirty[:0]
}

// appendZones appends the "zones_gone" and "zones" members of an update
// (state.encode documents them) for the cells zs in the market filter
// (-1: all); gone cells are left out of a snapshot (full).
func appendZones(b []byte, filter int, zs []*zoneCell, full bool) []byte {
	b = append(b, `"zones_gone":[`...)
	first := true
	for _, c := range zs {
		if !c.gone || full || (filter >= 0 && int(c.key.market) != filter) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '[')
		b = appendCell(b, c.key.cell)
		b = append(b, ',')
		b = appendMarketIndex(b, filter, c.key.market)
		b = append(b, ']')
	}
	b = append(b, `],"zones":[`...)
	first = true
	for _, c := range zs {
		if c.gone || (filter >= 0 && int(c.key.market) != filter) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		s := &c.sum
		b = append(b, '[')
		b = appendCell(b, c.key.cell)
		b = append(b, ',')
		b = appendMarketIndex(b, filter, c.key.market)
		for _, n := range [...]int64{int64(s.Warnings), int64(s.Couriers), int64(s.Restored), int64(s.Warnings - s.Restored),
			s.SilenceMs, s.LongestMs, int64(len(c.windows)), c.first, c.last} {
			b = append(b, ',')
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, ',')
		b = append(b, c.boundary...)
		b = append(b, ']')
	}
	return append(b, ']')
}

// appendCell appends the cell as a JSON string, in hex as in the results.
func appendCell(b []byte, c h3.Cell) []byte {
	b = append(b, '"')
	b = strconv.AppendUint(b, uint64(c), 16)
	return append(b, '"')
}

// appendMarketIndex appends a market's index in the update: 0 in a one-market
// stream.
func appendMarketIndex(b []byte, filter int, market uint16) []byte {
	if filter >= 0 {
		market = 0
	}
	return strconv.AppendUint(b, uint64(market), 10)
}

// appendBoundary appends the cell's outline, [[lat,lon],…] in degrees to
// 7 decimals (~1 cm).
func appendBoundary(b []byte, c h3.Cell) []byte {
	b = append(b, '[')
	for i, p := range h3.CellToBoundary(c) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendFloat(b, p.Lat, 'f', 7, 64)
		b = append(b, ',')
		b = strconv.AppendFloat(b, p.Lng, 'f', 7, 64)
		b = append(b, ']')
	}
	return append(b, ']')
}
