package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/km0/edgeproc/geo"
)

// Courier statuses stored in CourierState.Status.
const (
	StatusOnline   = "online"
	StatusNoSignal = "no_signal"
)

// CourierState is where a courier is now: the value (JSON) of its entry in
// the courier bucket, under the key CourierKey(Courier).
type CourierState struct {
	// Courier is the courier id. Required.
	Courier string `json:"courier"`
	// Lat and Lon are the last position, in degrees.
	Lat float64 `json:"lat"`
	Lon float64 `json:"lon"`
	// TS is the event time of the last position, ms since the Unix epoch.
	TS int64 `json:"timestamp_ms"`
	// Cell is the H3 cell of the last position.
	Cell string `json:"cell"`
	// Status is StatusOnline or StatusNoSignal.
	Status string `json:"status"`
}

// courierEntry is the coalescer's view of one courier.
type courierEntry struct {
	state     CourierState // latest update, written or not
	dirty     bool         // state not yet written
	urgent    bool         // write at once: status changed or courier new
	lastWrite time.Time
}

// UpdateCourier records a courier's latest state for the bucket without
// blocking. Writes are coalesced: at most one per courier per
// Config.KVInterval, except that a courier's first update and every status
// change are written at once (by the background writer, within
// milliseconds). The coalescer tracks at most Config.MaxCouriers couriers
// (a courier leaves it one KVInterval after its last write); an update for
// a further courier, or with an empty id, is dropped and counted in
// Stats.KVRefused. Updates after Close are ignored.
func (b *Bridge) UpdateCourier(cs CourierState) {
	select {
	case <-b.closing:
		return
	default:
	}
	if cs.Courier == "" {
		b.kvRefused.Add(1)
		return
	}
	b.kvMu.Lock()
	e := trackLocked(b, cs.Courier)
	if e == nil {
		b.kvMu.Unlock()
		return
	}
	if cs.Status != e.state.Status {
		e.urgent = true
	}
	e.state = cs
	e.dirty = true
	urgent := e.urgent
	b.kvMu.Unlock()
	if urgent {
		b.wakeKV()
	}
}

// trackLocked returns the coalescer's entry for courier, adding it while
// there is room; nil, counted in KVRefused, when MaxCouriers are tracked.
// kvMu is held.
func trackLocked[S string | []byte](b *Bridge, courier S) *courierEntry {
	if e := b.couriers[string(courier)]; e != nil { // no allocation for a lookup
		return e
	}
	if len(b.couriers) >= b.cfg.MaxCouriers {
		b.kvRefused.Add(1)
		return nil
	}
	// Not written within the last KVInterval (else it would still be
	// tracked): writing at once keeps the rate limit.
	e := &courierEntry{urgent: true}
	e.state.Courier = string(courier)
	b.couriers[e.state.Courier] = e
	return e
}

// kvLoop writes due courier states on a ticker, and at once when woken by
// an urgent update.
func (b *Bridge) kvLoop() {
	defer b.wg.Done()
	// A quarter of the interval: a coalesced state is written at most
	// 1.25 intervals after the previous write.
	t := time.NewTicker(max(b.cfg.KVInterval/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		case <-b.kvWake:
		}
		// Errors are counted and logged by flushKV; the states are retried.
		_ = b.flushKV(b.runCtx, time.Now(), false)
	}
}

// flushKV writes every dirty courier state that is due (all of them if all
// is set) and forgets couriers that are clean and were last written at
// least one interval ago. On the first failed write it puts that state and
// the rest back for the next round, since the others would most likely
// fail the same way.
func (b *Bridge) flushKV(ctx context.Context, now time.Time, all bool) error {
	var batch []CourierState
	b.kvMu.Lock()
	for id, e := range b.couriers {
		since := now.Sub(e.lastWrite)
		switch {
		case e.dirty && (all || e.urgent || since >= b.cfg.KVInterval):
			batch = append(batch, e.state)
			e.dirty, e.urgent, e.lastWrite = false, false, now
		case !e.dirty && since >= b.cfg.KVInterval:
			delete(b.couriers, id)
		}
	}
	b.kvMu.Unlock()

	for i, cs := range batch {
		if cs.Cell == "" && b.cfg.ComputeCell {
			cs.Cell = geo.Cell(cs.Lat, cs.Lon, b.cfg.CellResolution).String()
		}
		val, err := json.Marshal(cs)
		if err != nil {
			// NaN or Inf coordinates: retrying cannot help.
			b.kvErrors.Add(1)
			b.logKV("bridge: encode courier state", cs.Courier, err)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, b.cfg.AckTimeout)
		_, err = b.kv.Put(pctx, CourierKey(cs.Courier), val)
		cancel()
		if err != nil {
			b.kvErrors.Add(1)
			b.logKV("bridge: write courier state, will retry", cs.Courier, err)
			b.requeue(batch[i:])
			return fmt.Errorf("write courier %s to %s: %w", cs.Courier, b.cfg.KVBucket, err)
		}
		b.kvWrites.Add(1)
	}
	return nil
}

// requeue marks states whose write failed as dirty and due, unless a newer
// update has arrived meanwhile.
func (b *Bridge) requeue(states []CourierState) {
	b.kvMu.Lock()
	defer b.kvMu.Unlock()
	for _, cs := range states {
		e := b.couriers[cs.Courier]
		if e == nil {
			if len(b.couriers) >= b.cfg.MaxCouriers {
				b.kvRefused.Add(1)
				continue
			}
			e = &courierEntry{}
			b.couriers[cs.Courier] = e
		}
		if !e.dirty {
			e.state, e.dirty = cs, true
		}
		e.lastWrite = time.Time{}
	}
}

func (b *Bridge) logKV(msg, courier string, err error) {
	if ok, suppressed := b.kvLog.Allow(); ok {
		b.log.Warn(msg, "bucket", b.cfg.KVBucket, "courier", courier, "err", err, "suppressed", suppressed)
	}
}

// UpdatePosition records a courier's position (event time ts, ms) for the
// bucket. It is the per-position path, called for every valid position: it
// does not allocate for a courier already tracked and computes no cell (see
// Config.ComputeCell). A position no newer than the last one recorded for the
// courier is ignored, so a late or duplicate position never moves it back; a
// newer one sets the status to StatusOnline. Writes are coalesced and
// bounded as for UpdateCourier.
func (b *Bridge) UpdatePosition(courier []byte, ts int64, lat, lon float64) {
	if len(courier) == 0 {
		b.kvRefused.Add(1)
		return
	}
	select {
	case <-b.closing:
		return
	default:
	}
	b.kvMu.Lock()
	e := trackLocked(b, courier)
	if e == nil || ts <= e.state.TS {
		b.kvMu.Unlock()
		return
	}
	if e.state.Status != StatusOnline {
		e.urgent = true
	}
	e.state.Lat, e.state.Lon, e.state.TS, e.state.Cell = lat, lon, ts, ""
	e.state.Status = StatusOnline
	e.dirty = true
	urgent := e.urgent
	b.kvMu.Unlock()
	if urgent {
		b.wakeKV()
	}
}

// MarkNoSignal sets a courier's status to StatusNoSignal, with the latest
// position of its closed session (lastSeen, ms; lat, lon). It is ignored when
// a newer position of the courier has been recorded meanwhile: results reach
// the bridge after the positions that follow them, and a courier that is
// back must stay online.
func (b *Bridge) MarkNoSignal(courier string, lastSeen int64, lat, lon float64) {
	b.kvMu.Lock()
	if e := b.couriers[courier]; e != nil && e.state.TS > lastSeen {
		b.kvMu.Unlock()
		return
	}
	b.kvMu.Unlock()
	b.UpdateCourier(CourierState{Courier: courier, Lat: lat, Lon: lon, TS: lastSeen, Status: StatusNoSignal})
}

// MarkOnline sets the status of a tracked courier to StatusOnline (a
// signal_restored result). An untracked courier is left alone: its last
// write came from a position, which is online already.
func (b *Bridge) MarkOnline(courier string) {
	b.kvMu.Lock()
	e := b.couriers[courier]
	if e == nil || e.state.Status == StatusOnline {
		b.kvMu.Unlock()
		return
	}
	e.state.Status, e.dirty, e.urgent = StatusOnline, true, true
	b.kvMu.Unlock()
	b.wakeKV()
}

func (b *Bridge) wakeKV() {
	select {
	case b.kvWake <- struct{}{}:
	default: // a wake-up is already pending
	}
}
