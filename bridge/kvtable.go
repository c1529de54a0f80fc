package bridge

import "time"

// courierEntry is the table's view of one courier.
type courierEntry struct {
	state      CourierState // newest state, written or not
	sideTS     int64        // the timestamp of the fix that decided state.Area
	dirty      bool         // state not yet written
	urgent     bool         // queued in kvTable.urgent: write at once
	lastWrite  time.Time
	prev, next *courierEntry // least recently updated first
}

// kvTable is owned by the writer goroutine (and by Close once it stopped).
type kvTable struct {
	m          map[string]*courierEntry
	head, tail *courierEntry
	urgent     []*courierEntry
	evicted    []CourierState // unwritten states of evicted couriers
	spareUps   []kvUpdate
	spareIDs   []byte
	batch      []kvWrite
	lostAt     time.Time // last recreate attempt of the bucket
}

func (t *kvTable) unlink(e *courierEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (t *kvTable) pushBack(e *courierEntry) {
	e.prev = t.tail
	if t.tail != nil {
		t.tail.next = e
	} else {
		t.head = e
	}
	t.tail = e
}

// touch marks e as the most recently updated courier.
func (t *kvTable) touch(e *courierEntry) {
	if t.tail != e {
		t.unlink(e)
		t.pushBack(e)
	}
}

func (t *kvTable) markUrgent(e *courierEntry) {
	e.dirty = true
	if !e.urgent {
		e.urgent = true
		t.urgent = append(t.urgent, e)
	}
}

// entry returns the courier's entry, adding it (and making room) if it is
// new; add reports which.
func entry[S string | []byte](c *Couriers, courier S) (e *courierEntry, added bool) {
	t := &c.table
	if e := t.m[string(courier)]; e != nil { // no allocation for a lookup
		return e, false
	}
	if len(t.m) >= c.cfg.MaxCouriers {
		old := t.head
		t.unlink(old)
		delete(t.m, old.state.Courier)
		if old.dirty {
			t.evicted = append(t.evicted, old.state)
		}
		old.dirty, old.urgent = false, false // a queued urgent write skips it
		c.kvEvicted.Add(1)
	}
	e = &courierEntry{}
	e.state.Courier = string(courier)
	t.m[e.state.Courier] = e
	t.pushBack(e)
	c.kvCouriers.Store(int64(len(t.m)))
	return e, true
}
