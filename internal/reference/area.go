package reference

import (
	"fmt"

	"github.com/km0/edgeproc/geo"
	"github.com/uber/h3-go/v4"
)

// The service area (docs/semantics.md): a courier's side is decided over
// its positions taken in arrival order, each only if its timestamp is
// above every one taken before; two in a row on the other side, out of
// the border band, move the courier there, dated by the first of them;
// the first side seen is no move.

type areaState struct {
	taken   bool
	last    int64
	side    geo.Side
	pending []*position // the positions in a row on the other side
}

func (pr *processor) areaStep(pos *position, now int64) {
	if pr.p.Area == nil {
		return
	}
	c := pr.courier(pos.courier)
	st := &c.area
	if st.taken && pos.ts <= st.last {
		return
	}
	st.taken, st.last = true, pos.ts
	a := pr.p.Area
	side := a.Side(h3.LatLngToCell(h3.NewLatLng(pos.lat, pos.lon), geo.AreaResolution))
	switch {
	case side == geo.Border:
		st.pending = nil
		return
	case st.side == 0:
		st.side = side
		return
	case side == st.side:
		st.pending = nil
		return
	}
	st.pending = append(st.pending, pos)
	if len(st.pending) < 2 {
		return
	}
	typ := "entered_area"
	if st.side == geo.Inside {
		typ = "left_area"
	}
	at := st.pending[0]
	st.side, st.pending = side, nil
	pr.emit(map[string]any{
		"type":          typ,
		"courier":       c.name,
		"key":           fmt.Sprintf("%s|%s|%s|%d", typ, pr.p.Market, c.name, at.ts),
		"emitted_at_ms": now,
		"timestamp_ms":  at.ts,
		"lat":           at.lat,
		"lon":           at.lon,
		"cell":          pr.cell(at.lat, at.lon),
	})
}
