package daily_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/daily"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/replay"
)

var madrid, _ = time.LoadLocation("Europe/Madrid")

// pos is a position a test writes to the lake.
type pos struct {
	courier string
	at      time.Time // event time
	lat     float64
	arrive  time.Duration // after at
	late    bool
}

// writeLake writes ps to a fresh lake at dir, in the order given (the
// log order), one file per call.
func writeLake(t *testing.T, dir string, loc *time.Location, first uint64, ps []pos) {
	t.Helper()
	w, err := lake.Open(lake.Options{Dir: dir, Market: "m", Location: loc})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		r := lake.Row{Index: first + uint64(i), Courier: []byte(p.courier), TimestampMs: p.at.UnixMilli(),
			ArrivalMs: p.at.Add(p.arrive + time.Second).UnixMilli(), Lat: p.lat, Lon: 2.8, LateDistance: p.late}
		if err := w.Append(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func compute(t *testing.T, dir string, loc *time.Location, date string, f geo.Filter) []daily.Record {
	t.Helper()
	recs, _, err := daily.Compute(daily.Options{Dir: dir, Market: "m", Location: loc, Date: date, RestoreTTL: 24 * time.Hour, Filter: f, EmittedAt: 7})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// seg is the haversine between two of the tests' points (same lon).
func seg(lat1, lat2 float64) float64 { return geo.Haversine(lat1, 2.8, lat2, 2.8) }

func TestCompute_Rules(t *testing.T) {
	d := func(h, m int) time.Time { return time.Date(2026, 12, 3, h, m, 0, 0, time.UTC) }
	prev := func(h, m int) time.Time { return time.Date(2026, 12, 2, h, m, 0, 0, time.UTC) }
	cases := []struct {
		name string
		ps   []pos
		want []daily.Record // Market, Date, Key and EmittedAtMs are checked for all
	}{
		{"a copy of a timestamp: the first to arrive is kept", []pos{
			{courier: "c", at: d(10, 0), lat: 41.0},
			{courier: "c", at: d(10, 1), lat: 41.001, arrive: time.Minute}, // arrives second
			{courier: "c", at: d(10, 1), lat: 41.005},                      // arrives first
			{courier: "c", at: d(10, 2), lat: 41.006},
		}, []daily.Record{{Courier: "c", DistanceM: seg(41.0, 41.005) + seg(41.005, 41.006), Positions: 3,
			FirstSeenMs: d(10, 0).UnixMilli(), LastSeenMs: d(10, 2).UnixMilli()}}},
		{"the predecessor of the first position is the day before's last", []pos{
			{courier: "c", at: prev(23, 50), lat: 41.0},
			{courier: "c", at: prev(23, 59), lat: 41.01},
			{courier: "c", at: d(0, 1), lat: 41.02},
		}, []daily.Record{{Courier: "c", DistanceM: seg(41.01, 41.02), Positions: 1,
			FirstSeenMs: d(0, 1).UnixMilli(), LastSeenMs: d(0, 1).UnixMilli()}}},
		{"a predecessor hours before midnight: the last, of its copies the first to arrive", []pos{
			{courier: "c", at: prev(8, 0), lat: 41.0},
			{courier: "c", at: prev(14, 0), lat: 41.01, arrive: time.Minute}, // arrives second
			{courier: "c", at: prev(14, 0), lat: 41.02},                      // arrives first
			{courier: "c", at: d(0, 30), lat: 41.03},
		}, []daily.Record{{Courier: "c", DistanceM: seg(41.02, 41.03), Positions: 1,
			FirstSeenMs: d(0, 30).UnixMilli(), LastSeenMs: d(0, 30).UnixMilli()}}},
		{"more than restore_ttl after its predecessor: afresh", []pos{
			{courier: "c", at: prev(9, 59), lat: 41.0},
			{courier: "c", at: d(10, 0), lat: 41.01}, // 24 h 1 min after
			{courier: "c", at: d(10, 5), lat: 41.02},
		}, []daily.Record{{Courier: "c", DistanceM: seg(41.01, 41.02), Positions: 2,
			FirstSeenMs: d(10, 0).UnixMilli(), LastSeenMs: d(10, 5).UnixMilli()}}},
		{"exactly restore_ttl after: still a segment", []pos{
			{courier: "c", at: prev(10, 0), lat: 41.0},
			{courier: "c", at: d(10, 0), lat: 41.01},
		}, []daily.Record{{Courier: "c", DistanceM: seg(41.0, 41.01), Positions: 1,
			FirstSeenMs: d(10, 0).UnixMilli(), LastSeenMs: d(10, 0).UnixMilli()}}},
		{"late positions counted and included, in timestamp order", []pos{
			{courier: "c", at: d(10, 0), lat: 41.0},
			{courier: "c", at: d(10, 10), lat: 41.02},
			{courier: "c", at: d(10, 5), lat: 41.03, arrive: 20 * time.Minute, late: true},
		}, []daily.Record{{Courier: "c", DistanceM: seg(41.0, 41.03) + seg(41.03, 41.02), Positions: 3, LatePositions: 1,
			FirstSeenMs: d(10, 0).UnixMilli(), LastSeenMs: d(10, 10).UnixMilli()}}},
		{"couriers in byte order; none without a position on the date", []pos{
			{courier: "b", at: d(9, 0), lat: 41.0},
			{courier: "a", at: d(9, 0), lat: 41.0},
			{courier: "B", at: d(9, 0), lat: 41.0},
			{courier: "z", at: prev(9, 0), lat: 41.0},
			{courier: "y", at: d(9, 0).AddDate(0, 0, 1), lat: 41.0},
		}, []daily.Record{
			{Courier: "B", Positions: 1, FirstSeenMs: d(9, 0).UnixMilli(), LastSeenMs: d(9, 0).UnixMilli()},
			{Courier: "a", Positions: 1, FirstSeenMs: d(9, 0).UnixMilli(), LastSeenMs: d(9, 0).UnixMilli()},
			{Courier: "b", Positions: 1, FirstSeenMs: d(9, 0).UnixMilli(), LastSeenMs: d(9, 0).UnixMilli()},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			// Log order is arrival order.
			ps := slices.Clone(c.ps)
			slices.SortStableFunc(ps, func(a, b pos) int { return a.at.Add(a.arrive).Compare(b.at.Add(b.arrive)) })
			writeLake(t, dir, time.UTC, 1, ps)
			got := compute(t, dir, time.UTC, "2026-12-03", geo.Filter{})
			for i := range c.want {
				w := &c.want[i]
				w.Market, w.Date, w.EmittedAtMs = "m", "2026-12-03", 7
				w.Key = "daily|m|" + w.Courier + "|2026-12-03"
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
			for i := range got {
				g, w := got[i], c.want[i]
				if math.Abs(g.DistanceM-w.DistanceM) > 1e-6 {
					t.Errorf("%s: distance %v, want %v", g.Courier, g.DistanceM, w.DistanceM)
				}
				g.DistanceM = w.DistanceM
				if g != w {
					t.Errorf("got  %+v\nwant %+v", g, w)
				}
			}
		})
	}
}

// A position 22 minutes late (its phone in a tunnel at midnight) lands in
// its event date, Madrid's, and changes that day's record; the next day's
// is unchanged.
func TestCompute_PositionLateAcrossMidnight(t *testing.T) {
	dir := t.TempDir()
	at := func(d, h, m int) time.Time { return time.Date(2026, 12, d, h, m, 0, 0, madrid) }
	writeLake(t, dir, madrid, 1, []pos{
		{courier: "c", at: at(3, 23, 40), lat: 41.0},
		{courier: "c", at: at(3, 23, 50), lat: 41.01},
		{courier: "c", at: at(4, 0, 20), lat: 41.03},
	})
	before3 := compute(t, dir, madrid, "2026-12-03", geo.Filter{})
	before4 := compute(t, dir, madrid, "2026-12-04", geo.Filter{})
	// Event time 23:55, arriving at 00:17: 22 minutes late, in a later file.
	late := at(3, 23, 55)
	writeLake(t, dir, madrid, 10, []pos{{courier: "c", at: late, lat: 41.02, arrive: 22*time.Minute - time.Second, late: true}})
	if fs, _ := filepath.Glob(filepath.Join(lake.DateDir(dir, "m", "2026-12-03"), "*.parquet")); len(fs) != 2 {
		t.Fatalf("3 December holds %d files, want 2: the late position in its event date", len(fs))
	}
	after3 := compute(t, dir, madrid, "2026-12-03", geo.Filter{})
	after4 := compute(t, dir, madrid, "2026-12-04", geo.Filter{})
	if len(before3) != 1 || len(after3) != 1 || len(after4) != 1 {
		t.Fatalf("records: %+v, %+v, %+v", before3, after3, after4)
	}
	b, a := before3[0], after3[0]
	if a.Positions != b.Positions+1 || a.LatePositions != 1 || a.LastSeenMs != late.UnixMilli() {
		t.Errorf("3 December after the late position: %+v, before: %+v", a, b)
	}
	if want := seg(41.0, 41.01) + seg(41.01, 41.02); math.Abs(a.DistanceM-want) > 1e-6 {
		t.Errorf("3 December distance %v, want %v", a.DistanceM, want)
	}
	// 4 December's first position now follows the late one.
	if want := seg(41.02, 41.03); math.Abs(after4[0].DistanceM-want) > 1e-6 || after4[0].Positions != before4[0].Positions {
		t.Errorf("4 December: %+v, want distance %v", after4[0], want)
	}
}

// Madrid's spring-forward day has 23 hours; its records hold those
// positions and no others.
func TestCompute_DaylightSavingDay(t *testing.T) {
	dir := t.TempDir()
	var ps []pos
	start := time.Date(2026, 3, 28, 22, 0, 0, 0, madrid)
	for h := 0; h < 30; h++ { // hourly, 22:00 on the 28th to 03:00 on the 30th
		ps = append(ps, pos{courier: "c", at: start.Add(time.Duration(h) * time.Hour), lat: 41.0 + float64(h)*0.001})
	}
	writeLake(t, dir, madrid, 1, ps)
	got := compute(t, dir, madrid, "2026-03-29", geo.Filter{})
	if len(got) != 1 || got[0].Positions != 23 {
		t.Fatalf("29 March: %+v, want 23 positions", got)
	}
	if f := time.UnixMilli(got[0].FirstSeenMs).In(madrid); f.Hour() != 0 || f.Day() != 29 {
		t.Errorf("first seen %v, want 00:00 on the 29th", f)
	}
	if want := 23 * seg(41.0, 41.001); math.Abs(got[0].DistanceM-want) > 0.01 {
		t.Errorf("distance %v, want about %v (23 hourly steps, the first from the 28th)", got[0].DistanceM, want)
	}
}

// With one-day tumbling windows (size = slide = 24 h, epoch-aligned: UTC
// days) and positions of one day only, the engine's window distance of a
// courier is its daily distance, the §5 filters on: both go through the
// same distance code.
func TestCompute_EqualsTheEnginesDayWindow(t *testing.T) {
	day := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	f := fleet.New(fleet.Config{Couriers: 40, Duration: 6 * time.Hour, Seed: 3, Start: day.Add(9 * time.Hour).UnixMilli()})
	dir := t.TempDir()
	w, err := lake.Open(lake.Options{Dir: dir, Market: "m"})
	if err != nil {
		t.Fatal(err)
	}
	var jsonl []byte
	var n uint64
	for {
		e, ok := f.Next()
		if !ok {
			break
		}
		if e.Raw != nil || e.Duplicate {
			continue
		}
		n++
		r := lake.Row{Index: n, Courier: []byte(e.Courier), TimestampMs: e.TS, ArrivalMs: e.Arrival, Lat: e.Lat, Lon: e.Lon, AccuracyM: e.Accuracy, HasAccuracy: true}
		if err := w.Append(&r); err != nil {
			t.Fatal(err)
		}
		jsonl = append(fleet.AppendJSON(jsonl, e, true), '\n')
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	c.Market = "m"
	c.Windows.Size, c.Windows.Slide, c.Windows.ToleratedDelay, c.Windows.RestoreTTL = 24*time.Hour, 24*time.Hour, time.Hour, 48*time.Hour
	ecfg := market.EngineConfig(c)
	var out bytes.Buffer
	if _, err := replay.Run(ecfg, bytes.NewReader(jsonl), &out); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{}
	for _, line := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		var r struct {
			Type, Courier string
			DistanceM     float64 `json:"distance_m"`
			Late          int64   `json:"timestamp_ms"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		switch r.Type {
		case "distance":
			want[r.Courier] = r.DistanceM
		case "late":
			t.Fatalf("a late position: %s", line) // none in this fleet, so the lake's flags are right
		}
	}
	recs, _, err := daily.Compute(daily.Options{Dir: dir, Market: "m", Location: time.UTC, Date: "2026-01-05",
		RestoreTTL: c.Windows.RestoreTTL, Filter: ecfg.Filter})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 40 || len(want) != 40 {
		t.Fatalf("%d records, %d windows: want 40 of each", len(recs), len(want))
	}
	for _, r := range recs {
		if r.DistanceM != want[r.Courier] {
			t.Errorf("%s: daily %v, the engine's day window %v", r.Courier, r.DistanceM, want[r.Courier])
		}
	}
}

// Several passes over a lake larger than the memory budget give the
// records of one, the day before's rows (the context) included.
func TestCompute_PassesGiveTheSameRecords(t *testing.T) {
	dir := t.TempDir()
	var ps []pos
	start := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC) // 3000 rows every 7 s: to 01:50 on the 3rd
	for i := range 3000 {
		ps = append(ps, pos{courier: fmt.Sprintf("c%03d", i%97), at: start.Add(time.Duration(i) * 7 * time.Second), lat: 41 + float64(i%13)*1e-3})
	}
	writeLake(t, dir, time.UTC, 1, ps)
	one, s1, err := daily.Compute(daily.Options{Dir: dir, Market: "m", Date: "2026-12-03", RestoreTTL: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	many, s2, err := daily.Compute(daily.Options{Dir: dir, Market: "m", Date: "2026-12-03", RestoreTTL: 24 * time.Hour, MemoryBudget: 300 * daily.RowBytes})
	if err != nil {
		t.Fatal(err)
	}
	if s1.Passes != 1 || s2.Passes < 2 {
		t.Fatalf("passes %d and %d, want 1 and several", s1.Passes, s2.Passes)
	}
	// c000's distance includes the segment from its last position of the
	// 2nd (its rows are in timestamp order in ps).
	var want float64
	var prevLat float64
	for _, p := range ps {
		if p.courier != "c000" {
			continue
		}
		if p.at.Day() == 3 {
			want += seg(prevLat, p.lat)
		}
		prevLat = p.lat
	}
	if math.Abs(one[0].DistanceM-want) > 1e-6 {
		t.Fatalf("c000: %+v, want distance %v (from its last position of the 2nd on)", one[0], want)
	}
	if !slices.Equal(one, many) || len(one) != 97 {
		t.Errorf("one pass: %d records, six passes: %d; they differ", len(one), len(many))
	}
}

func TestWrite_Formats(t *testing.T) {
	recs := []daily.Record{
		{Market: "m", Courier: "a", Key: "daily|m|a|2026-12-03", Date: "2026-12-03", DistanceM: 1234.5678, Positions: 10, LatePositions: 1, FirstSeenMs: 1, LastSeenMs: 2, EmittedAtMs: 3},
		{Market: "m", Courier: "b", Key: "daily|m|b|2026-12-03", Date: "2026-12-03", DistanceM: 0, Positions: 1, FirstSeenMs: 5, LastSeenMs: 5, EmittedAtMs: 3},
	}
	var j bytes.Buffer
	if err := daily.WriteJSON(&j, recs); err != nil {
		t.Fatal(err)
	}
	want := `{"type":"daily","market":"m","courier":"a","key":"daily|m|a|2026-12-03","date":"2026-12-03","distance_m":1234.5678,"positions":10,"late_positions":1,"first_seen_ms":1,"last_seen_ms":2,"emitted_at_ms":3}` + "\n"
	if first, _, _ := strings.Cut(j.String(), "\n"); first+"\n" != want {
		t.Errorf("JSON line\n got %s\nwant %s", first, want)
	}
	var c bytes.Buffer
	if err := daily.WriteCSV(&c, recs); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&c).ReadAll()
	if err != nil || len(rows) != 3 || !slices.Equal(rows[0], daily.CSVHeader) ||
		!slices.Equal(rows[1], []string{"daily", "m", "a", "daily|m|a|2026-12-03", "2026-12-03", "1234.5678", "10", "1", "1", "2", "3"}) {
		t.Errorf("CSV: %q, %v", rows, err)
	}
	path := filepath.Join(t.TempDir(), "d.parquet")
	var p bytes.Buffer
	if err := daily.WriteParquet(&p, recs, false); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, p.Bytes(), 0o644)
	type back struct {
		Market        string  `parquet:"market"`
		Date          string  `parquet:"date"`
		Courier       string  `parquet:"courier"`
		Key           string  `parquet:"key"`
		DistanceM     float64 `parquet:"distance_m"`
		Positions     int64   `parquet:"positions"`
		LatePositions int64   `parquet:"late_positions"`
		FirstSeenMs   int64   `parquet:"first_seen_ms"`
		LastSeenMs    int64   `parquet:"last_seen_ms"`
		EmittedAtMs   int64   `parquet:"emitted_at_ms"`
	}
	got, err := parquet.ReadFile[back](path)
	if err != nil || len(got) != 2 || got[0] != (back{"m", "2026-12-03", "a", "daily|m|a|2026-12-03", 1234.5678, 10, 1, 1, 2, 3}) {
		t.Errorf("Parquet: %+v, %v", got, err)
	}
}
