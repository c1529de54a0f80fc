package window

import (
	"fmt"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/wire"
)

// AppendState appends d's state for a checkpoint. Pane sums are stored as
// they are, bit for bit: recomputing them in another order could change the
// last digits of a window's distance after a restore.
func (d *Distance) AppendState(b []byte) []byte {
	b = wire.AppendInt(b, d.fired)
	b = wire.AppendBool(b, d.hasPred)
	if d.hasPred {
		b = appendFix(b, d.pred)
	}
	b = wire.AppendUint(b, uint64(len(d.fixes)))
	for _, x := range d.fixes {
		b = appendFix(b, x)
	}
	for _, p := range d.panes {
		b = wire.AppendFloat(b, p.sum)
	}
	return b
}

func appendFix(b []byte, x geo.Fix) []byte {
	b = wire.AppendInt(b, x.TS)
	b = wire.AppendFloat(b, x.Lat)
	b = wire.AppendFloat(b, x.Lon)
	return wire.AppendFloat(b, x.Acc)
}

func readFix(r *wire.Reader) geo.Fix {
	return geo.Fix{TS: r.Int(), Lat: r.Float(), Lon: r.Float(), Acc: r.Float()}
}

// ReadState restores d from what AppendState wrote.
func (d *Distance) ReadState(s Spec, r *wire.Reader) error {
	*d = Distance{fired: r.Int()}
	if d.hasPred = r.Bool(); d.hasPred {
		d.pred = readFix(r)
	}
	n := r.Count(25)
	if n > 0 {
		d.fixes = make([]geo.Fix, 0, n+max(4, n/8))
	}
	for i := 0; i < n && r.Err() == nil; i++ {
		x := readFix(r)
		if len(d.fixes) > 0 && x.TS <= d.fixes[len(d.fixes)-1].TS || d.hasPred && x.TS <= d.pred.TS {
			return fmt.Errorf("distance state: fixes out of order at %d", x.TS)
		}
		d.fixes = append(d.fixes, x)
		p := d.paneOf(x.TS / s.pane)
		d.panes[p].n++
	}
	for p := range d.panes { // one per pane, in order, as the fixes rebuilt them
		d.panes[p].sum = r.Float()
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("distance state: %w", err)
	}
	return nil
}
