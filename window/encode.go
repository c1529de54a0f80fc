package window

import (
	"fmt"
	"sort"

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
	return d.appendKept(b)
}

func (d *Distance) appendKept(b []byte) []byte {
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
	d.Checkpointed()
	return nil
}

// Checkpointed makes d's state as it is now the one the next AppendDelta
// is relative to: call it once d is written to a checkpoint, whole or as
// a delta.
func (d *Distance) Checkpointed() { d.since = since{from: int32(len(d.fixes))} }

// AppendDelta appends what changed in d since it was last checkpointed:
// the fixes from the first one inserted since and the panes from that
// fix's on, and the small parts whole (the filter's state after the
// dropped fixes, the fired mark, the retained windows). ApplyDelta applies
// it to the state as it was at that checkpoint. A courier sending a fix
// every few seconds adds two between two checkpoints ten seconds apart:
// its delta holds those and one or two panes, a tenth of its state.
func (d *Distance) AppendDelta(s Spec, b []byte) []byte {
	from := int(d.since.from)
	b = wire.AppendInt(b, d.fired)
	b = appendTrack(b, &d.base)
	b = wire.AppendUint(b, uint64(d.since.dropped))
	b = wire.AppendUint(b, uint64(from))
	b = wire.AppendUint(b, uint64(len(d.fixes)-from))
	for i := from; i < len(d.fixes); i++ {
		b = appendFix(b, d.fixes[i].unpack())
	}
	p := d.firstChangedPane(s, from)
	b = wire.AppendUint(b, uint64(len(d.panes)-p))
	for i := p; i < len(d.panes); i++ {
		b = wire.AppendFloat(b, d.panes[i].sum)
		b = appendTrack(b, &d.panes[i].end)
	}
	return d.appendKept(b)
}

// firstChangedPane is the index of the first pane that may differ from
// the last checkpoint's, given that fixes[:from] are unchanged: the pane
// of fixes[from] (the first new fix, see since); every pane after it may
// have been replayed.
func (d *Distance) firstChangedPane(s Spec, from int) int {
	if from >= len(d.fixes) {
		return len(d.panes)
	}
	idx := s.paneIdx(d.fixes[from].ts())
	return sort.Search(len(d.panes), func(k int) bool { return d.panes[k].idx >= idx })
}

// ApplyDelta applies what AppendDelta wrote to d, which must be the state
// it was relative to. An inconsistent delta (one not made from this state)
// is an error, never a wrong state: the fixes must stay in order and the
// panes kept must be the ones the delta's fixes leave unchanged.
func (d *Distance) ApplyDelta(s Spec, r *wire.Reader) error {
	fired, base := r.Int(), readTrack(r)
	dropped, from, n := r.Count(1), r.Count(1), r.Count(25)
	if r.Err() != nil {
		return fmt.Errorf("distance delta: %w", r.Err())
	}
	old := d.fixes
	if from > 0 && dropped+from > len(old) {
		return fmt.Errorf("distance delta: keeps fixes %d to %d of %d", dropped, dropped+from, len(old))
	}
	// The panes of the dropped fixes went whole: skip them, then keep
	// those of the unchanged fixes before the first new one's pane.
	var oldPanes []pane
	if from > 0 {
		j, k := 0, 0
		for k < dropped && j < len(d.panes) {
			k += int(d.panes[j].n)
			j++
		}
		if k != dropped {
			return fmt.Errorf("distance delta: %d fixes dropped, not whole panes", dropped)
		}
		oldPanes = d.panes[j:]
	} else {
		dropped = 0
	}
	nd := Distance{fired: fired, base: base}
	nd.fixes = grow[fix](nil, from+n)
	nd.fixes = append(nd.fixes, old[dropped:dropped+from]...)
	for i := 0; i < n && r.Err() == nil; i++ {
		x := readFix(r)
		if x.TS <= 0 || x.TS >= 1<<tsBits || !(x.Acc >= 0) {
			return fmt.Errorf("distance delta: fix at %d out of range", x.TS)
		}
		if k := len(nd.fixes); k > 0 && x.TS <= nd.fixes[k-1].ts() {
			return fmt.Errorf("distance delta: fixes out of order at %d", x.TS)
		}
		nd.fixes = append(nd.fixes, pack(x))
	}
	for i := range nd.fixes {
		p := nd.paneOf(s.paneIdx(nd.fixes[i].ts()))
		nd.panes[p].n++
	}
	p := nd.firstChangedPane(s, from)
	if p > len(oldPanes) {
		return fmt.Errorf("distance delta: keeps %d panes of %d", p, len(oldPanes))
	}
	for i := range p {
		if oldPanes[i].idx != nd.panes[i].idx || oldPanes[i].n != nd.panes[i].n {
			return fmt.Errorf("distance delta: pane %d kept but changed", nd.panes[i].idx)
		}
		nd.panes[i].sum, nd.panes[i].end = oldPanes[i].sum, oldPanes[i].end
	}
	if m := r.Count(1); m != len(nd.panes)-p {
		return fmt.Errorf("distance delta: %d panes written, %d changed", m, len(nd.panes)-p)
	}
	for i := p; i < len(nd.panes) && r.Err() == nil; i++ {
		nd.panes[i].sum = r.Float()
		nd.panes[i].end = readTrack(r)
	}
	if err := nd.readKept(s, r); err != nil {
		return err
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("distance delta: %w", err)
	}
	nd.Checkpointed()
	*d = nd
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
