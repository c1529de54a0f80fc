package lake_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/lake"
)

// feedLog is a source's log of n entries: entry i is a row (Index i, a
// minute of event time after entry i-1's) unless i is a multiple of 9
// (an entry that is no accepted position: a rejected one, a tick).
func feedLog(n int) []lake.Row {
	var rs []lake.Row
	for i := 1; i <= n; i++ {
		if i%9 == 0 {
			continue
		}
		ts := int64(1_767_571_200_000) + int64(i)*60_000
		rs = append(rs, lake.Row{
			Index: uint64(i), Courier: []byte(fmt.Sprintf("c-%d", i%7)), TimestampMs: ts, ArrivalMs: ts + 1500,
			Lat: 41.9 + float64(i)*1e-5, Lon: 2.8, AccuracyM: float64(i % 40), HasAccuracy: i%4 != 0,
			LateDistance: i%11 == 0, LateSession: i%17 == 0,
		})
	}
	return rs
}

// feedSource plays a live source over a Feed: it adds its log's rows
// from after tag to to, and every `every` entries sends a checkpoint
// barrier (Cut), saving the checkpoint once its rows are staged. It
// returns the tags it saved.
func feedSource(t *testing.T, f *lake.Feed, log []lake.Row, tag, to, every uint64) []uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var saved []uint64
	next := 0
	for next < len(log) && log[next].Index <= tag {
		next++
	}
	for i := tag + 1; i <= to; i++ {
		if next < len(log) && log[next].Index == i {
			r := log[next]
			r.Courier = append([]byte(nil), r.Courier...) // the feed must copy it
			f.Add(&r)
			clear(r.Courier)
			next++
		}
		if i%every == 0 {
			f.Cut(i)
			if err := f.Staged(ctx, i); err != nil {
				t.Fatal(err)
			}
			saved = append(saved, i)
		}
	}
	return saved
}

func openFeed(t *testing.T, o lake.Options, tag uint64) *lake.Feed {
	t.Helper()
	f, err := lake.OpenFeed(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(tag); err != nil {
		t.Fatal(err)
	}
	return f
}

func closeFeed(t *testing.T, f *lake.Feed) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFeed_KilledAnywhereKeepsEveryRowOnce kills a feed and its writer
// (rolling every few milliseconds, compacting the closed dates) at
// random points, restarts it from the newest checkpoint saved — or an
// older one, as when the newest is damaged — and replays the log from
// there, as the service does: every row ends in exactly one Parquet row,
// and a clean close leaves no staging behind.
func TestFeed_KilledAnywhereKeepsEveryRowOnce(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 7))
			dir := t.TempDir()
			const n = 30000
			log := feedLog(n)
			o := lake.Options{Dir: dir, Market: "m", RollInterval: 20 * time.Millisecond, CompactAfter: time.Millisecond}
			var saved []uint64
			tag, at := uint64(0), uint64(0)
			for range 8 {
				f := openFeed(t, o, tag)
				at = min(n, at+uint64(1+rnd.IntN(n/6)))
				saved = append(saved, feedSource(t, f, log, tag, at, uint64(50+rnd.IntN(400)))...)
				f.Kill()
				if len(saved) > 0 {
					tag = saved[len(saved)-1]
					if len(saved) > 1 && rnd.IntN(4) == 0 {
						tag = saved[len(saved)-2] // the newest checkpoint was damaged
					}
				}
				at = tag
			}
			f := openFeed(t, o, tag)
			feedSource(t, f, log, tag, n, n)
			closeFeed(t, f)
			checkOnce(t, readLake(t, dir, "m"), log, time.UTC)
			if segs, _ := filepath.Glob(filepath.Join(lake.StagingDir(dir, "m"), "*")); len(segs) > 0 {
				t.Errorf("staging left after a clean close: %v", segs)
			}
		})
	}
}

// TestFeed_StagesBeforeTheCheckpoint: once Staged returns, the rows up to
// the barrier survive a crash that loses every row the writer held.
func TestFeed_StagesBeforeTheCheckpoint(t *testing.T) {
	dir := t.TempDir()
	log := feedLog(1000)
	o := lake.Options{Dir: dir, Market: "m", RollInterval: time.Hour}
	f := openFeed(t, o, 0)
	feedSource(t, f, log, 0, 500, 500)
	f.Kill() // nothing in Parquet yet: a roll is an hour away
	if got := readLake(t, dir, "m"); len(got) != 0 {
		t.Fatalf("%d rows in Parquet before any roll", len(got))
	}
	f = openFeed(t, o, 500)
	if s := f.Stats(); s.StagedSegments != 1 || s.Staged != 500 {
		t.Errorf("after the restart: %+v; want the one segment staged to 500", s)
	}
	feedSource(t, f, log, 500, 1000, 1000)
	closeFeed(t, f)
	checkOnce(t, readLake(t, dir, "m"), log, time.UTC)
}

// TestFeed_DiskFullHoldsTheCheckpointNotTheRows: staging on a full disk
// fails and is retried; the checkpoint waits (Staged), Behind says why,
// and once there is room every row is in the lake once.
func TestFeed_DiskFullHoldsTheCheckpointNotTheRows(t *testing.T) {
	mnt := testenv.Tmpfs(t, "256k")
	dir := filepath.Join(mnt, "lake")
	o := lake.Options{Dir: dir, Market: "m", RollInterval: 50 * time.Millisecond}
	f := openFeed(t, o, 0)
	// Padding: the rows of the first cut do not fit.
	pad, err := os.Create(filepath.Join(mnt, "pad"))
	if err != nil {
		t.Fatal(err)
	}
	pad.Write(make([]byte, 200<<10))
	pad.Close()
	log := feedLog(20000)
	for i := range log {
		log[i].Courier = []byte(fmt.Sprintf("courier-with-a-long-id-%d", i%500))
	}
	var added []lake.Row
	for _, r := range log {
		if r.Index > 8000 {
			break
		}
		f.Add(&r)
		added = append(added, r)
	}
	f.Cut(8000)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = f.Staged(ctx, 8000)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("staged on a full disk: %v", err)
	}
	if b := f.Behind(); b == nil || !strings.Contains(b.Error(), "no space left on device") {
		t.Errorf("Behind on a full disk: %v", b)
	}
	os.Remove(filepath.Join(mnt, "pad"))
	testenv.ResizeTmpfs(t, mnt, "64m")
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Staged(ctx, 8000); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "Behind clears", func() bool { return f.Behind() == nil })
	closeFeed(t, f)
	checkOnce(t, readLake(t, dir, "m"), added, time.UTC)
}

// TestFeed_FencedWritesNothing: a feed whose Fence fails (a partition's
// owner past its lease) stages and writes nothing.
func TestFeed_FencedWritesNothing(t *testing.T) {
	dir := t.TempDir()
	o := lake.Options{Dir: dir, Market: "m", Prefix: "p1-", RollInterval: 10 * time.Millisecond,
		Fence: func() error { return fmt.Errorf("fenced") }}
	f := openFeed(t, o, 0)
	log := feedLog(100)
	for _, r := range log {
		f.Add(&r)
	}
	f.Cut(100)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := f.Staged(ctx, 100); err == nil {
		t.Fatal("a fenced feed staged its rows")
	}
	f.Kill()
	if files := allFiles(t, dir); len(files) != 0 {
		t.Errorf("a fenced feed wrote %v", files)
	}
}

// TestFeed_FullLakeDiskSpills: with lake.dir's disk full, staging goes to
// the spill folder (the write-ahead log's disk) at once: the checkpoint
// does not wait, Behind says so; a restart finds the spilled segments;
// once lake.dir has room, every row is in the lake once and no staging
// is left in either folder.
func TestFeed_FullLakeDiskSpills(t *testing.T) {
	mnt := testenv.Tmpfs(t, "256k")
	dir := filepath.Join(mnt, "lake")
	spill := filepath.Join(t.TempDir(), "spill")
	o := lake.Options{Dir: dir, Market: "m", RollInterval: 50 * time.Millisecond, SpillDir: spill}
	f := openFeed(t, o, 0)
	pad, err := os.Create(filepath.Join(mnt, "pad"))
	if err != nil {
		t.Fatal(err)
	}
	pad.Write(make([]byte, 220<<10))
	pad.Close()
	log := feedLog(20000)
	for i := range log {
		log[i].Courier = []byte(fmt.Sprintf("courier-with-a-long-id-%d", i%500))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next := 0
	stage := func(to uint64) {
		for ; next < len(log) && log[next].Index <= to; next++ {
			f.Add(&log[next])
		}
		f.Cut(to)
		if err := f.Staged(ctx, to); err != nil {
			t.Fatalf("staging to %d with lake.dir full: %v; want it spilled", to, err)
		}
	}
	stage(8000)
	if b := f.Behind(); b == nil || !strings.Contains(b.Error(), "staging in "+spill) {
		t.Errorf("Behind while spilling: %v", b)
	}
	if segs, _ := filepath.Glob(filepath.Join(spill, "*.rows")); len(segs) != 1 {
		t.Fatalf("spill folder holds %v, want the one segment", segs)
	}
	f.Kill()
	f = openFeed(t, o, 8000)
	if s := f.Stats(); s.StagedSegments != 1 {
		t.Errorf("after a restart: %d staged segments, want the spilled one", s.StagedSegments)
	}
	os.Remove(filepath.Join(mnt, "pad"))
	testenv.ResizeTmpfs(t, mnt, "64m")
	stage(20000)
	testenv.WaitFor(t, 30*time.Second, "Behind clears", func() bool { return f.Behind() == nil })
	closeFeed(t, f)
	checkOnce(t, readLake(t, dir, "m"), log, time.UTC)
	for _, d := range []string{spill, lake.StagingDir(dir, "m")} {
		if segs, _ := filepath.Glob(filepath.Join(d, "*")); len(segs) > 0 {
			t.Errorf("staging left in %s after a clean close: %v", d, segs)
		}
	}
}
