package lake_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/lake"
)

var madrid = mustZone("Europe/Madrid")

func mustZone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// row is what a test checks of a lake row.
type row struct {
	courier        string
	ts, arr        int64
	lat, lon, acc  float64
	hasAcc         bool
	lateD, lateS   bool
	date, fileName string
}

func (r row) key() string { return fmt.Sprintf("%s|%d", r.courier, r.ts) }

// mkRows makes n rows from index first on, one every step ms of event
// time from ts0, couriers taking turns, each arriving 2 s after its time.
func mkRows(first uint64, n int, ts0, step int64) []lake.Row {
	rs := make([]lake.Row, n)
	for i := range rs {
		ts := ts0 + int64(i)*step
		rs[i] = lake.Row{
			Index: first + uint64(i), Courier: []byte(fmt.Sprintf("c-%d", i%7)),
			TimestampMs: ts, ArrivalMs: ts + 2000,
			Lat: 41.9 + float64(i)*1e-5, Lon: 2.8 - float64(i)*1e-5,
			AccuracyM: float64(i % 30), HasAccuracy: i%3 != 0,
			LateDistance: i%11 == 0, LateSession: i%13 == 0,
		}
	}
	return rs
}

func open(t *testing.T, o lake.Options) *lake.Writer {
	t.Helper()
	w, err := lake.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func appendAll(t *testing.T, w *lake.Writer, rs []lake.Row) {
	t.Helper()
	for i := range rs {
		if err := w.Append(&rs[i]); err != nil {
			t.Fatalf("append %d: %v", rs[i].Index, err)
		}
	}
}

func mustClose(t *testing.T, w *lake.Writer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// kill stops a writer without letting it finish anything.
func kill(w *lake.Writer) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.Close(ctx)
}

// readLake reads every row of the market's positions, as a reader would.
func readLake(t *testing.T, dir, market string) []row {
	t.Helper()
	files, err := lake.Files(lake.MarketDir(dir, market))
	if err != nil {
		t.Fatal(err)
	}
	var out []row
	for _, f := range files {
		date := strings.TrimPrefix(filepath.Base(filepath.Dir(f)), "date=")
		err := lake.ReadFile(f, func(r *lake.Row) error {
			out = append(out, row{courier: string(r.Courier), ts: r.TimestampMs, arr: r.ArrivalMs, lat: r.Lat, lon: r.Lon,
				acc: r.AccuracyM, hasAcc: r.HasAccuracy, lateD: r.LateDistance, lateS: r.LateSession, date: date, fileName: filepath.Base(f)})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkOnce fails unless the lake holds every row of want exactly once,
// in its date, with its values.
func checkOnce(t *testing.T, got []row, want []lake.Row, loc *time.Location) {
	t.Helper()
	seen := map[string]row{}
	for _, r := range got {
		if _, dup := seen[r.key()]; dup {
			t.Errorf("row %s twice", r.key())
		}
		seen[r.key()] = r
	}
	for _, w := range want {
		k := fmt.Sprintf("%s|%d", w.Courier, w.TimestampMs)
		r, ok := seen[k]
		if !ok {
			t.Errorf("row %s (index %d) missing", k, w.Index)
			continue
		}
		wantDate := time.UnixMilli(w.TimestampMs).In(loc).Format("2006-01-02")
		if r.date != wantDate || r.arr != w.ArrivalMs || r.lat != w.Lat || r.lon != w.Lon || r.hasAcc != w.HasAccuracy ||
			(w.HasAccuracy && r.acc != w.AccuracyM) || r.lateD != w.LateDistance || r.lateS != w.LateSession {
			t.Errorf("row %s: got %+v, want %+v in date %s", k, r, w, wantDate)
		}
		delete(seen, k)
	}
	for k := range seen {
		t.Errorf("row %s is in the lake but was never appended", k)
	}
}

func TestWriter_RollsByDateInTheMarketsZone(t *testing.T) {
	// 2026-03-29 02:00 in Madrid is 03:00 (a 23-hour day) and 2026-10-25
	// 03:00 is 02:00 again (a 25-hour day): rows every 7 minutes across
	// both changes and their midnights.
	for _, c := range []struct {
		name  string
		start time.Time
		dates []string
	}{
		{"spring forward", time.Date(2026, 3, 28, 20, 0, 0, 0, madrid), []string{"2026-03-28", "2026-03-29", "2026-03-30"}},
		{"fall back", time.Date(2026, 10, 24, 20, 0, 0, 0, madrid), []string{"2026-10-24", "2026-10-25", "2026-10-26"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w := open(t, lake.Options{Dir: dir, Market: "girona", Location: madrid})
			rs := mkRows(1, 400, c.start.UnixMilli(), 7*60*1000) // 46 h 33
			appendAll(t, w, rs)
			mustClose(t, w)
			got := readLake(t, dir, "girona")
			checkOnce(t, got, rs, madrid)
			var dates []string
			for _, r := range got {
				if len(dates) == 0 || dates[len(dates)-1] != r.date {
					dates = append(dates, r.date)
				}
			}
			if !slices.Equal(dates, c.dates) {
				t.Errorf("dates %v, want %v", dates, c.dates)
			}
			// The day of the change holds 23 or 25 hours of rows, by the zone.
			start, end, _ := lake.DateBounds(c.dates[1], madrid)
			n := 0
			for _, r := range got {
				if r.date == c.dates[1] {
					n++
					if r.ts < start || r.ts >= end {
						t.Errorf("row at %v in date %s", time.UnixMilli(r.ts).In(madrid), r.date)
					}
				}
			}
			if want := int((end-start)/(7*60*1000)) + 1; n < want-1 || n > want {
				t.Errorf("%s holds %d rows, want about %d (%v long)", c.dates[1], n, want, time.Duration(end-start)*time.Millisecond)
			}
		})
	}
}

func TestWriter_FileNamesSortInLogOrder(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	w := open(t, lake.Options{Dir: dir, Market: "m", RollInterval: time.Minute})
	rs := mkRows(1, 3000, now.UnixMilli(), 100)
	for i := 0; i < len(rs); i += 1000 {
		w.Tick(now)
		appendAll(t, w, rs[i:i+1000])
		now = now.Add(time.Minute)
		w.Tick(now)
		testenv.WaitFor(t, time.Minute, "the roll", func() bool { return w.Durable() == rs[i+999].Index })
	}
	mustClose(t, w)
	got := readLake(t, dir, "m")
	checkOnce(t, got, rs, time.UTC)
	var names []string
	for i, r := range got {
		if r.ts != rs[i].TimestampMs {
			t.Fatalf("row %d has ts %d, want %d: files do not read back in log order", i, r.ts, rs[i].TimestampMs)
		}
		if len(names) == 0 || names[len(names)-1] != r.fileName {
			names = append(names, r.fileName)
		}
	}
	want := []string{
		"00000000000000000001-00000000000000001000.parquet",
		"00000000000000001001-00000000000000002000.parquet",
		"00000000000000002001-00000000000000003000.parquet",
	}
	if !slices.Equal(names, want) {
		t.Errorf("files %v, want %v", names, want)
	}
}

func TestWriter_Durable(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	w := open(t, lake.Options{Dir: dir, Market: "m", RollInterval: time.Minute})
	w.Tick(now)
	if d := w.Durable(); d != 0 {
		t.Fatalf("empty lake: durable %d, want 0", d)
	}
	w.Advance(5) // log entries 1-5 held no accepted position
	if d := w.Durable(); d != 5 {
		t.Fatalf("after Advance(5): durable %d, want 5", d)
	}
	rs := mkRows(10, 5, now.UnixMilli(), 1000)
	appendAll(t, w, rs)
	w.Advance(20)
	if d := w.Durable(); d != 9 {
		t.Fatalf("rows 10-14 buffered: durable %d, want 9", d)
	}
	w.Tick(now.Add(59 * time.Second))
	if d := w.Durable(); d != 9 {
		t.Fatalf("before the roll interval: durable %d, want 9", d)
	}
	w.Tick(now.Add(time.Minute))
	testenv.WaitFor(t, time.Minute, "durable 20", func() bool { return w.Durable() == 20 })
	if err := w.Append(&lake.Row{Index: 20, Courier: []byte("x"), TimestampMs: 1}); !errors.Is(err, lake.ErrOrder) {
		t.Errorf("append of index 20 after 20: %v, want ErrOrder", err)
	}
	mustClose(t, w)

	// Reopened, it stands where it was; rows appended again are skipped.
	w = open(t, lake.Options{Dir: dir, Market: "m", RollInterval: time.Minute})
	if d := w.Durable(); d != 20 {
		t.Fatalf("reopened: durable %d, want 20", d)
	}
	// A log that ends before the lake is another log (state.dir wiped).
	if err := w.CheckLog(19); !errors.Is(err, lake.ErrOtherLog) || !strings.Contains(err.Error(), "durable") {
		t.Errorf("CheckLog(19): %v, want ErrOtherLog naming the marker", err)
	}
	if err := w.CheckLog(20); err != nil {
		t.Errorf("CheckLog(20): %v", err)
	}
	appendAll(t, w, rs)
	if s := w.Stats(); s.RowsSkipped != 5 || s.RowsAppended != 0 || s.RowsBuffered != 0 {
		t.Errorf("rows appended again: %+v, want 5 skipped and none buffered", s)
	}
	mustClose(t, w)
	checkOnce(t, readLake(t, dir, "m"), rs, time.UTC)
}

// crashRun appends rows through a writer that dies at step (its n-th
// occurrence), reopens the lake as a restart would, appends every row
// again (the log replayed from its start: the writer must skip what it
// holds) and checks each row is there exactly once.
func TestWriter_CrashAtAnyStepKeepsEveryRowOnce(t *testing.T) {
	day := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		step string
		nth  int32
	}{
		{"roll:file", 1},        // one date's file renamed, the next date's not written
		{"roll:file", 2},        // every file renamed, the marker not written
		{"roll:marker", 1},      // the same, by the other hook
		{"roll:marker", 3},      // a later roll
		{"compact:merged", 1},   // the merged file renamed, no small one removed
		{"compact:removing", 1}, // one small file removed, the others not
	} {
		t.Run(fmt.Sprintf("%s#%d", c.step, c.nth), func(t *testing.T) {
			dir := t.TempDir()
			o := lake.Options{Dir: dir, Market: "m", RollInterval: time.Minute, CompactAfter: time.Hour}
			rs := mkRows(1, 4000, day.UnixMilli(), 3000) // 3h20: across midnight
			w := open(t, o)
			var hits atomic.Int32
			var crashed atomic.Bool
			w.SetCrash(func(step string) bool {
				if step == c.step && hits.Add(1) == c.nth {
					crashed.Store(true)
				}
				return crashed.Load()
			})
			now := day
			for i := 0; i < len(rs) && !crashed.Load(); i += 500 {
				w.Tick(now)
				appendAll(t, w, rs[i:i+500])
				now = now.Add(time.Minute)
				w.Tick(now)
				want := rs[i+499].Index
				testenv.WaitFor(t, time.Minute, "the roll or the crash", func() bool { return crashed.Load() || w.Durable() == want })
			}
			if !crashed.Load() {
				// Compaction: the first date closes an hour after it ends.
				w.Tick(day.Add(27 * time.Hour))
				testenv.WaitFor(t, time.Minute, "the crash in compaction", crashed.Load)
			}
			kill(w)

			w = open(t, o)
			from := w.Durable()
			appendAll(t, w, rs) // the whole log again: rows <= from are skipped
			if s := w.Stats(); s.RowsSkipped != int64(from) {
				t.Errorf("skipped %d rows, want %d (durable at open)", s.RowsSkipped, from)
			}
			w.Tick(day.Add(28 * time.Hour))
			mustClose(t, w)
			checkOnce(t, readLake(t, dir, "m"), rs, time.UTC)
			// Open deleted what the crash left: no temporary file, and
			// no file a merged one covers (readers would skip it).
			var parquets []string
			for _, f := range allFiles(t, dir) {
				if strings.HasSuffix(f, ".tmp") {
					t.Errorf("temporary file %s left", f)
				}
				if strings.HasSuffix(f, ".parquet") {
					parquets = append(parquets, f)
				}
			}
			if live, _ := lake.Files(dir); len(live) != len(parquets) {
				t.Errorf("%d files on disk, %d of them live: Open left covered files %v", len(parquets), len(live), parquets)
			}
		})
	}
}

func allFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestWriter_CompactsAClosedDate(t *testing.T) {
	dir := t.TempDir()
	day := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	// Row groups of 64 rows: the merged file has many, read back in order.
	o := lake.Options{Dir: dir, Market: "m", RollInterval: time.Minute, CompactAfter: 2 * time.Hour, RowGroupRows: 64}
	w := open(t, o)
	rs := mkRows(1, 1200, day.UnixMilli(), 6000) // 23:00 to 01:00
	now := day
	for i := 0; i < len(rs); i += 100 {
		w.Tick(now)
		appendAll(t, w, rs[i:i+100])
		now = now.Add(time.Minute)
		w.Tick(now)
		want := rs[i+99].Index
		testenv.WaitFor(t, time.Minute, "the roll", func() bool { return w.Durable() == want })
	}
	count := func(date string) int {
		fs, _ := filepath.Glob(filepath.Join(lake.DateDir(dir, "m", date), "*.parquet"))
		return len(fs)
	}
	if count("2026-12-01") != 6 || count("2026-12-02") != 6 {
		t.Fatalf("before compaction: %d and %d files, want 6 and 6", count("2026-12-01"), count("2026-12-02"))
	}
	w.Tick(time.Date(2026, 12, 2, 1, 59, 0, 0, time.UTC)) // not yet closed
	w.Tick(time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC))  // closed: 2h after its end
	testenv.WaitFor(t, time.Minute, "compaction", func() bool { return w.Stats().Compactions == 1 })
	if count("2026-12-01") != 1 || count("2026-12-02") != 6 {
		t.Errorf("after compaction: %d and %d files, want 1 and 6", count("2026-12-01"), count("2026-12-02"))
	}
	// A straggler of the closed date lands beside the merged file.
	late := lake.Row{Index: 5000, Courier: []byte("late"), TimestampMs: day.Add(30 * time.Minute).UnixMilli(), ArrivalMs: now.UnixMilli()}
	if err := w.Append(&late); err != nil {
		t.Fatal(err)
	}
	mustClose(t, w)
	got := readLake(t, dir, "m")
	checkOnce(t, got, append(slices.Clone(rs), late), time.UTC)
	// Merged rows are in log order.
	var ts []int64
	for _, r := range got {
		if r.date == "2026-12-01" && r.courier != "late" {
			ts = append(ts, r.ts)
		}
	}
	if !slices.IsSorted(ts) || len(ts) != 600 {
		t.Errorf("merged file: %d rows, sorted %v; want 600 in log order", len(ts), slices.IsSorted(ts))
	}
}

func TestWriter_Retention(t *testing.T) {
	dir := t.TempDir()
	o := lake.Options{Dir: dir, Market: "m", RollInterval: time.Minute, Retention: 2 * 24 * time.Hour, Location: madrid}
	w := open(t, o)
	var rs []lake.Row
	for d := 1; d <= 5; d++ { // noon of 1 to 5 December, Madrid
		rs = append(rs, mkRows(uint64(d*10), 3, time.Date(2026, 12, d, 12, 0, 0, 0, madrid).UnixMilli(), 1000)...)
	}
	appendAll(t, w, rs)
	w.Tick(time.Date(2026, 12, 5, 23, 0, 0, 0, madrid)) // rolls (the first tick) and keeps house
	testenv.WaitFor(t, time.Minute, "the roll", func() bool { return w.Durable() == rs[len(rs)-1].Index })
	// 6 December 00:00 Madrid: 3 December ended 2 days ago, and goes.
	w.Tick(time.Date(2026, 12, 6, 0, 0, 0, 0, madrid))
	testenv.WaitFor(t, time.Minute, "retention", func() bool { return w.Stats().DatesDeleted == 3 })
	mustClose(t, w)
	ents, _ := os.ReadDir(lake.MarketDir(dir, "m"))
	var dates []string
	for _, e := range ents {
		dates = append(dates, e.Name())
	}
	if want := []string{"date=2026-12-04", "date=2026-12-05"}; !slices.Equal(dates, want) {
		t.Errorf("date folders %v, want %v", dates, want)
	}
}

func TestWriter_DiskFullKeepsRowsAndRetries(t *testing.T) {
	mnt := testenv.Tmpfs(t, "1m")
	dir := filepath.Join(mnt, "lake")
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	o := lake.Options{Dir: dir, Market: "m", RollInterval: time.Minute}
	w := open(t, o)
	w.Tick(now)
	// Random-ish coordinates that compress badly: ~3 MB of Parquet.
	rs := mkRows(1, 150000, now.UnixMilli(), 7)
	for i := range rs {
		rs[i].Lat += float64((i*7919)%1000) * 1e-3
		rs[i].Lon += float64((i*104729)%1000) * 1e-3
		rs[i].Courier = []byte(fmt.Sprintf("courier-%d", (i*31)%5000))
	}
	appendAll(t, w, rs)
	now = now.Add(time.Minute)
	w.Tick(now)
	testenv.WaitFor(t, 30*time.Second, "the failed write", func() bool { return w.Stats().WriteErrors > 0 })
	s := w.Stats()
	if !strings.Contains(s.LastError, "no space left on device") || w.Behind() == nil || w.Durable() != 0 || s.RowsBuffered != int64(len(rs)) {
		t.Fatalf("disk full: %+v, behind %v, durable %d; want the error kept, behind, durable 0 and every row buffered", s, w.Behind(), w.Durable())
	}
	for _, f := range allFiles(t, mnt) {
		if strings.HasSuffix(f, ".parquet") {
			t.Errorf("a partial file is named %s", f)
		}
	}
	testenv.ResizeTmpfs(t, mnt, "64m")
	w.Tick(now.Add(30 * time.Second)) // not yet: retries once per roll interval
	if w.Stats().WriteErrors != 1 {
		t.Fatalf("retried before the roll interval: %+v", w.Stats())
	}
	w.Tick(now.Add(time.Minute))
	testenv.WaitFor(t, 30*time.Second, "the retry", func() bool { return w.Durable() == uint64(len(rs)) })
	if err := w.Behind(); err != nil {
		t.Errorf("written, still behind: %v", err)
	}
	mustClose(t, w)
	checkOnce(t, readLake(t, dir, "m"), rs, time.UTC)
}

func TestWriter_RefusesWhenTwoBatchesWait(t *testing.T) {
	dir := t.TempDir()
	w := open(t, lake.Options{Dir: dir, Market: "m", MaxBatchBytes: 100 * (lake.RowCost + 3)})
	release := make(chan struct{})
	var blocked atomic.Bool
	w.SetCrash(func(step string) bool {
		if step == "roll:marker" && blocked.CompareAndSwap(false, true) {
			<-release // a slow disk
		}
		return false
	})
	rs := mkRows(1, 250, 1_700_000_000_000, 1000)
	var refused int
	for i := range rs {
		err := w.Append(&rs[i])
		if errors.Is(err, lake.ErrBehind) {
			refused = i
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if refused != 200 || w.Behind() == nil {
		t.Fatalf("refused from row %d (behind: %v), want from 200: one batch written, one full", refused, w.Behind())
	}
	close(release)
	testenv.WaitFor(t, time.Minute, "the slow write", func() bool { return w.Durable() >= 100 })
	appendAll(t, w, rs[refused:])
	if err := w.Behind(); err != nil {
		t.Errorf("caught up, still behind: %v", err)
	}
	mustClose(t, w)
	checkOnce(t, readLake(t, dir, "m"), rs, time.UTC)
	if s := w.Stats(); s.RowsRefused != 1 || s.RowsAppended != 250 || s.RowsWritten != 250 || s.RowsBuffered != 0 {
		t.Errorf("stats %+v, want 1 refused, 250 appended and written, none buffered", s)
	}
}

func TestCheckDir(t *testing.T) {
	dir := t.TempDir()
	if err := lake.CheckDir(filepath.Join(dir, "lake", "a")); err != nil {
		t.Errorf("a folder to be created: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("CheckDir left %v behind", ents)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	err := lake.CheckDir(filepath.Join(file, "lake"))
	if err == nil || !strings.Contains(err.Error(), filepath.Join(file, "lake")) || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a folder under a file: %v, want the path and 'not a directory'", err)
	}
	mnt := testenv.Tmpfs(t, "4k")
	os.WriteFile(filepath.Join(mnt, "fill"), make([]byte, 64<<10), 0o644) // fills it
	if err := lake.CheckDir(mnt); err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Errorf("a full disk: %v, want 'no space left'", err)
	}
}
