package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// One instance of a market relays its broker at a time (jetstream.ingest
// mqtt): each position is read from the broker and stored once, whatever
// the number of instances, and the stream holds a partition's positions
// in the order the broker delivered them (one reader, storing in receive
// order), also across a NATS outage. The relay holds a lease of pin_ttl,
// a record in the checkpoint bucket (key relayKey) that it renews every
// pin_ttl/4 by compare-and-set; another instance takes it by compare-and-set once it
// has run out (its until is past). The relay reads the broker under the
// market's one client id (mqtt.client_id) and a persistent session, so a
// successor takes over the session's queue: what the broker holds for the
// market, and what the former relay received and had not acked (a
// position is acked to the broker only once the stream holds it, contract
// §8), which the successor stores again under the same message id, for
// the positions stream's duplicate window to drop. A former relay that
// wakes up after its lease ended is cut off twice: its renewal fails, and
// the broker has handed its session to the successor.
//
// The record also says whether the relay hears its broker: an owner on
// any instance ticks its partitions only while the positions can reach the
// stream (contract §3, deaf is not silent; part.heard).

// relayKey is the relay lease's key in the checkpoint bucket.
const relayKey = "relay"

// leasePoll is how often the relay looks at its lease: it renews it
// every pin_ttl/4, and at once when it starts or stops hearing its
// broker or lapses. The other instances do not poll: they watch the
// record (every renewal reaches them as it is written, so an owner knows
// within milliseconds whether the relay hears) and read it when it runs
// out, to take it, or every pin_ttl/4 should the watch miss an update.
// An instance waking five times a second for the lease was a fixed cost
// of every instance (docs/performance.md).
const leasePoll = 200 * time.Millisecond

// leaseRecord is the relay lease as stored.
type leaseRecord struct {
	Instance string `json:"instance"`
	UntilMs  int64  `json:"until_ms"` // unrenewed by then, it may be taken
	Hearing  bool   `json:"hearing"`  // the relay hears its broker
	// SinceMs, while set, is where the holder read the stream back from
	// when it took the lease (takeover.go), until it has acked past the
	// positions the broker gave it again: a successor of a relay that
	// never got that far reads back from there too, for those positions
	// still come back, as stored as they were.
	SinceMs int64 `json:"since_ms,omitempty"`
}

// relayLease runs the relay on this instance while it holds the lease,
// and tells every owner whether the market's relay hears its broker.
type relayLease struct {
	r   *Runner
	ttl time.Duration

	rev uint64 // the record's revision this instance wrote last while relaying; 0: not the relay

	mu      sync.Mutex
	seen    leaseRecord // the record as last read, written or watched
	seenRev uint64      // seen's revision
	relay   *relay      // the running relay while this instance holds the lease

	terms  atomic.Uint64 // leases taken, for tests
	counts relayCounts
}

func newRelayLease(r *Runner) *relayLease {
	return &relayLease{r: r, ttl: r.cfg.JetStream.PinTTL}
}

// run takes, renews and gives up the lease until ctx ends, then stops the
// relay (its acks given their last flush within drain) and gives the
// lease up, so that a successor takes over at once.
func (l *relayLease) run(ctx context.Context, drain func() context.Context) {
	w := &kvWatch{start: func() (jetstream.KeyWatcher, error) { return l.r.store.kv.Watch(ctx, relayKey) }}
	defer w.stop()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		l.step(ctx)
		updates, _ := w.updates() // retried every step while NATS is away
		t.Reset(l.nextStep(time.Now()))
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				l.resign(drain())
				return
			case <-t.C:
				waiting = false
			case e, ok := <-updates:
				switch {
				case !ok:
					w.stop()
					waiting = false
				case e != nil && l.rev == 0:
					l.observe(e)
					t.Reset(l.nextStep(time.Now()))
				}
			}
		}
	}
}

// nextStep is how long until the next step: the relay's poll; for the
// others the moment the lease they saw runs out (to take it), at the
// latest pin_ttl/4 from now.
func (l *relayLease) nextStep(now time.Time) time.Duration {
	if l.rev != 0 {
		return leasePoll
	}
	d := l.ttl / 4
	if left := time.UnixMilli(l.held().UntilMs).Sub(now); left <= 0 {
		d = leasePoll // ran out, not taken yet (NATS away, or another was faster)
	} else if left < d {
		d = left + time.Millisecond
	}
	return d
}

// observe keeps a record the watch delivered, unless it is older than
// the one seen.
func (l *relayLease) observe(e jetstream.KeyValueEntry) {
	var rec leaseRecord
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &rec) != nil {
		rec = leaseRecord{} // deleted or unreadable: taken like an ended one
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.Revision() > l.seenRev {
		l.seen, l.seenRev = rec, e.Revision()
	}
}

// stoppedRelay is why the running relay stopped itself, or nil.
func (l *relayLease) stoppedRelay() error {
	if rl := l.current(); rl != nil {
		return rl.stoppedWhy()
	}
	return nil
}

// step renews the lease if this instance holds it, or takes it if it has
// run out; it starts or stops the relay accordingly.
func (l *relayLease) step(ctx context.Context) {
	kv := l.r.store.kv
	cctx, cancel := context.WithTimeout(ctx, l.ttl/2)
	defer cancel()
	now := time.Now()
	if l.rev != 0 {
		held := l.held()
		if why := l.stoppedRelay(); why != nil {
			// It stopped itself: give the lease up (if it is still this
			// instance's) for the next relay to start at once.
			l.r.log.Warn("relay lease given up: the relay stopped itself", "why", why, "until", time.UnixMilli(held.UntilMs))
			l.resign(cctx)
			return
		}
		if now.UnixMilli() >= held.UntilMs {
			l.lose("the lease ran out before it was renewed")
			return
		}
		hearing := l.relayReady() == ""
		since := held.SinceMs
		if since != 0 && l.relaySettled() {
			since = 0
		}
		if hearing == held.Hearing && since == held.SinceMs && now.Add(l.ttl-l.ttl/4).UnixMilli() < held.UntilMs {
			return // renewed less than ttl/4 ago, and the owners know whether it hears
		}
		rec := leaseRecord{Instance: l.r.inst, UntilMs: now.Add(l.ttl).UnixMilli(), Hearing: hearing, SinceMs: since}
		rev, err := kv.Update(cctx, relayKey, mustJSON(rec), l.rev)
		switch {
		case err == nil:
			l.rev = rev
			l.set(rec, rev)
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			l.lose("another instance took the lease")
		default:
			l.r.log.Warn("relay lease not renewed; retrying", "err", err)
		}
		return
	}
	e, err := kv.Get(cctx, relayKey)
	var rec leaseRecord
	var rev uint64
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return
	default:
		if json.Unmarshal(e.Value(), &rec) != nil {
			rec = leaseRecord{} // unreadable: taken like an ended one
		}
		rev = e.Revision()
		l.set(rec, rev)
		if now.UnixMilli() < rec.UntilMs {
			return // another instance relays
		}
	}
	since := readBackFrom(rec, now, l.r.cfg.JetStream.PinTTL)
	mine := leaseRecord{Instance: l.r.inst, UntilMs: now.Add(l.ttl).UnixMilli(), SinceMs: since.UnixMilli()}
	newRev, err := kv.Update(cctx, relayKey, mustJSON(mine), rev)
	if err != nil {
		return // another instance was faster, or NATS is away: try again
	}
	l.rev = newRev
	l.set(mine, newRev)
	l.terms.Add(1)
	rl := newRelay(l.r)
	rl.since = since
	if err := rl.start(ctx, l.r.nc); err != nil {
		l.r.log.Error("relay not started; giving the lease up", "err", err)
		rl.close(ctx)
		l.resign(ctx)
		return
	}
	l.mu.Lock()
	l.relay = rl
	l.mu.Unlock()
	l.r.log.Info("relaying the market's broker", "client_id", l.r.cfg.MQTT.ClientID, "lease", l.ttl)
}

// lose stops the relay of a lease this instance no longer holds: what it
// received and had not acked, the broker hands to the successor.
func (l *relayLease) lose(why string) {
	l.r.log.Warn("relay lease lost; the relay stops", "why", why)
	l.rev = 0
	cut, cancel := context.WithCancel(context.Background())
	cancel()
	l.stopRelay(cut)
}

// resign stops the relay (its acks flushed within ctx) and ends the
// lease at once, for a successor to take it without waiting for it to
// run out.
func (l *relayLease) resign(ctx context.Context) {
	l.stopRelay(ctx)
	if l.rev == 0 {
		return
	}
	rec := leaseRecord{Instance: l.r.inst}
	if rev, err := l.r.store.kv.Update(ctx, relayKey, mustJSON(rec), l.rev); err == nil {
		l.set(rec, rev)
	}
	l.rev = 0
}

func (l *relayLease) stopRelay(ctx context.Context) {
	l.mu.Lock()
	rl := l.relay
	l.relay = nil
	l.mu.Unlock()
	if rl != nil {
		rl.close(ctx)
	}
}

// current is the running relay, nil when this instance does not relay.
func (l *relayLease) current() *relay {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.relay
}

// set keeps rec, read or written at revision rev.
func (l *relayLease) set(rec leaseRecord, rev uint64) {
	l.mu.Lock()
	l.seen, l.seenRev = rec, rev
	l.mu.Unlock()
}

func (l *relayLease) held() leaseRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen
}

// relaySettled reports whether the running relay has acked past the
// positions the broker gave it again.
func (l *relayLease) relaySettled() bool {
	rl := l.current()
	return rl != nil && rl.settled.Load()
}

// relayReady is the running relay's readiness, or notRelaying.
func (l *relayLease) relayReady() string {
	rl := l.current()
	if rl == nil {
		return notRelaying
	}
	return rl.ready()
}

// unacked is how many of the broker's messages the running relay holds
// unacked (0 when this instance does not relay): at the broker's window
// (Receive Maximum) the broker sends no more until acks come.
func (l *relayLease) unacked() int {
	rl := l.current()
	if rl == nil {
		return 0
	}
	if src := rl.src.Load(); src != nil {
		return src.Stats().Outstanding
	}
	return 0
}

// notRelaying is relayReady on an instance not holding the lease.
const notRelaying = "mqtt: not relaying"

// ready says why the market's positions cannot reach the stream now, or
// "": this instance's relay hears its broker, or another instance's
// lease says its relay does.
func (l *relayLease) ready() string {
	l.mu.Lock()
	rl, rec := l.relay, l.seen
	l.mu.Unlock()
	if rl != nil {
		return rl.ready()
	}
	switch {
	case rec.Instance == "" || time.Now().UnixMilli() >= rec.UntilMs:
		return "mqtt: no instance relays the market's broker"
	case !rec.Hearing:
		return fmt.Sprintf("mqtt: the relay (instance %s) does not hear the broker", rec.Instance)
	}
	return ""
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // a plain struct of strings, numbers and booleans
	}
	return b
}
