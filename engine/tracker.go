package engine

import (
	"slices"

	"github.com/km0/edgeproc/internal/tmath"
)

// tracker is the sequencer's list of tracked couriers (contract §3,
// Tracking and forgetting, Courier limit). It decides, in input order and
// for every shard at once, when a courier is forgotten and whether a new
// one gets a place, so those decisions cannot depend on the shard count.
//
// Couriers are kept in a min-heap by (latest, name). latest only grows, so
// a heap entry's key is allowed to lag behind it (a lower bound): a
// position updates only its courier's latest, and the heap is put right
// only at its top, when someone asks who the most idle courier is. Each
// courier has exactly one heap entry.
type tracker struct {
	max    int
	ttl    int64 // restore_ttl: forgotten once wm >= latest + ttl
	idle   int64 // max(size, gap): evictable once wm >= latest + idle
	byName map[string]*tracked
	heap   []heapEntry
	slots  []slotPool // by shard
}

// slotPool hands out the indexes of one shard's courier table, so that a
// position costs one lookup by name (here) rather than one more in its
// shard. A forgotten courier's index goes to a later new courier of the
// same shard, which sees the forget first: a shard's events keep input
// order.
type slotPool struct {
	free []int32
	next int32
}

// tracked is one tracked courier.
type tracked struct {
	name   string
	latest int64 // largest timestamp_ms of its valid positions
	// ahead holds its timestamps above the market's max_ts, in order:
	// positions of a fast clock, which count for the watermark only up to
	// their arrival.
	// A copy of one of them is a duplicate (it is in an unfired window),
	// and a duplicate must not move the watermark (see Engine.observe).
	ahead []int64
	shard int32 // shardOf(name)
	slot  int32 // its index in the shard's table
}

type heapEntry struct {
	key int64 // <= t.latest
	t   *tracked
}

func newTracker(max int, ttl, idle int64, shards int) *tracker {
	return &tracker{max: max, ttl: ttl, idle: idle, byName: map[string]*tracked{}, slots: make([]slotPool, shards)}
}

// full reports whether a new courier must first make room.
func (tr *tracker) full() bool { return len(tr.byName) >= tr.max }

// add starts tracking a courier of the given shard.
func (tr *tracker) add(name string, latest int64, shard int) *tracked {
	p := &tr.slots[shard]
	slot := p.next
	if n := len(p.free); n > 0 {
		slot, p.free = p.free[n-1], p.free[:n-1]
	} else {
		p.next++
	}
	t := &tracked{name: name, latest: latest, shard: int32(shard), slot: slot}
	tr.byName[name] = t
	tr.heap = append(tr.heap, heapEntry{key: latest, t: t})
	tr.up(len(tr.heap) - 1)
	return t
}

// top returns the tracked courier with the smallest latest (ties: the
// smallest name in byte order), or nil.
func (tr *tracker) top() *tracked {
	for len(tr.heap) > 0 {
		e := &tr.heap[0]
		if e.key == e.t.latest {
			return e.t
		}
		e.key = e.t.latest
		tr.down(0)
	}
	return nil
}

// expired returns the most idle courier if wm >= its latest + d.
func (tr *tracker) expired(wm, d int64) *tracked {
	t := tr.top()
	if t == nil || wm < tmath.Add(t.latest, d) {
		return nil
	}
	return t
}

// remove stops tracking the courier top returned.
func (tr *tracker) removeTop() {
	t := tr.heap[0].t
	delete(tr.byName, t.name)
	p := &tr.slots[t.shard]
	p.free = append(p.free, t.slot)
	n := len(tr.heap) - 1
	tr.heap[0] = tr.heap[n]
	tr.heap[n] = heapEntry{}
	tr.heap = tr.heap[:n]
	if n > 0 {
		tr.down(0)
	}
}

func (tr *tracker) less(i, j int) bool {
	a, b := &tr.heap[i], &tr.heap[j]
	if a.key != b.key {
		return a.key < b.key
	}
	return a.t.name < b.t.name
}

func (tr *tracker) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !tr.less(i, p) {
			return
		}
		tr.heap[p], tr.heap[i] = tr.heap[i], tr.heap[p]
		i = p
	}
}

func (tr *tracker) down(i int) {
	n := len(tr.heap)
	for {
		l, m := 2*i+1, i
		if l < n && tr.less(l, m) {
			m = l
		}
		if r := l + 1; r < n && tr.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		tr.heap[i], tr.heap[m] = tr.heap[m], tr.heap[i]
		i = m
	}
}

// isAhead reports whether ts is one of t's timestamps above maxTS, first
// dropping those that no longer are. t.ahead is kept sorted, so a courier
// whose clock runs fast (every position ahead, hundreds of them at a high
// rate) costs a binary search per position, not a scan.
func (t *tracked) isAhead(ts, maxTS int64) bool {
	k := 0
	for k < len(t.ahead) && t.ahead[k] <= maxTS {
		k++
	}
	switch {
	case k == len(t.ahead) && cap(t.ahead) > 8:
		t.ahead = nil // let a burst's slice go; a slightly fast phone keeps its small one
	case k > 0:
		t.ahead = t.ahead[:copy(t.ahead, t.ahead[k:])]
	}
	_, found := slices.BinarySearch(t.ahead, ts)
	return found
}

// addAhead records ts, above max_ts and not yet in t.ahead.
func (t *tracked) addAhead(ts int64) {
	i, _ := slices.BinarySearch(t.ahead, ts)
	t.ahead = slices.Insert(t.ahead, i, ts)
}
