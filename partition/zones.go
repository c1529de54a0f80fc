package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/uber/h3-go/v4"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/internal/tmath"
	"github.com/km0/edgeproc/result"
)

// A market's dead zones count every courier's no_signal warnings, and a
// partition's engine sees its own couriers only. So each partition emits
// its part (result.ZonePart: how far its watermark has fired windows, and
// its counts of the windows fired since its previous part), stored with
// the results, on the zones subject, before any checkpoint past it; and
// every instance reads the parts in stream order and publishes a window's
// dead zones once every partition's part of it is in: the sums of the
// partitions' counts (a courier is in one partition). The parts are a
// function of each partition's stream, and the stream of parts is one
// order for every reader, so every instance publishes the same records
// under the same keys, and the results stream keeps one of each.

// zonesKey is the checkpoint bucket's record of the windows whose dead
// zones were published and acknowledged: every window starting before
// it. A reader that starts (again) does not publish those again, which
// the results stream's duplicate window would no longer drop.
const zonesKey = "zones"

// Bounds of a zoneMerger fed by parts: the windows waiting for a
// partition's part (one partition far behind the others: its owner dead
// and not replaced, or its watermark held by its phones), and the parts
// of one partition held until the part before them is read (the results
// bridge retries a failed publish after later ones succeeded).
const (
	maxZoneWindows = 64
	maxHeldParts   = 64
)

// zoneMerger combines the partitions' parts into the market's dead zones.
// It is fed one reader's parts in stream order.
type zoneMerger struct {
	market   string
	window   int64
	maxCells int

	// frontier[p]: every window starting before it has partition p's
	// part here. seen[p]: a part of p was read (frontier[p] then starts
	// at the first one's From: what retention removed before it is gone).
	frontier []int64
	seen     []bool
	held     [][]*result.Record // by partition, out-of-order parts
	// applied[p] are partition p's parts applied, back to the one that
	// covers done: a window's dead zones are emitted at the latest
	// emitted_at of the parts that cover it, one a partition (when the
	// last partition fired it), whatever order the parts were read in.
	applied [][]partSpan
	windows map[int64]map[h3.Cell]*result.Zone
	done    int64 // every window before it was emitted

	// incomplete counts windows emitted without every partition's part
	// (maxZoneWindows); refused the warnings of cells beyond maxCells in
	// a window; dropped the parts refused as malformed or beyond
	// maxHeldParts; waiting is the windows waiting for a part.
	incomplete, refused, dropped, waiting atomic.Int64
}

// partSpan is what a part covers: the windows from from to through,
// fired at at.
type partSpan struct{ from, through, at int64 }

func newZoneMerger(market string, window int64, partitions, maxCells int) *zoneMerger {
	m := &zoneMerger{
		market: market, window: window, maxCells: maxCells,
		frontier: make([]int64, partitions), seen: make([]bool, partitions),
		held: make([][]*result.Record, partitions), applied: make([][]partSpan, partitions),
		windows: map[int64]map[h3.Cell]*result.Zone{},
		done:    tmath.Never,
	}
	for i := range m.frontier {
		m.frontier[i] = tmath.Never
	}
	return m
}

// add takes the next part read and returns the dead zones it completes,
// by window and cell.
func (m *zoneMerger) add(r *result.Record) []result.Record {
	pt := r.Part
	if pt == nil || pt.Partition < 0 || pt.Partition >= len(m.frontier) || pt.From >= r.Start {
		m.dropped.Add(1)
		return nil
	}
	p := pt.Partition
	rc := *r // r may be its producer's, reused
	r = &rc
	if !m.seen[p] {
		m.seen[p], m.frontier[p] = true, pt.From
	}
	if r.Start <= m.frontier[p] {
		return nil // read before: a successor re-emitted it
	}
	if len(m.held[p]) >= maxHeldParts {
		m.dropped.Add(1)
		m.held[p] = m.held[p][1:]
	}
	m.held[p] = append(m.held[p], r)
	for i := 0; i < len(m.held[p]); {
		h := m.held[p][i]
		switch {
		case h.Start <= m.frontier[p]:
			m.held[p] = slices.Delete(m.held[p], i, i+1)
		case h.Part.From <= m.frontier[p]:
			m.apply(h.Part.Cells, m.frontier[p])
			m.applied[p] = append(m.applied[p], partSpan{from: m.frontier[p], through: h.Start, at: h.EmittedAt})
			m.frontier[p] = h.Start
			m.held[p] = slices.Delete(m.held[p], i, i+1)
			i = 0 // a held one may follow now
		default:
			i++
		}
	}
	return m.complete()
}

// apply adds a partition's cells of windows from from on.
func (m *zoneMerger) apply(cells []result.PartCell, from int64) {
	for i := range cells {
		c := &cells[i]
		if c.Start < from || c.Start < m.done {
			continue
		}
		w := m.windows[c.Start]
		if w == nil {
			w = map[h3.Cell]*result.Zone{}
			m.windows[c.Start] = w
		}
		z := w[c.Cell]
		if z == nil {
			if len(w) >= m.maxCells {
				m.refused.Add(int64(c.Warnings))
				continue
			}
			z = &result.Zone{}
			w[c.Cell] = z
		}
		z.Warnings += c.Warnings
		z.Couriers += c.Couriers
		z.Restored += c.Restored
		z.SilenceMs += c.SilenceMs
		z.LongestMs = max(z.LongestMs, c.LongestMs)
	}
}

// complete emits every window every partition has passed, and beyond
// maxZoneWindows the oldest waiting, with what it has.
func (m *zoneMerger) complete() []result.Record {
	done := int64(tmath.Forever)
	for p, f := range m.frontier {
		if !m.seen[p] {
			done = tmath.Never
			break
		}
		done = min(done, f)
	}
	starts := make([]int64, 0, len(m.windows))
	for s := range m.windows {
		starts = append(starts, s)
	}
	slices.Sort(starts)
	if n := len(starts) - maxZoneWindows; n > 0 && starts[n-1] >= done {
		m.incomplete.Add(int64(n))
		done = starts[n-1] + 1
	}
	var out []result.Record
	for _, s := range starts {
		if s >= done {
			break
		}
		w := m.windows[s]
		cells := make([]h3.Cell, 0, len(w))
		for c := range w {
			cells = append(cells, c)
		}
		slices.Sort(cells)
		at := m.firedAt(s)
		for _, c := range cells {
			out = append(out, result.Record{
				Type: result.DeadZone, Market: m.market, EmittedAt: at,
				Start: s, End: tmath.Add(s, m.window), Cell: c, Zone: w[c],
			})
		}
		delete(m.windows, s)
	}
	m.done = max(m.done, done)
	m.waiting.Store(int64(len(m.windows)))
	for p, a := range m.applied {
		i := 0
		for i < len(a) && a[i].through <= m.done {
			i++
		}
		m.applied[p] = a[i:]
	}
	return out
}

// firedAt is when the last partition fired window s: the latest
// emitted_at of the parts that cover it.
func (m *zoneMerger) firedAt(s int64) int64 {
	at := int64(0)
	for _, a := range m.applied {
		for _, sp := range a {
			if sp.from <= s && s < sp.through {
				at = max(at, sp.at)
			}
		}
	}
	return at
}

// behind lists the partitions whose part the oldest waiting window lacks.
func (m *zoneMerger) behind() []int {
	var out []int
	for p, f := range m.frontier {
		if !m.seen[p] || f <= m.done {
			out = append(out, p)
		}
	}
	return out
}

// partJSON is a ZonePart record as result.Record.AppendJSON writes it.
type partJSON struct {
	Type      string `json:"type"`
	Partition *int   `json:"partition"`
	From      *int64 `json:"from_ms"`
	Through   *int64 `json:"through_ms"`
	EmittedAt int64  `json:"emitted_at_ms"`
	Cells     []struct {
		Start     int64  `json:"window_start_ms"`
		Cell      string `json:"cell"`
		Warnings  int    `json:"warnings"`
		Couriers  int    `json:"couriers"`
		Restored  int    `json:"restored"`
		SilenceMs int64  `json:"silence_ms"`
		LongestMs int64  `json:"longest_silence_ms"`
	} `json:"cells"`
}

// decodePart reads a ZonePart record back from its JSON.
func decodePart(data []byte) (result.Record, error) {
	var j partJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return result.Record{}, fmt.Errorf("dead zone part: %w", err)
	}
	if j.Type != result.ZonePart.String() || j.Partition == nil || j.From == nil || j.Through == nil {
		return result.Record{}, errors.New("dead zone part: not one")
	}
	pt := &result.Part{Partition: *j.Partition, From: *j.From, Cells: make([]result.PartCell, 0, len(j.Cells))}
	for _, c := range j.Cells {
		cell, err := strconv.ParseUint(c.Cell, 16, 64)
		if err != nil || c.Warnings < 0 || c.Couriers < 0 || c.Restored < 0 || c.Restored > c.Warnings || c.Couriers > c.Warnings {
			return result.Record{}, fmt.Errorf("dead zone part of partition %d: bad cell %q", *j.Partition, c.Cell)
		}
		pt.Cells = append(pt.Cells, result.PartCell{Start: c.Start, Cell: h3.Cell(cell), Zone: result.Zone{
			Warnings: c.Warnings, Couriers: c.Couriers, Restored: c.Restored, SilenceMs: c.SilenceMs, LongestMs: c.LongestMs,
		}})
	}
	return result.Record{Type: result.ZonePart, Start: *j.Through, EmittedAt: j.EmittedAt, Part: pt}, nil
}

// combineZones publishes the market's dead zones from the partitions'
// parts until ctx ends (nothing when dead zones are off). Every instance
// runs it.
func (r *Runner) combineZones(ctx context.Context) {
	if r.cfg.DeadZones.Window <= 0 {
		return
	}
	for ctx.Err() == nil {
		err := r.readZones(ctx)
		if ctx.Err() != nil {
			return
		}
		if ok, n := r.readersLog.Allow(); ok {
			r.log.Warn("dead zones: reading the partitions' parts again from the start", "err", err, "suppressed", n)
		}
		sleepCtx(ctx, fetchWait(r.cfg.JetStream))
	}
}

// readZones reads the parts from the start of the results stream, and
// publishes each window's dead zones once complete, unless recorded as
// published already. It returns when reading fails or ctx ends.
func (r *Runner) readZones(ctx context.Context) error {
	bc := r.br.Config()
	oc, err := r.js.OrderedConsumer(ctx, bc.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bc.Subject(bridge.KindZonePart)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", bc.Subject(bridge.KindZonePart), err)
	}
	m := newZoneMerger(r.cfg.Market, r.cfg.DeadZones.Window.Milliseconds(), len(r.parts), r.cfg.DeadZones.MaxCells)
	r.zones.Store(m)
	out := r.out.For()
	// One iterator, not a Fetch a time: an ordered consumer's Fetch makes
	// its server-side consumer anew each call.
	it, err := oc.Messages()
	if err != nil {
		return fmt.Errorf("read %s: %w", bc.Subject(bridge.KindZonePart), err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("read %s: %w", bc.Subject(bridge.KindZonePart), err)
		}
		part, err := decodePart(msg.Data())
		if err != nil {
			m.dropped.Add(1)
			continue
		}
		before := m.incomplete.Load()
		zs := m.add(&part)
		if m.incomplete.Load() > before {
			r.zonesIncomplete.Add(m.incomplete.Load() - before)
			r.log.Warn("dead zones published without every partition's part: a partition's watermark is far behind the others'",
				"windows_waiting", maxZoneWindows, "behind", m.behind())
		}
		if len(zs) > 0 {
			if err := r.publishZones(ctx, out, zs); err != nil {
				return err
			}
		}
	}
}

// publishZones publishes dead zones of windows not recorded as published,
// waits for their acks, and records their windows as published.
func (r *Runner) publishZones(ctx context.Context, out interface {
	Publish(context.Context, *result.Record) error
}, zs []result.Record) error {
	done, rev, err := r.zonesDone(ctx)
	if err != nil {
		return err
	}
	next := done
	for i := range zs {
		if zs[i].Start < done {
			continue
		}
		if err := out.Publish(ctx, &zs[i]); err != nil {
			return fmt.Errorf("publish %s: %w", zs[i].Key(), err)
		}
		r.zonesPublished.Add(1)
		next = max(next, zs[i].Start+1)
	}
	if next == done {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.br.Flush(fctx); err != nil {
		return fmt.Errorf("dead zones not acknowledged: %w", err)
	}
	val := []byte(strconv.FormatInt(next, 10))
	if rev == 0 {
		_, err = r.store.kv.Create(ctx, zonesKey, val)
	} else {
		_, err = r.store.kv.Update(ctx, zonesKey, val, rev)
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		// Another instance recorded it first (a wrong last sequence is
		// that too): the next window reads its record.
		r.log.Debug("dead zones: published windows not recorded", "err", err)
	}
	return nil
}

// zonesDone reads the first window whose dead zones are not recorded as
// published, and the record's revision (0: none yet).
func (r *Runner) zonesDone(ctx context.Context) (int64, uint64, error) {
	e, err := r.store.kv.Get(ctx, zonesKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return tmath.Never, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read the dead zones' record: %w", err)
	}
	done, err := strconv.ParseInt(string(e.Value()), 10, 64)
	if err != nil {
		return tmath.Never, e.Revision(), nil // rewritten by the next window
	}
	return done, e.Revision(), nil
}
