package board

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/km0/edgeproc/daily"
	"github.com/km0/edgeproc/lake"
)

var madrid = func() *time.Location {
	loc, err := time.LoadLocation("Europe/Madrid")
	if err != nil {
		panic(err)
	}
	return loc
}()

// utc parses an RFC 3339 time.
func utc(tb testing.TB, s string) time.Time {
	tb.Helper()
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// mustWriteDaily writes market's table of date as `edgeproc daily` does,
// one record per distance given (courier c1, c2, …), and gives the file
// the modification time mod, so that a rewrite within the file system's
// time resolution still reads as a change.
func mustWriteDaily(tb testing.TB, dir, market, date string, mod time.Time, dists ...float64) {
	tb.Helper()
	var recs []daily.Record
	for i, d := range dists {
		c := fmt.Sprintf("c%d", i+1)
		recs = append(recs, daily.Record{Courier: c, Key: "daily|" + market + "|" + c + "|" + date, DistanceM: d, Positions: int64(100 + i)})
	}
	path := daily.TablePath(dir, market, date)
	if _, err := lake.WriteFileAtomic(path, func(w io.Writer) error { return daily.WriteParquet(w, recs, true) }); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chtimes(path, mod, mod); err != nil {
		tb.Fatal(err)
	}
}

// viewText is a view as one line, for comparisons.
func viewText(c dailyChange) string {
	v := c.view
	s := fmt.Sprintf("%d %s %s", c.market, v.date, v.state)
	if v.state == dailyOK {
		s += fmt.Sprintf(" %d %.1f", v.couriers, v.distance)
		for _, t := range v.top {
			s += fmt.Sprintf(" %s:%.1f:%d", t.courier, t.distance, t.positions)
		}
	}
	return s
}

// The loader reads each market's table of yesterday in the market's
// calendar (Madrid: midnight there is 23:00 UTC in winter), keeps its
// DailyTop greatest distances, says when the table is not there yet, and
// reads again only when the date or the file changes; a damaged table is
// unavailable, logged once. A market without a lake has no view.
func TestDailyLoader_YesterdayInTheMarketsZone(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	l := newDailyLoader(Config{
		Markets:  []Market{{Name: "nolake"}, {Name: "a", Lake: dir, Location: madrid}},
		DailyTop: 3,
		Log:      slog.New(slog.NewTextHandler(&logs, nil)),
	}.withDefaults())
	mod := time.Unix(1_800_000_000, 0)
	// Ties: c2 before c4, the table's order.
	mustWriteDaily(t, dir, "a", "2026-12-02", mod, 5000, 12000.04, 800, 12000.04, 20000)

	step := func(now string, reads int, want ...string) {
		t.Helper()
		var got []string
		for _, c := range l.check(utc(t, now)) {
			got = append(got, viewText(c))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("at %s: changes\n%s\nwant\n%s", now, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if l.reads != reads {
			t.Errorf("at %s: %d tables read, want %d", now, l.reads, reads)
		}
	}
	// 23:59:30 in Madrid on the 3rd.
	step("2026-12-03T22:59:30Z", 1, "1 2026-12-02 ok 5 49800.1 c5:20000.0:104 c2:12000.0:101 c4:12000.0:103")
	step("2026-12-03T22:59:59Z", 1) // nothing changed: nothing read
	// 00:00:30 in Madrid on the 4th, still the 3rd in UTC: yesterday is
	// the 3rd, whose table edgeproc daily has not written yet.
	step("2026-12-03T23:00:30Z", 1, "1 2026-12-03 missing")
	step("2026-12-04T00:29:00Z", 1)
	// 01:30: edgeproc daily writes it.
	mustWriteDaily(t, dir, "a", "2026-12-03", mod, 1500, 2500)
	step("2026-12-04T00:31:00Z", 2, "1 2026-12-03 ok 2 4000.0 c2:2500.0:101 c1:1500.0:100")
	step("2026-12-04T00:32:00Z", 2)
	// Rerun for a late position: the table is replaced, and read again.
	mustWriteDaily(t, dir, "a", "2026-12-03", mod.Add(time.Second), 1500, 2500, 9000)
	step("2026-12-04T09:00:00Z", 3, "1 2026-12-03 ok 3 13000.0 c3:9000.0:102 c2:2500.0:101 c1:1500.0:100")
	// Damaged: unavailable, logged once, not read again until it changes.
	path := daily.TablePath(dir, "a", "2026-12-03")
	if err := os.WriteFile(path, []byte("PAR1 not a table PAR1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mod.Add(2*time.Second), mod.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	step("2026-12-04T10:00:00Z", 4, "1 2026-12-03 unavailable")
	step("2026-12-04T10:01:00Z", 4)
	if n := strings.Count(logs.String(), "\n"); n != 1 || !strings.Contains(logs.String(), "market=a date=2026-12-03") || !strings.Contains(logs.String(), path) {
		t.Errorf("log, want one line naming the market, the date and the file:\n%s", logs.String())
	}
	// Fixed: read again.
	mustWriteDaily(t, dir, "a", "2026-12-03", mod.Add(3*time.Second), 100)
	step("2026-12-04T10:02:00Z", 5, "1 2026-12-03 ok 1 100.0 c1:100.0:100")
}

// The top couriers are kept as the table is read, never more than asked.
func TestOfferTop_KeepsTheGreatest(t *testing.T) {
	var top []dailyTop
	for i, d := range []float64{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5} {
		top = offerTop(top, 4, dailyTop{courier: fmt.Sprint(i), distance: d})
		if len(top) > 4 || cap(top) > 4 {
			t.Fatalf("top of %d (capacity %d), want at most 4", len(top), cap(top))
		}
	}
	if got := fmt.Sprint(top); got != "[{5 9 0} {7 6 0} {4 5 0} {8 5 0}]" {
		t.Errorf("top %s", got)
	}
}

// Yesterday on the event stream: in the snapshot and once after it
// changes, only for the markets with a lake, picked up without a
// restart when the day changes in the market's zone.
func TestHub_DailyInMessages(t *testing.T) {
	dir := t.TempDir()
	mustWriteDaily(t, dir, "a", "2026-12-02", time.Unix(1_800_000_000, 0), 1000, 3000)
	var now atomic.Int64
	now.Store(utc(t, "2026-12-03T22:59:30Z").UnixMilli())
	h := newHub(t, func(c *Config) {
		c.Markets[0].Lake, c.Markets[0].Location = dir, madrid
		c.Now = func() time.Time { return time.UnixMilli(now.Load()) }
		c.DailyEvery = 10 * time.Millisecond
	})
	srv := serve(t, h)
	s := openStream(t, srv.URL+"/board/events")
	// until reads messages until one carries daily, and returns it.
	until := func(ok func([]DailyUpdate) bool) []DailyUpdate {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			raw, u := s.next(t)
			if u.Full && !strings.Contains(raw, `"daily":[`) {
				t.Fatalf("a snapshot without daily: %s", raw)
			}
			if u.Daily != nil && ok(u.Daily) {
				return u.Daily
			}
		}
		t.Fatal("no such daily within 10s")
		return nil
	}
	d := until(func(d []DailyUpdate) bool { return len(d) > 0 })
	want := `[{0 2026-12-02 ok 2 4000 [{c2 3000 101} {c1 1000 100}]}]`
	if got := fmt.Sprint(d); got != want {
		t.Errorf("daily %s, want %s", got, want)
	}
	// Unchanged: the updates carry none (but the first one may: a page
	// that joins while it changes gets it in its snapshot and again in
	// the update, as with couriers).
	if raw, _ := s.next(t); strings.Contains(raw, `"daily"`) {
		t.Logf("daily again in the first update after the snapshot")
	}
	for range 3 {
		if raw, _ := s.next(t); strings.Contains(raw, `"daily"`) {
			t.Errorf("an update repeats an unchanged daily: %s", raw)
		}
	}
	// Midnight in Madrid.
	now.Store(utc(t, "2026-12-03T23:00:30Z").UnixMilli())
	d = until(func(d []DailyUpdate) bool { return len(d) == 1 && d[0].Date == "2026-12-03" })
	if d[0].State != "missing" || len(d[0].Top) != 0 {
		t.Errorf("daily %+v, want 2026-12-03 missing", d)
	}

	// One market's page: its index is 0; the other market has none.
	if _, u := openStream(t, srv.URL+"/board/events?market=a").next(t); len(u.Daily) != 1 || u.Daily[0].Market != 0 || u.Daily[0].Date != "2026-12-03" {
		t.Errorf("market a's snapshot: daily %+v", u.Daily)
	}
	if _, u := openStream(t, srv.URL+"/board/events?market=b").next(t); u.Daily == nil || len(u.Daily) != 0 {
		t.Errorf("market b's snapshot: daily %+v, want none", u.Daily)
	}
}

// Without a lake the messages are as they were: no "daily" at all.
func TestHub_NoLakeNoDaily(t *testing.T) {
	h := newHub(t, nil)
	s := openStream(t, serve(t, h).URL+"/board/events")
	for range 3 {
		if raw, _ := s.next(t); strings.Contains(raw, `"daily"`) {
			t.Fatalf("a message of a board without a lake carries daily: %s", raw)
		}
	}
}
