package reference

import (
	"fmt"
	"math/big"
	"sort"

	"github.com/uber/h3-go/v4"
)

// Dead zones (docs/semantics.md): every no_signal that did not fire only
// because the input ended counts in the tumbling window of its
// last_seen_ms and the H3 cell (DeadZoneRes) of its last position; a
// window with DeadZoneMaxCells cells takes no new cell. The signal_restored
// of a counted warning, while its window has not fired, adds its gap. A
// window fires when wm >= window end + GapMs, after the input that moved
// the watermark there (and everything that input emitted).

type zoneKey struct {
	start int64
	cell  h3.Cell
}

type zoneBucket struct {
	warnings, restored int64
	silence, longest   int64
	couriers           map[string]bool
	open               map[string]int64 // courier → last_seen of its unrestored warning here
}

type deadZones struct {
	buckets map[zoneKey]*zoneBucket
}

func (pr *processor) zonesOn() bool { return pr.p.DeadZoneWindowMs > 0 }

func (pr *processor) zoneWarn(courier string, last *position) {
	if !pr.zonesOn() {
		return
	}
	if pr.zones.buckets == nil {
		pr.zones.buckets = map[zoneKey]*zoneBucket{}
	}
	w := pr.p.DeadZoneWindowMs
	start := last.ts / w * w
	if last.ts < 0 && last.ts%w != 0 {
		start -= w
	}
	k := zoneKey{start, h3.LatLngToCell(h3.NewLatLng(last.lat, last.lon), pr.p.DeadZoneRes)}
	// A courier's earlier warning, not restored, no longer awaits its restore.
	for _, b := range pr.zones.buckets {
		delete(b.open, courier)
	}
	b := pr.zones.buckets[k]
	if b == nil {
		cells := 0
		for o := range pr.zones.buckets {
			if o.start == start {
				cells++
			}
		}
		if cells >= pr.p.DeadZoneMaxCells {
			return
		}
		b = &zoneBucket{couriers: map[string]bool{}, open: map[string]int64{}}
		pr.zones.buckets[k] = b
	}
	b.warnings++
	b.couriers[courier] = true
	b.open[courier] = last.ts
}

func (pr *processor) zoneRestore(courier string, silentFrom, restoredAt int64) {
	for _, b := range pr.zones.buckets {
		if last, ok := b.open[courier]; ok && last == silentFrom {
			delete(b.open, courier)
			gap := restoredAt - silentFrom
			b.restored++
			b.silence += gap
			b.longest = max(b.longest, gap)
		}
	}
}

// fireZones emits every dead zone whose window end + GapMs the watermark
// has reached, by window start and cell.
func (pr *processor) fireZones(emittedAt int64) {
	var due []zoneKey
	for k := range pr.zones.buckets {
		if cmp(pr.wm, new(big.Int).Add(plus(k.start, pr.p.DeadZoneWindowMs), big.NewInt(pr.p.GapMs))) >= 0 {
			due = append(due, k)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].start != due[j].start {
			return due[i].start < due[j].start
		}
		return due[i].cell < due[j].cell
	})
	for _, k := range due {
		b := pr.zones.buckets[k]
		delete(pr.zones.buckets, k)
		cell := k.cell.String()
		pr.emit(map[string]any{
			"type":               "dead_zone",
			"key":                fmt.Sprintf("dead_zone|%s|%s|%d", pr.p.Market, cell, k.start),
			"emitted_at_ms":      emittedAt,
			"window_start_ms":    k.start,
			"window_end_ms":      k.start + pr.p.DeadZoneWindowMs,
			"cell":               cell,
			"warnings":           b.warnings,
			"couriers":           int64(len(b.couriers)),
			"restored":           b.restored,
			"open":               b.warnings - b.restored,
			"silence_ms":         b.silence,
			"longest_silence_ms": b.longest,
		})
	}
}
