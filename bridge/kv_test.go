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
	courier := []byte("van-3")
	b.UpdatePosition(courier, 1000, 41.9, 2.8)
	ts := int64(1000)
	// An H3 lookup allocates twice: a per-position path without allocations
	// cannot be computing cells.
	if n := testing.AllocsPerRun(1000, func() { ts++; b.UpdatePosition(courier, ts, 41.9, 2.8) }); n != 0 {
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

func TestUpdatePosition_StatusFollowsEventTime(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	b := mustOpen(t, nc, bridge.Config{Market: "girona", KVInterval: time.Minute})
	bucket := b.Config().KVBucket
	steps := []struct {
		name       string
		do         func()
		wantTS     int64
		wantStatus string
	}{
		{"first position", func() { b.UpdatePosition([]byte("c1"), 100, 1, 2) }, 100, bridge.StatusOnline},
		{"older position ignored", func() { b.UpdatePosition([]byte("c1"), 50, 9, 9) }, 100, bridge.StatusOnline},
		{"no_signal of the session", func() { b.MarkNoSignal("c1", 100, 1, 2) }, 100, bridge.StatusNoSignal},
		{"newer position is online", func() { b.UpdatePosition([]byte("c1"), 400, 3, 4) }, 400, bridge.StatusOnline},
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
}

// TestUpdatePosition_EvictedAndBackKeepsItsNewState: a courier evicted at
// MaxCouriers and back within one drain of the writer has its evicted
// state and its new one written in the same round; the new one must be
// written last, as the bucket keeps the last write. Positions do not wake
// the writer, so TickKV drains all four at once.
func TestUpdatePosition_EvictedAndBackKeepsItsNewState(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	b := mustOpen(t, nc, bridge.Config{Market: "girona", MaxCouriers: 2, KVInterval: time.Minute})
	b.UpdatePosition([]byte("a"), 5, 1, 1)
	b.UpdatePosition([]byte("b"), 5, 1, 1)
	b.UpdatePosition([]byte("c"), 5, 1, 1)  // evicts a, its state unwritten
	b.UpdatePosition([]byte("a"), 10, 2, 2) // a again, a new courier: evicts b
	b.TickKV()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if cs, _ := kvState(t, nc, b.Config().KVBucket, "a"); cs.TS != 10 || cs.Lat != 2 {
		t.Errorf("a: got stored %+v, want its new position (ts 10) written after its evicted one", cs)
	}
	if st := b.Stats(); st.KVEvicted != 2 || st.KVCouriers != 2 {
		t.Errorf("got KVEvicted %d, KVCouriers %d; want 2 (a, b), 2 (c, a)", st.KVEvicted, st.KVCouriers)
	}
}

// The courier's entry says which side of the service area it is on now:
// the side the engine first knew (MarkSide from OnSide), then each move's;
// a side dated no later than the one recorded changes nothing, a courier
// not in the table gets no entry from a side alone, and positions and
// status changes keep the side.
func TestMarkSide_TheSideNow(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	b := mustOpen(t, nc, bridge.Config{Market: "girona", KVInterval: time.Second})
	bucket := b.Config().KVBucket
	b.MarkSide("ghost", 100, true)
	steps := []struct {
		name     string
		do       func()
		wantTS   int64
		wantArea string
	}{
		{"first position: no side yet", func() { b.UpdatePosition([]byte("c1"), 100, 1, 2) }, 100, ""},
		{"first seen outside", func() { b.MarkSide("c1", 100, true) }, 100, bridge.AreaOutside},
		{"an older side ignored", func() { b.MarkSide("c1", 90, false) }, 100, bridge.AreaOutside},
		{"the same side again ignored", func() { b.MarkSide("c1", 100, false) }, 100, bridge.AreaOutside},
		{"no_signal keeps the side", func() { b.MarkNoSignal("c1", 100, 1, 2) }, 100, bridge.AreaOutside},
		{"entered", func() { b.MarkSide("c1", 200, false) }, 100, bridge.AreaInside},
		{"a newer position keeps it", func() { b.UpdatePosition([]byte("c1"), 300, 3, 4) }, 300, bridge.AreaInside},
		{"left", func() { b.MarkSide("c1", 400, true) }, 300, bridge.AreaOutside},
	}
	for _, s := range steps {
		s.do()
		got, _, ok := waitKV(t, nc, bucket, "c1", 2*time.Second, func(cs bridge.CourierState) bool {
			return cs.TS == s.wantTS && cs.Area == s.wantArea
		})
		if !ok {
			t.Fatalf("%s: got %+v, want ts %d area %q", s.name, got, s.wantTS, s.wantArea)
		}
	}
	b.TickKV()
	if cs, _, ok := waitKV(t, nc, bucket, "ghost", 100*time.Millisecond, func(cs bridge.CourierState) bool { return cs.Courier != "" }); ok {
		t.Errorf("a side alone made an entry: %+v", cs)
	}
}
