package window

import (
	"fmt"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/wire"
)

// AppendState appends d's state for a checkpoint: the fixes, the filter's
// state after the dropped fixes and after each pane, and the pane sums, all
// bit for bit, so a restored courier goes on exactly as it would have.
func (d *Distance) AppendState(b []byte) []byte {
	b = wire.AppendInt(b, d.fired)
	b = appendTrack(b, &d.base)
	b = wire.AppendUint(b, uint64(len(d.fixes)))
	for i := range d.fixes {
		b = appendFix(b, d.fixes[i].unpack())
	}
	for i := range d.panes {
		b = wire.AppendFloat(b, d.panes[i].sum)
		b = appendTrack(b, &d.panes[i].end)
	}
	b = wire.AppendUint(b, uint64(len(d.kept)))
	for _, k := range d.kept {
		b = wire.AppendInt(b, k.end)
		b = wire.AppendFloat(b, k.dist)
		b = wire.AppendUint(b, uint64(k.n))
		b = wire.AppendUint(b, uint64(k.rev))
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

func appendTrack(b []byte, t *geo.Track) []byte {
	b = wire.AppendBool(b, t.HasAnchor)
	if !t.HasAnchor {
		return b
	}
	b = wire.AppendInt(b, t.TS)
	b = wire.AppendFloat(b, t.Lat)
	b = wire.AppendFloat(b, t.Lon)
	b = wire.AppendUint(b, uint64(t.Near))
	b = wire.AppendFloat(b, t.SumLat)
	b = wire.AppendFloat(b, t.SumLon)
	b = wire.AppendBool(b, t.HasPending)
	if t.HasPending {
		b = wire.AppendInt(b, t.PendTS)
		b = wire.AppendFloat(b, t.PendLat)
		b = wire.AppendFloat(b, t.PendLon)
		b = wire.AppendBool(b, t.Confirmed)
	}
	return b
}

func readTrack(r *wire.Reader) geo.Track {
	var t geo.Track
	if t.HasAnchor = r.Bool(); !t.HasAnchor {
		return t
	}
	t.TS, t.Lat, t.Lon = r.Int(), r.Float(), r.Float()
	t.Near = int32(min(r.Uint(), 1<<30))
	t.SumLat, t.SumLon = r.Float(), r.Float()
	if t.HasPending = r.Bool(); t.HasPending {
		t.PendTS, t.PendLat, t.PendLon, t.Confirmed = r.Int(), r.Float(), r.Float(), r.Bool()
	}
	return t
}

// ReadState restores d from what AppendState wrote. The segments and marks
// are left for the first Insert to rebuild: they take the filter, which
// this does not have. retained says whether the state holds the retained
// windows (snapshot version 3 on); an older one has none, as written with
// no allowed lateness.
func (d *Distance) ReadState(s Spec, r *wire.Reader, retained bool) error {
	*d = Distance{fired: r.Int(), base: readTrack(r)}
	n := r.Count(25)
	if n > 0 {
		d.fixes = grow[fix](nil, n+1)
	}
	for i := 0; i < n && r.Err() == nil; i++ {
		x := readFix(r)
		if len(d.fixes) > 0 && x.TS <= d.fixes[len(d.fixes)-1].ts() {
			return fmt.Errorf("distance state: fixes out of order at %d", x.TS)
		}
		// An older snapshot's accuracies may have more than centimetres:
		// they are rounded as they are now on the way in.
		if x.TS <= 0 || x.TS >= 1<<tsBits || !(x.Acc >= 0) {
			return fmt.Errorf("distance state: fix at %d out of range", x.TS)
		}
		d.fixes = append(d.fixes, pack(x))
		p := d.paneOf(s.paneIdx(x.TS))
		d.panes[p].n++
	}
	for p := range d.panes { // one per pane, in order, as the fixes rebuilt them
		d.panes[p].sum = r.Float()
		d.panes[p].end = readTrack(r)
	}
	if retained {
		if err := d.readKept(s, r); err != nil {
			return err
		}
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("distance state: %w", err)
	}
	return nil
}

// readKept reads the retained windows, which must be in order of end, each
// a window end holding a retained fix.
func (d *Distance) readKept(s Spec, r *wire.Reader) error {
	n := r.Count(4)
	for i := 0; i < n && r.Err() == nil; i++ {
		k := retainedWindow{end: r.Int(), dist: r.Float()}
		k.n, k.rev = int32(min(r.Uint(), 1<<30)), int32(min(r.Uint(), 1<<30))
		if r.Err() != nil {
			break
		}
		if len(d.kept) > 0 && k.end <= d.kept[len(d.kept)-1].end {
			return fmt.Errorf("distance state: retained windows out of order at %d", k.end)
		}
		if k.end != s.ceilEnd(k.end) || len(d.fixes) == 0 || k.end > d.fired || k.end <= d.fixes[0].ts() {
			return fmt.Errorf("distance state: retained window ending %d holds no fix", k.end)
		}
		d.kept = append(d.kept, k)
	}
	return nil
}
