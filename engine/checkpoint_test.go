package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/result"
)

func encode(rs []result.Record) []byte {
	var b []byte
	for i := range rs {
		b = rs[i].AppendJSON(b)
		b = append(b, '\n')
	}
	return b
}

func runAll(cfg Config, ins []Input) []byte {
	var out []byte
	e := New(cfg, func(rs []result.Record) { out = append(out, encode(rs)...) })
	for i := range ins {
		e.Push(&ins[i])
	}
	e.EndOfInput()
	return out
}

func smallFleet(seed int64) []Input {
	f := fleet.New(fleet.Config{Couriers: 25, Duration: 20 * time.Minute, Seed: seed, DuplicateRate: 0.02, BadRate: 0.01, TunnelFraction: 0.5, TunnelRate: 4})
	var ins []Input
	for e, ok := f.Next(); ok; e, ok = f.Next() {
		if e.TS%7 == 0 && e.Raw == nil {
			e.TS += 30_000 // a phone clock running fast: ahead of the arrival
		}
		// Half the inputs carry no arrival of their own, as replay lines
		// without arrival_ms.
		in := Input{Payload: fleet.AppendJSON(nil, e, false), Arrival: e.Arrival, HasArrival: e.TS%2 == 0, Line: int64(len(ins) + 1)}
		ins = append(ins, in)
	}
	return ins
}

// seedConfig is the configuration of seed 1 to 8 of the checkpoint
// tests: odd seeds with a full table (15 places for 25 couriers) and the
// shortest restore_ttl, so that tracking, forgetting and eviction carry
// across a checkpoint; seeds 5 and 6 with 2 minutes of allowed lateness;
// seeds 7 and 8 with dead zones over 5-minute windows (8 with at most 2
// cells a window, and Girona's service area).
func seedConfig(t *testing.T, seed int64) Config {
	cfg := benchConfig(2)
	cfg.IdleTimeout = 20_000
	if seed%2 == 1 {
		cfg.MaxCouriers, cfg.RestoreTTL = 15, cfg.Size
	}
	if seed > 6 {
		cfg.DeadZoneWindow, cfg.DeadZoneResolution = 300_000, 8
		if seed == 8 {
			cfg.DeadZoneCells = 2
			cfg.Area = gironaArea(t)
		}
	}
	if seed > 4 && seed <= 6 {
		cfg.AllowedLateness = 120_000
		cfg.RestoreTTL = max(cfg.RestoreTTL, cfg.Size+cfg.AllowedLateness)
	}
	return cfg
}

// TestCheckpoint_RestoreContinuesExactly cuts a run at random inputs,
// checkpoints, restores under another shard count, and requires the joined
// output to be byte-identical to an uninterrupted run, under each of
// seedConfig's configurations: tracking, forgetting and eviction, retained
// windows and their revision numbers, dead zones' warnings, restores and
// open silences, and each courier's side of the service area carry across
// the restore.
func TestCheckpoint_RestoreContinuesExactly(t *testing.T) {
	for seed := int64(1); seed <= 8; seed++ {
		ins := smallFleet(seed)
		cfg := seedConfig(t, seed)
		want := runAll(cfg, ins)
		if revised := bytes.Contains(want, []byte(`"revision":`)); revised != (cfg.AllowedLateness > 0) {
			t.Fatalf("seed %d: revisions in the output %v, allowed lateness %d", seed, revised, cfg.AllowedLateness)
		}
		if zoned := bytes.Contains(want, []byte(`"type":"dead_zone"`)); zoned != (cfg.DeadZoneWindow > 0) {
			t.Fatalf("seed %d: dead zones in the output %v, window %d", seed, zoned, cfg.DeadZoneWindow)
		}
		if moved := bytes.Contains(want, []byte(`_area"`)); moved != (cfg.Area != nil) {
			t.Fatalf("seed %d: moves across the service area in the output %v, area %v", seed, moved, cfg.Area != nil)
		}
		r := rand.New(rand.NewPCG(uint64(seed), 3))
		for trial := 0; trial < 3; trial++ {
			cut := r.IntN(len(ins))
			var got []byte
			sink := func(rs []result.Record) { got = append(got, encode(rs)...) }
			a := New(cfg, sink)
			for i := range ins[:cut] {
				a.Push(&ins[i])
			}
			var snap []byte
			a.Checkpoint(uint64(cut), func(s [][]byte) { snap = bytes.Join(s, nil) })
			a.Stop()
			if snap == nil {
				t.Fatalf("seed %d: no snapshot after Stop", seed)
			}
			cfg2 := cfg
			cfg2.Shards = 1 + r.IntN(5)
			b, tag, err := Restore(cfg2, sink, snap)
			if err != nil {
				t.Fatalf("seed %d cut %d: restore: %v", seed, cut, err)
			}
			if tag != uint64(cut) {
				t.Fatalf("got tag %d, want %d", tag, cut)
			}
			for i := cut; i < len(ins); i++ {
				b.Push(&ins[i])
			}
			b.EndOfInput()
			if !bytes.Equal(got, want) {
				t.Fatalf("seed %d cut %d/%d shards %d→%d: output differs from an uninterrupted run", seed, cut, len(ins), cfg.Shards, cfg2.Shards)
			}
		}
	}
}

// TestRestore_ReadsOlderVersions restores snapshots written by earlier
// builds: testdata/snapshot-v2.bin by the last build before allowed
// lateness (benchConfig(2) with a 20 s idle timeout after
// smallFleet(9)[:2000], tag 7), testdata/snapshot-v3.bin by the last one
// before dead zones (the same with allowed_lateness 2m, so with retained
// windows). Each run must go on exactly as an uninterrupted one; version
// 2 under another allowed lateness is refused, as a snapshot of other
// windows.
func TestRestore_ReadsOlderVersions(t *testing.T) {
	for _, c := range []struct {
		file     string
		lateness int64
	}{{"testdata/snapshot-v2.bin", 0}, {"testdata/snapshot-v3.bin", 120_000}} {
		t.Run(c.file, func(t *testing.T) {
			snap, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			cfg := benchConfig(2)
			cfg.IdleTimeout = 20_000
			cfg.AllowedLateness = c.lateness
			ins := smallFleet(9)
			const cut = 2000
			want := runAll(cfg, ins)
			var got []byte
			sink := func(rs []result.Record) { got = append(got, encode(rs)...) }
			a := New(cfg, sink)
			for i := range ins[:cut] {
				a.Push(&ins[i])
			}
			a.Checkpoint(cut, func([][]byte) {}) // the results of every input pushed reach the sink
			a.Stop()
			b, tag, err := Restore(cfg, sink, snap)
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			if tag != 7 {
				t.Fatalf("got tag %d, want 7", tag)
			}
			for i := cut; i < len(ins); i++ {
				b.Push(&ins[i])
			}
			b.EndOfInput()
			if !bytes.Equal(got, want) {
				t.Fatalf("restored: output differs from an uninterrupted run")
			}
			if c.lateness > 0 {
				return
			}
			late := cfg
			late.AllowedLateness = 60_000
			if e, _, err := Restore(late, func([]result.Record) {}, snap); !errors.Is(err, ErrSnapshotConfig) || !strings.Contains(err.Error(), "windows.allowed_lateness") {
				if e != nil {
					e.Stop()
				}
				t.Fatalf("version 2 under allowed lateness: got %v, want %v naming windows.allowed_lateness", err, ErrSnapshotConfig)
			}
		})
	}
}

func snapshotOf(t *testing.T, cfg Config, ins []Input) []byte {
	t.Helper()
	e := New(cfg, func([]result.Record) {})
	for i := range ins {
		e.Push(&ins[i])
	}
	var snap []byte
	e.Checkpoint(7, func(s [][]byte) { snap = bytes.Join(s, nil) })
	e.Stop()
	return snap
}

func TestRestore_RefusesForeignSnapshots(t *testing.T) {
	cfg := benchConfig(2)
	ins := smallFleet(9)[:2000]
	snap := snapshotOf(t, cfg, ins)
	future := append([]byte(nil), snap...)
	future[len(snapshotMagic)] = SnapshotVersion + 1 // one-byte uvarint
	other := cfg
	other.Gap++
	cases := []struct {
		name string
		cfg  Config
		snap []byte
		want error
	}{
		{"newer format version", cfg, future, ErrSnapshotVersion},
		{"another gap", other, snap, ErrSnapshotConfig},
		{"another allowed lateness", func() Config { c := cfg; c.AllowedLateness = 60_000; return c }(), snap, ErrSnapshotConfig},
		{"another distance filter", func() Config { c := cfg; c.Filter.MinMoveM++; return c }(), snap, ErrSnapshotConfig},
		{"another market", func() Config { c := cfg; c.Market = "valencia"; return c }(), snap, ErrSnapshotConfig},
		{"not a snapshot", cfg, []byte("{}"), ErrSnapshotCorrupt},
		{"truncated", cfg, snap[:len(snap)*2/3], ErrSnapshotCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, _, err := Restore(c.cfg, func([]result.Record) {}, c.snap)
			if !errors.Is(err, c.want) {
				if e != nil {
					e.Stop()
				}
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// pointStore is a checkpoint.Store holding at most one recovery point.
// FuzzRestore: no snapshot, however damaged, makes Restore panic, under
// each configuration: without allowed lateness (version 2 snapshots
// restore there too), with it (retained windows in the state) and with
// dead zones (their counts in the state).
func FuzzRestore(f *testing.F) {
	cfg := benchConfig(1)
	late := cfg
	late.AllowedLateness = 120_000
	ins := smallFleet(3)[:1500]
	snap := snapshotOf(&testing.T{}, cfg, ins[:300])
	f.Add(snap)
	f.Add(snap[:len(snap)/2])
	f.Add(snapshotOf(&testing.T{}, late, ins))
	zoned := cfg
	zoned.DeadZoneWindow, zoned.DeadZoneResolution = 300_000, 8
	f.Add(snapshotOf(&testing.T{}, zoned, smallFleet(7)))
	for _, v := range []string{"testdata/snapshot-v2.bin", "testdata/snapshot-v3.bin"} {
		if old, err := os.ReadFile(v); err == nil {
			f.Add(old)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range []Config{cfg, late, zoned} {
			e, _, err := Restore(c, func([]result.Record) {}, b)
			if err == nil {
				e.Stop()
			}
		}
	})
}

func TestCheckpoint_StateByCourier(t *testing.T) {
	// The same inputs under 1 and 4 shards restore to the same couriers.
	ins := smallFleet(5)[:5000]
	count := func(shards int) string {
		cfg := benchConfig(shards)
		e, _, err := Restore(benchConfig(3), func([]result.Record) {}, snapshotOf(t, cfg, ins))
		if err != nil {
			t.Fatal(err)
		}
		defer e.Stop()
		return fmt.Sprint(e.Stats().Couriers)
	}
	if a, b := count(1), count(4); a != b || a == "0" {
		t.Fatalf("couriers restored from 1 shard: %s, from 4: %s", a, b)
	}
}

// TestCheckpoint_CopyOnWriteUnderIntake takes the snapshot while inputs keep
// coming, saving one courier per step so that most are saved copy-on-write
// just before a change, and requires the restored run to continue exactly.
func TestCheckpoint_CopyOnWriteUnderIntake(t *testing.T) {
	defer func(n int) { snapBatch = n }(snapBatch)
	snapBatch = 1
	ins := smallFleet(11)
	cfg := benchConfig(2)
	want := runAll(cfg, ins)
	for _, cut := range []int{len(ins) / 5, len(ins) / 2, len(ins) - 10} {
		// The records of the inputs before the barrier.
		var prefix []byte
		d := New(cfg, func(rs []result.Record) { prefix = append(prefix, encode(rs)...) })
		for i := range ins[:cut] {
			d.Push(&ins[i])
		}
		d.Stop()

		snaps := make(chan []byte, 1)
		a := New(cfg, func([]result.Record) {})
		for i := range ins[:cut] {
			a.Push(&ins[i])
		}
		a.Checkpoint(1, func(s [][]byte) { snaps <- bytes.Join(s, nil) })
		for i := cut; i < len(ins); i++ { // intake goes on during the snapshot
			a.Push(&ins[i])
		}
		a.EndOfInput()
		snap := <-snaps

		var rest []byte
		b, _, err := Restore(benchConfig(3), func(rs []result.Record) { rest = append(rest, encode(rs)...) }, snap)
		if err != nil {
			t.Fatal(err)
		}
		for i := cut; i < len(ins); i++ {
			b.Push(&ins[i])
		}
		b.EndOfInput()
		if got := append(prefix, rest...); !bytes.Equal(got, want) {
			t.Fatalf("cut %d/%d: snapshot taken under intake does not continue exactly", cut, len(ins))
		}
	}
}

// TestCheckpoint_FastClockDuplicateAcrossRestore: a copy of a position
// ahead of its arrival, pushed after a restore, is still a duplicate and
// still does not move the watermark to its own later arrival.
func TestCheckpoint_FastClockDuplicateAcrossRestore(t *testing.T) {
	cfg := liveConfig()
	cfg.Topic = ""
	ins := []Input{*input("a", t0+50_000, t0), *input("a", t0+50_000, t0+20_000), *input("p", t0-15_000, t0+20_000)}
	want := runAll(cfg, ins)
	var got []byte
	sink := func(rs []result.Record) { got = append(got, encode(rs)...) }
	a := New(cfg, sink)
	a.Push(&ins[0])
	var snap []byte
	a.Checkpoint(1, func(s [][]byte) { snap = bytes.Join(s, nil) })
	a.Stop()
	b, _, err := Restore(cfg, sink, snap)
	if err != nil {
		t.Fatal(err)
	}
	b.Push(&ins[1])
	b.Push(&ins[2])
	b.Sync()
	if st := b.Stats(); st.Duplicates != 1 {
		t.Errorf("got %d duplicates after the restore, want 1", st.Duplicates)
	}
	b.EndOfInput()
	if !bytes.Equal(got, want) {
		t.Fatalf("output differs from an uninterrupted run:\n got %s\nwant %s", got, want)
	}
	// wm = t0 - 10 s (a's arrival), so p at t0-15 s is not late for sessions.
	if bytes.Contains(want, []byte(`"operator":"session"`)) {
		t.Fatalf("p late for sessions: the duplicate moved the watermark:\n%s", want)
	}
}

func gironaArea(t *testing.T) *geo.Area {
	t.Helper()
	a, err := geo.LoadArea("../demo/girona-area.geojson", geo.AreaResolution)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// CheckSnapshot refuses what Restore refuses for its header, reading no
// more than the header: a snapshot cut after it passes.
func TestCheckSnapshot_AsRestoreSees(t *testing.T) {
	cfg := benchConfig(2)
	snap := snapshotOf(t, cfg, smallFleet(9)[:2000])
	future := append([]byte(nil), snap...)
	future[len(snapshotMagic)] = SnapshotVersion + 1
	header := len(snapshotMagic) + 200 // past the header, well before the first courier's end
	cases := []struct {
		name string
		cfg  Config
		snap []byte
		want error // nil: accepted
	}{
		{"the same settings", cfg, snap, nil},
		{"only the header", cfg, snap[:header], nil},
		{"newer format version", cfg, future, ErrSnapshotVersion},
		{"another size", func() Config { c := cfg; c.Size *= 2; return c }(), snap, ErrSnapshotConfig},
		{"another gap", func() Config { c := cfg; c.Gap++; return c }(), snap, ErrSnapshotConfig},
		{"another allowed lateness", func() Config { c := cfg; c.AllowedLateness = 60_000; return c }(), snap, ErrSnapshotConfig},
		{"another distance filter", func() Config { c := cfg; c.Filter.MinMoveM++; return c }(), snap, ErrSnapshotConfig},
		{"another market", func() Config { c := cfg; c.Market = "valencia"; return c }(), snap, ErrSnapshotConfig},
		{"not a snapshot", cfg, []byte("{}"), ErrSnapshotCorrupt},
		{"header cut", cfg, snap[:len(snapshotMagic)+4], ErrSnapshotCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckSnapshot(c.cfg, c.snap)
			if c.want == nil {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			// Restore refuses the whole snapshot with the same error.
			if len(c.snap) == len(snap) {
				e, _, rerr := Restore(c.cfg, func([]result.Record) {}, c.snap)
				if e != nil {
					e.Stop()
				}
				if rerr == nil || rerr.Error() != err.Error() {
					t.Errorf("CheckSnapshot: %v\nRestore:       %v", err, rerr)
				}
			}
		})
	}
}
