package engine

import (
	"fmt"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/tmath"
	"github.com/km0/edgeproc/internal/wire"
	"github.com/km0/edgeproc/result"
	"github.com/uber/h3-go/v4"
)

// zones counts a market's no_signal warnings by H3 cell and tumbling
// event-time window: its dead zones (docs/semantics.md, Dead zones). It
// reads the merged results, so it sees every courier's warnings whatever
// shard emitted them; the merger's goroutine owns it.
//
// It works from the records alone, in their output order, and from the
// chunk's watermark steps: a window's warnings and restores are those of
// the records up to the step that fires it, the same for any shard count.
type zones struct {
	market   string
	window   int64 // ms; > 0
	res      int
	gap      int64
	maxCells int

	buckets map[zoneKey]*zoneBucket
	cells   map[int64]int // cells per window start, for maxCells
	// open is each courier's warning counted in an unfired window and
	// not restored yet: a courier has at most one (its next session
	// restores it before it can close again).
	open map[string]openWarning
	// next is the watermark at which the earliest window fires
	// (tmath.Forever: none open): a chunk has a watermark step for most
	// of its positions, and most steps fire nothing.
	next int64

	// parts: the engine is partition partition of its market and emits
	// its part of the dead zones (result.ZonePart, firePart). Every
	// window starting before through has fired.
	parts     bool
	partition int
	through   int64

	refused, fired atomic.Int64
}

type zoneKey struct {
	start int64
	cell  h3.Cell
}

type zoneBucket struct {
	result.Zone
	couriers map[string]struct{}
}

type openWarning struct {
	key      zoneKey
	lastSeen int64
}

func newZones(cfg *Config) *zones {
	if cfg.DeadZoneWindow <= 0 {
		return nil
	}
	z := &zones{
		market: cfg.Market, window: cfg.DeadZoneWindow, res: cfg.DeadZoneResolution,
		gap: cfg.Gap, maxCells: cfg.DeadZoneCells,
		buckets: map[zoneKey]*zoneBucket{}, cells: map[int64]int{}, open: map[string]openWarning{},
		next:  tmath.Forever,
		parts: cfg.DeadZoneParts, partition: cfg.Partition, through: tmath.Never,
	}
	if z.parts {
		z.next = tmath.Never // the first step says how far the partition is
	}
	return z
}

// apply counts the warnings and restores among out (the next piece of a
// chunk's results, sorted) and appends the dead zones the chunk's steps
// fire: each step fires after every record of its input and before the
// next input's. steps[from:] are the steps not fired yet; with last (the
// chunk's final piece) every one of them fires. It returns out, sorted,
// and the first step still to fire.
func (z *zones) apply(out []result.Record, steps []step, from int, last bool) ([]result.Record, int) {
	n, j := len(out), from
	for i := 0; i < n; i++ {
		r := &out[i]
		for ; j < len(steps) && steps[j].seq < r.Order.Seq; j++ {
			out = z.fire(out, steps[j])
			r = &out[i] // out may have moved
		}
		switch r.Type {
		case result.NoSignal:
			if !r.EndOfInput { // nobody knows yet whether that courier went silent
				z.warn(r)
			}
		case result.SignalRestored:
			z.restore(r)
		}
	}
	for ; last && j < len(steps); j++ {
		out = z.fire(out, steps[j])
	}
	if len(out) > n {
		sortRecords(out)
	}
	return out, j
}

func (z *zones) warn(r *result.Record) {
	// The cell of the last position, looked up: a finer cell's parent is
	// not always the cell of its points (H3's cells do not nest exactly).
	k := zoneKey{start: tmath.FloorDiv(r.End, z.window) * z.window, cell: geo.Cell(r.Lat, r.Lon, z.res)}
	b := z.buckets[k]
	if b == nil {
		// A partition's window before through has had its part: a
		// warning there comes too late to count (not from the
		// partition's own watermark, which fires a no_signal before its
		// window, but after a restore under other settings).
		if z.cells[k.start] >= z.maxCells || k.start < z.through {
			z.refused.Add(1)
			delete(z.open, r.Courier) // its restore finds nothing to count
			return
		}
		z.add(k, &zoneBucket{couriers: map[string]struct{}{}})
		b = z.buckets[k]
	}
	b.Warnings++
	if _, ok := b.couriers[r.Courier]; !ok {
		b.couriers[r.Courier] = struct{}{}
		b.Couriers++
	}
	z.open[r.Courier] = openWarning{key: k, lastSeen: r.End}
}

func (z *zones) add(k zoneKey, b *zoneBucket) {
	z.buckets[k] = b
	z.cells[k.start]++
	if !z.parts { // a partition's next is its through's
		z.next = min(z.next, z.due(k))
	}
}

// due is the watermark at which k's window fires.
func (z *zones) due(k zoneKey) int64 { return tmath.Add(tmath.Add(k.start, z.window), z.gap) }

func (z *zones) restore(r *result.Record) {
	o, ok := z.open[r.Courier]
	if !ok || o.lastSeen != r.SilentFrom {
		return
	}
	delete(z.open, r.Courier)
	b := z.buckets[o.key]
	gap := r.RestoredAt - r.SilentFrom
	b.Restored++
	b.SilenceMs += gap
	b.LongestMs = max(b.LongestMs, gap)
}

// fire appends, in order of window and cell, every window whose end +
// gap the step's watermark reached: by then every warning of the window
// has been emitted (a no_signal fires when wm >= last_seen + gap).
func (z *zones) fire(out []result.Record, st step) []result.Record {
	if st.wm < z.next {
		return out
	}
	if z.parts {
		return z.firePart(out, st)
	}
	var due []zoneKey
	z.next = tmath.Forever
	for k := range z.buckets {
		if d := z.due(k); st.wm >= d {
			due = append(due, k)
		} else {
			z.next = min(z.next, d)
		}
	}
	slices.SortFunc(due, func(a, b zoneKey) int {
		if a.start != b.start {
			return cmpInt(a.start, b.start)
		}
		return cmpInt(int64(a.cell), int64(b.cell))
	})
	for _, k := range due {
		b := z.buckets[k]
		zone := b.Zone
		end := tmath.Add(k.start, z.window)
		out = append(out, result.Record{
			Type: result.DeadZone, Market: z.market, EmittedAt: st.clock,
			Order: result.Order{Seq: st.seq, Phase: 2, At: end},
			Start: k.start, End: end, Cell: k.cell, Zone: &zone,
		})
		z.drop(k, b)
	}
	z.fired.Add(int64(len(due)))
	return out
}

// drop forgets a fired window's cell.
func (z *zones) drop(k zoneKey, b *zoneBucket) {
	for c := range b.couriers {
		if o, ok := z.open[c]; ok && o.key == k {
			delete(z.open, c)
		}
	}
	delete(z.buckets, k)
	if z.cells[k.start]--; z.cells[k.start] == 0 {
		delete(z.cells, k.start)
	}
}

// firePart is a partition's fire: every window whose end + gap the
// step's watermark reached has fired in this partition, and one
// ZonePart record says so, through the first window that has not, with
// the cells of those that fired since the last (often none: a
// partition says how far it is even where it counted nothing, so its
// market knows when every partition's part of a window is in).
func (z *zones) firePart(out []result.Record, st step) []result.Record {
	through := int64(tmath.Forever)
	if st.wm != tmath.Forever {
		// The first window start s with s + window + gap > wm.
		through = tmath.FloorDiv(st.wm-z.gap, z.window) * z.window
	}
	z.next = z.due(zoneKey{start: through})
	if through <= z.through {
		return out
	}
	var cells []result.PartCell
	for k, b := range z.buckets {
		if k.start < through {
			cells = append(cells, result.PartCell{Start: k.start, Cell: k.cell, Zone: b.Zone})
			z.drop(k, b)
		}
	}
	slices.SortFunc(cells, func(a, b result.PartCell) int {
		if a.Start != b.Start {
			return cmpInt(a.Start, b.Start)
		}
		return cmpInt(int64(a.Cell), int64(b.Cell))
	})
	from := z.through
	z.through = through
	z.fired.Add(1)
	return append(out, result.Record{
		Type: result.ZonePart, Market: z.market, EmittedAt: st.clock,
		Order: result.Order{Seq: st.seq, Phase: 2, At: through},
		Start: through, Part: &result.Part{Partition: z.partition, From: from, Cells: cells},
	})
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// appendState appends the dead zones' state for a checkpoint, with the
// settings it was counted under: restored under others, it is dropped.
func (z *zones) appendState(b []byte) []byte {
	if z == nil {
		return wire.AppendInt(b, 0)
	}
	if z.parts {
		// A negative window: a partition's part, with its through.
		b = wire.AppendInt(b, -z.window)
		b = wire.AppendInt(b, int64(z.res))
		b = wire.AppendInt(b, z.through)
	} else {
		b = wire.AppendInt(b, z.window)
		b = wire.AppendInt(b, int64(z.res))
	}
	keys := make([]zoneKey, 0, len(z.buckets))
	for k := range z.buckets {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].start < keys[j].start || keys[i].start == keys[j].start && keys[i].cell < keys[j].cell
	})
	b = wire.AppendUint(b, uint64(len(keys)))
	for _, k := range keys {
		bk := z.buckets[k]
		b = wire.AppendInt(b, k.start)
		b = wire.AppendUint(b, uint64(k.cell))
		b = wire.AppendUint(b, uint64(bk.Warnings))
		b = wire.AppendUint(b, uint64(bk.Restored))
		b = wire.AppendInt(b, bk.SilenceMs)
		b = wire.AppendInt(b, bk.LongestMs)
		names := make([]string, 0, len(bk.couriers))
		for c := range bk.couriers {
			names = append(names, c)
		}
		sort.Strings(names)
		b = wire.AppendUint(b, uint64(len(names)))
		for _, c := range names {
			b = wire.AppendString(b, c)
			o, ok := z.open[c]
			open := ok && o.key == k
			b = wire.AppendBool(b, open)
			if open {
				b = wire.AppendInt(b, o.lastSeen)
			}
		}
	}
	return b
}

// readState restores what appendState wrote (z may be nil: dead zones
// off, the section is read and dropped).
func (z *zones) readState(r *wire.Reader) error {
	window := r.Int()
	if window == 0 {
		return r.Err()
	}
	parts := window < 0
	window = max(window, -window)
	res := r.Int()
	through := int64(tmath.Never)
	if parts {
		through = r.Int()
	}
	keep := z != nil && window == z.window && res == int64(z.res) && parts == z.parts
	if keep && parts {
		z.through = through
		z.next = z.due(zoneKey{start: through})
	}
	n := r.Count(8)
	for i := 0; i < n && r.Err() == nil; i++ {
		k := zoneKey{start: r.Int(), cell: h3.Cell(r.Uint())}
		var bk zoneBucket
		bk.Warnings, bk.Restored = int(min(r.Uint(), 1<<40)), int(min(r.Uint(), 1<<40))
		bk.SilenceMs, bk.LongestMs = r.Int(), r.Int()
		m := r.Count(2)
		bk.couriers = make(map[string]struct{}, min(m, 1024))
		for range m {
			c := r.String()
			if r.Err() != nil {
				break
			}
			bk.couriers[c] = struct{}{}
			if r.Bool() {
				if last := r.Int(); keep {
					z.open[c] = openWarning{key: k, lastSeen: last}
				}
			}
		}
		bk.Couriers = len(bk.couriers)
		if r.Err() != nil {
			break
		}
		if bk.Restored > bk.Warnings || bk.Couriers > bk.Warnings || bk.Couriers != m {
			return fmt.Errorf("dead zone %x at %d: %d warnings, %d restored, %d couriers", uint64(k.cell), k.start, bk.Warnings, bk.Restored, m)
		}
		if keep {
			if z.buckets[k] != nil {
				return fmt.Errorf("dead zone %x at %d twice", uint64(k.cell), k.start)
			}
			z.add(k, &bk)
		}
	}
	return r.Err()
}
