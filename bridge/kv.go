package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
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
	e := b.couriers[cs.Courier]
	if e == nil {
		if len(b.couriers) >= b.cfg.MaxCouriers {
			b.kvMu.Unlock()
			b.kvRefused.Add(1)
			return
		}
		// Not written within the last KVInterval (else it would still be
		// tracked): writing now keeps the rate limit.
		e = &courierEntry{urgent: true}
		b.couriers[cs.Courier] = e
	} else if cs.Status != e.state.Status {
		e.urgent = true
	}
	e.state = cs
	e.dirty = true
	urgent := e.urgent
	b.kvMu.Unlock()
	if urgent {
		select {
		case b.kvWake <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
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
	if ok, suppressed := b.kvLog.allow(); ok {
		b.log.Warn(msg, "bucket", b.cfg.KVBucket, "courier", courier, "err", err, "suppressed", suppressed)
	}
}
