package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/testenv"
)

func TestUpdatePosition_CellComputedAtWriteOnly(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	cfg := bridge.Config{Market: "girona", KVInterval: time.Second, ComputeCell: true, CellResolution: 9}
	b := mustOpen(t, nc, cfg)
	courier, tag := []byte("van-3"), new(any)
	b.UpdatePosition(tag, courier, 1000, 41.9, 2.8)
	ts := int64(1000)
	// An H3 lookup allocates twice: a per-position path without allocations
	// cannot be computing cells.
	if n := testing.AllocsPerRun(1000, func() { ts++; b.UpdatePosition(tag, courier, ts, 41.9, 2.8) }); n != 0 {
		t.Errorf("got %v allocations per position, want 0", n)
	}
	cs, _, ok := waitKV(t, nc, b.Config().KVBucket, "van-3", 3*time.Second, func(cs bridge.CourierState) bool { return cs.TS == ts })
	if !ok {
		t.Fatalf("latest position never written: got %+v, want TS %d", cs, ts)
	}
	want := bridge.CourierState{Courier: "van-3", Lat: 41.9, Lon: 2.8, TS: ts, Cell: geo.Cell(41.9, 2.8, 9).String(), Status: bridge.StatusOnline}
	if cs != want {
		t.Errorf("got %+v, want %+v", cs, want)
	}
}

// TestUpdatePosition_StatusFollowsEventTime runs the same steps with the
// courier looked up by name and with a tag (the engine's path).
func TestUpdatePosition_StatusFollowsEventTime(t *testing.T) {
	for _, tagged := range []bool{false, true} {
		t.Run(map[bool]string{false: "by name", true: "tagged"}[tagged], func(t *testing.T) {
			srv := testenv.StartNATS(t)
			nc := srv.Connect(t)
			b := mustOpen(t, nc, bridge.Config{Market: "girona", KVInterval: time.Minute})
			bucket := b.Config().KVBucket
			var tag *any
			if tagged {
				tag = new(any)
			}
			pos := func(ts int64, lat, lon float64) func() {
				return func() { b.UpdatePosition(tag, []byte("c1"), ts, lat, lon) }
			}
			steps := []struct {
				name       string
				do         func()
				wantTS     int64
				wantStatus string
			}{
				{"first position", pos(100, 1, 2), 100, bridge.StatusOnline},
				{"older position ignored", pos(50, 9, 9), 100, bridge.StatusOnline},
				{"no_signal of the session", func() { b.MarkNoSignal("c1", 100, 1, 2) }, 100, bridge.StatusNoSignal},
				{"newer position is online", pos(400, 3, 4), 400, bridge.StatusOnline},
				{"stale no_signal ignored", func() { b.MarkNoSignal("c1", 300, 5, 6) }, 400, bridge.StatusOnline},
				{"no_signal again", func() { b.MarkNoSignal("c1", 400, 3, 4) }, 400, bridge.StatusNoSignal},
				{"signal_restored", func() { b.MarkOnline("c1") }, 400, bridge.StatusOnline},
			}
			for _, s := range steps {
				s.do()
				// Every step here is a status change or a first sight, written at
				// once; the ignored steps are checked against the previous state.
				got, _, ok := waitKV(t, nc, bucket, "c1", 2*time.Second, func(cs bridge.CourierState) bool {
					return cs.TS == s.wantTS && cs.Status == s.wantStatus
				})
				if !ok {
					t.Fatalf("%s: got %+v, want ts %d status %s", s.name, got, s.wantTS, s.wantStatus)
				}
			}
		})
	}
}

// TestUpdatePosition_TagFollowsTheTable covers a tag whose entry is not the
// table's: evicted at MaxCouriers (it comes back as a new courier), and
// made after the table knew the courier by another path (the table's entry
// is the one updated, so a stale position stays ignored).
func TestUpdatePosition_TagFollowsTheTable(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	b := mustOpen(t, nc, bridge.Config{Market: "girona", MaxCouriers: 2, KVInterval: time.Minute})
	bucket := b.Config().KVBucket
	tagA, tagD := new(any), new(any)

	b.UpdatePosition(tagA, []byte("a"), 5, 1, 1)
	b.UpdateCourier(bridge.CourierState{Courier: "b", TS: 5, Status: bridge.StatusOnline})
	b.UpdateCourier(bridge.CourierState{Courier: "c", TS: 5, Status: bridge.StatusOnline}) // evicts a
	b.UpdatePosition(tagA, []byte("a"), 10, 2, 2)                                          // a again, new: evicts b
	b.TickKV()
	if cs, _ := kvState(t, nc, bucket, "a"); cs.TS != 10 {
		t.Errorf("a after its eviction: got stored %+v, want its new first position (ts 10) written at once", cs)
	}

	b.UpdateCourier(bridge.CourierState{Courier: "d", TS: 5, Status: bridge.StatusOnline}) // evicts c
	b.UpdatePosition(tagD, []byte("d"), 3, 9, 9)                                           // older than the table's d
	b.TickKV()
	if cs, _ := kvState(t, nc, bucket, "d"); cs.TS != 5 {
		t.Errorf("d after a stale position through a new tag: got stored %+v, want ts 5 kept", cs)
	}
	b.UpdatePosition(tagD, []byte("d"), 20, 3, 3)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil { // Close writes what is still waiting
		t.Fatalf("close: %v", err)
	}
	if st := b.Stats(); st.KVEvicted != 3 || st.KVCouriers != 2 {
		t.Errorf("got KVEvicted %d, KVCouriers %d; want 3 (a, b, c), 2 (a, d)", st.KVEvicted, st.KVCouriers)
	}
	if cs, _ := kvState(t, nc, bucket, "d"); cs.TS != 20 || cs.Lat != 3 {
		t.Errorf("d: got stored %+v, want its newest position (ts 20)", cs)
	}
}
