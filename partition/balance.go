package partition

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Balance. The pinned_client policy gives a free partition to whoever asks
// first, so the instances keep count of each other themselves: every
// instance writes a heartbeat into the market's members bucket every
// pin_ttl/4 (its key expires pin_ttl after the last one, and a heartbeat
// older than pin_ttl is not counted), and its share is partitions / live
// instances, one more for the first partitions mod live instances in the
// order of their names (so the shares add up to the partitions and differ
// by one at most: 6 partitions on 4 instances are 2, 2, 1, 1), capped by
// jetstream.max_owned when set. An instance below its share asks for free partitions; one at it
// stops asking; one above it (an instance joined) hands one partition
// over at a time, gracefully (final checkpoint, then unpin), to whoever
// asks: the instances below their share. A leaving instance deletes its
// heartbeat first, so the others' shares grow at once. Ownership itself
// is unchanged: pins, claims and fencing decide it, never this count, so
// a wrong count can only delay a takeover, never give a partition two
// owners.

// heartbeat is an instance's record in the members bucket.
type heartbeat struct {
	Instance string `json:"instance"`
	AtMs     int64  `json:"at_ms"`
	Owned    int64  `json:"owned"`
}

func membersBucket(market string) string { return "edgeproc_members_" + market }

// memberKey is the instance's key: its name may hold any printable
// character, a key only a few.
func memberKey(inst string) string { return base64.RawURLEncoding.EncodeToString([]byte(inst)) }

// heartbeatEvery is how often an instance writes its heartbeat and counts
// the others.
func (r *Runner) heartbeatEvery() time.Duration { return r.cfg.JetStream.PinTTL / 4 }

// shares is this instance's count of the partitions it owns against its
// share of them; the partitions' loops and the balance goroutine use it
// concurrently.
type shares struct {
	parts, maxOwned int64
	owned           atomic.Int64 // partitions this instance owns now
	// counted is the share by the last count of live instances (0: not
	// counted yet); shedding is set while a partition is handed over.
	counted  atomic.Int64
	shedding atomic.Bool
}

// share is how many partitions this instance should own now.
func (s *shares) share() int64 {
	n := s.counted.Load()
	if n <= 0 { // before the first count: alone
		n = s.parts
	}
	if s.maxOwned > 0 {
		n = min(n, s.maxOwned)
	}
	return n
}

// atLimit reports whether the instance owns its share of the partitions.
func (s *shares) atLimit() bool { return s.owned.Load() >= s.share() }

// reserve counts one more owned partition unless that passes the share.
func (s *shares) reserve() bool {
	if n := s.owned.Add(1); n > s.share() {
		s.owned.Add(-1)
		return false
	}
	return true
}

// release counts one owned partition less.
func (s *shares) release() { s.owned.Add(-1) }

// shed reports whether a partition owned here should be handed over now:
// this instance owns more than its share and no other partition is being
// handed over. The caller releases it and then calls shedDone.
func (s *shares) shed() bool {
	return s.owned.Load() > s.share() && s.shedding.CompareAndSwap(false, true)
}

func (s *shares) shedDone() { s.shedding.Store(false) }

// balance writes the heartbeat every heartbeatEvery and follows the
// others' in a watch of the members bucket until ctx ends, then deletes
// the heartbeat, so that the others take this instance's partitions over
// without waiting for it to expire. The share is counted at each
// heartbeat and each change the watch brings (an instance joining or
// leaving is counted at once). A watch rather than listing the bucket
// each heartbeat: a listing is a consumer created on the server and
// read, a fixed cost of every instance several times a minute.
func (r *Runner) balance(ctx context.Context) {
	t := time.NewTicker(r.heartbeatEvery())
	defer t.Stop()
	key := memberKey(r.inst)
	w := &kvWatch{start: func() (jetstream.KeyWatcher, error) { return r.members.WatchAll(ctx) }}
	defer w.stop()
	seen := map[string]heartbeat{} // the others' last heartbeats, by key
	synced := false                // the watch delivered the bucket's current keys
	r.beat(ctx, key)
	for {
		updates, started := w.updates() // retried each heartbeat while NATS is away
		if started {
			clear(seen)
			synced = false
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), r.cfg.JetStream.PinTTL)
			_ = r.members.Delete(dctx, key)
			cancel()
			return
		case <-t.C:
			r.beat(ctx, key)
		case e, ok := <-updates:
			switch {
			case !ok:
				w.stop()
				continue
			case e == nil:
				synced = true
			case e.Key() == key:
				continue
			case e.Operation() != jetstream.KeyValuePut:
				delete(seen, e.Key())
			default:
				var hb heartbeat
				if json.Unmarshal(e.Value(), &hb) != nil {
					continue
				}
				seen[e.Key()] = hb
			}
		}
		if synced {
			r.count(seen)
		}
	}
}

// beat writes this instance's heartbeat.
func (r *Runner) beat(ctx context.Context, key string) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.JetStream.PinTTL)
	defer cancel()
	val, _ := json.Marshal(heartbeat{Instance: r.inst, AtMs: time.Now().UnixMilli(), Owned: r.shares.owned.Load()})
	if _, err := r.members.Put(cctx, key, val); err != nil {
		r.log.Debug("heartbeat not written", "err", err)
	}
}

// count sets this instance's share from the others' heartbeats seen,
// forgetting those older than pin_ttl.
func (r *Runner) count(seen map[string]heartbeat) {
	now := time.Now()
	names := []string{r.inst}
	for k, hb := range seen {
		switch {
		case now.Sub(time.UnixMilli(hb.AtMs)) > r.cfg.JetStream.PinTTL:
			delete(seen, k)
		case hb.Instance != r.inst:
			names = append(names, hb.Instance)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	live, rank := int64(len(names)), int64(slices.Index(names, r.inst))
	n := int64(len(r.parts))
	share := n / live
	if rank < n%live {
		share++
	}
	if old := r.shares.counted.Swap(share); old != share {
		r.log.Info("partition share", "instances", live, "share", r.shares.share(), "owned", r.shares.owned.Load())
	}
}
