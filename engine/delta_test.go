package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/km0/edgeproc/result"
)

// equalSnapshots requires two whole snapshots to hold the same state:
// byte for byte but for the order of their couriers.
func equalSnapshots(t *testing.T, cfg Config, what string, got, want []byte) {
	t.Helper()
	g, err := splitSnapshot(cfg, got)
	if err != nil {
		t.Fatalf("%s: merged: %v", what, err)
	}
	w, err := splitSnapshot(cfg, want)
	if err != nil {
		t.Fatalf("%s: whole: %v", what, err)
	}
	if !bytes.Equal(g.prefix, w.prefix) || g.tag != w.tag || !bytes.Equal(g.counters, w.counters) || !bytes.Equal(g.zones, w.zones) {
		t.Fatalf("%s: headers or dead zones differ (tags %d, %d)", what, g.tag, w.tag)
	}
	if len(g.couriers) != len(w.couriers) {
		t.Fatalf("%s: %d couriers merged, %d in the whole snapshot", what, len(g.couriers), len(w.couriers))
	}
	for name, wc := range w.couriers {
		if gc, ok := g.couriers[name]; !ok || !bytes.Equal(gc, wc) {
			t.Fatalf("%s: courier %q differs (merged %v)", what, name, ok)
		}
	}
}

// TestCheckpointDelta_MergeEqualsWhole is the incremental snapshots'
// differential test: a run takes a whole snapshot, then incremental ones at
// random inputs, some while intake goes on (copy-on-write), some
// immediately followed by a whole one at the same barrier; every such
// whole one must equal the first whole snapshot merged with every delta
// since, courier for courier. The configurations are seedConfig's: a full
// courier table with forgetting, allowed lateness, dead zones and the
// service area. The
// merged snapshot restores, and the run goes on exactly as an
// uninterrupted one.
func TestCheckpointDelta_MergeEqualsWhole(t *testing.T) {
	defer func(n int) { snapBatch = n }(snapBatch)
	snapBatch = 3
	for seed := int64(1); seed <= 8; seed++ {
		ins := smallFleet(seed)
		cfg := seedConfig(t, seed)
		want := runAll(cfg, ins)
		r := rand.New(rand.NewPCG(uint64(seed), 5))

		var got []byte
		a := New(cfg, func(rs []result.Record) { got = append(got, encode(rs)...) })
		snaps := make(chan []byte, 64)
		keep := func(s [][]byte) { snaps <- bytes.Join(s, nil) }
		first := 1 + r.IntN(len(ins)/4)
		for i := range ins[:first] {
			a.Push(&ins[i])
		}
		a.Checkpoint(uint64(first), keep)
		base := <-snaps
		var deltas [][]byte
		prev, checked, deltaBytes, wholeBytes := uint64(first), 0, 0, 0
		var merged []byte
		var mergedAt int
		for i := first; i < len(ins); i++ {
			a.Push(&ins[i])
			if r.IntN(300) != 0 {
				continue
			}
			// Snapshots are handed over on goroutines of their own: each
			// has its own channel, to keep the chain's order.
			tag := uint64(i + 1)
			d1 := make(chan []byte, 1)
			a.CheckpointDelta(prev, tag, func(s [][]byte) { d1 <- bytes.Join(s, nil) })
			prev = tag
			if r.IntN(2) == 0 {
				// Intake goes on while the delta is saved.
				for j := i + 1; j < min(i+40, len(ins)); j++ {
					a.Push(&ins[j])
				}
				i = min(i+39, len(ins)-1)
				prev = uint64(i + 1)
				d2 := make(chan []byte, 1)
				a.CheckpointDelta(tag, prev, func(s [][]byte) { d2 <- bytes.Join(s, nil) })
				deltas = append(deltas, <-d1)
				d1 = d2
			}
			deltas = append(deltas, <-d1)
			deltaBytes += len(deltas[len(deltas)-1])
			// A whole snapshot at the same barrier.
			a.Checkpoint(prev, keep)
			whole := <-snaps
			wholeBytes += len(whole)
			m, err := Merge(cfg, base, deltas...)
			if err != nil {
				t.Fatalf("seed %d at %d: merge: %v", seed, i, err)
			}
			equalSnapshots(t, cfg, fmt.Sprintf("seed %d at %d", seed, i), m, whole)
			merged, mergedAt = m, i+1
			checked++
		}
		a.EndOfInput()
		if !bytes.Equal(got, want) {
			t.Fatalf("seed %d: taking snapshots changed the results", seed)
		}
		if checked < 3 {
			t.Fatalf("seed %d: only %d merges checked", seed, checked)
		}
		t.Logf("seed %d: %d merges equal the whole snapshots; deltas %d bytes, whole %d", seed, checked, deltaBytes, wholeBytes)

		// The last merged snapshot restores and goes on exactly.
		var rest []byte
		b, tag, err := Restore(cfg, func(rs []result.Record) { rest = append(rest, encode(rs)...) }, merged)
		if err != nil {
			t.Fatalf("seed %d: restore merged: %v", seed, err)
		}
		if tag != uint64(mergedAt) {
			t.Fatalf("seed %d: merged tag %d, want %d", seed, tag, mergedAt)
		}
		var prefix []byte
		p := New(cfg, func(rs []result.Record) { prefix = append(prefix, encode(rs)...) })
		for i := range ins[:mergedAt] {
			p.Push(&ins[i])
		}
		p.Stop()
		for i := mergedAt; i < len(ins); i++ {
			b.Push(&ins[i])
		}
		b.EndOfInput()
		if !bytes.Equal(append(prefix, rest...), want) {
			t.Fatalf("seed %d: the merged snapshot does not continue exactly", seed)
		}
	}
}

// TestMerge_RefusesABrokenChain: a delta that does not build on the
// snapshot before it (one left out, or the same twice), one of another
// configuration, and a damaged one are errors, never a merged state.
func TestMerge_RefusesABrokenChain(t *testing.T) {
	cfg := benchConfig(2)
	ins := smallFleet(3)
	a := New(cfg, func([]result.Record) {})
	snaps := make(chan []byte, 8)
	keep := func(s [][]byte) { snaps <- bytes.Join(s, nil) }
	for i := range ins[:500] {
		a.Push(&ins[i])
	}
	a.Checkpoint(500, keep)
	base := <-snaps
	for i := range ins[500:1000] {
		a.Push(&ins[500+i])
	}
	a.CheckpointDelta(500, 1000, keep)
	d1 := <-snaps
	for i := range ins[1000:1500] {
		a.Push(&ins[1000+i])
	}
	a.CheckpointDelta(1000, 1500, keep)
	d2 := <-snaps
	a.Stop()
	if _, err := Merge(cfg, base, d1, d2); err != nil {
		t.Fatalf("the chain itself: %v", err)
	}
	other := cfg
	other.Gap++
	damaged := bytes.Clone(d2)
	damaged = damaged[:len(damaged)-7]
	for _, c := range []struct {
		name   string
		cfg    Config
		deltas [][]byte
		want   error
	}{
		{"a delta left out", cfg, [][]byte{d2}, ErrSnapshotCorrupt},
		{"the same twice", cfg, [][]byte{d1, d1}, ErrSnapshotCorrupt},
		{"another configuration", other, [][]byte{d1}, ErrSnapshotConfig},
		{"truncated", cfg, [][]byte{d1, damaged}, ErrSnapshotCorrupt},
		{"a whole snapshot as a delta", cfg, [][]byte{base}, ErrSnapshotCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Merge(c.cfg, base, c.deltas...); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// TestCheckpointDelta_NothingListedWithoutSnapshots: an engine that takes
// no snapshot (a replay) keeps no list of changed or forgotten couriers,
// whatever it processes; one that does keeps only one interval's.
func TestCheckpointDelta_NothingListedWithoutSnapshots(t *testing.T) {
	cfg := seedConfig(t, 1) // a full table: couriers are forgotten
	ins := smallFleet(1)
	listed := func(e *Engine) (n int) {
		for _, s := range e.shards {
			n += len(s.changed) + len(s.forgotten)
		}
		return n
	}
	e := New(cfg, func([]result.Record) {})
	for i := range ins {
		e.Push(&ins[i])
	}
	e.Stop()
	if n := listed(e); n != 0 {
		t.Fatalf("without snapshots: %d couriers listed; want none", n)
	}
	e = New(cfg, func([]result.Record) {})
	snaps := make(chan []byte, 1)
	e.Checkpoint(0, func(s [][]byte) { snaps <- bytes.Join(s, nil) })
	<-snaps
	for i := range ins {
		e.Push(&ins[i])
	}
	e.Stop()
	if n := listed(e); n == 0 {
		t.Fatalf("after a snapshot: nothing listed for the next one")
	}
}
