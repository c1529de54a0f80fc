package daily_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/km0/edgeproc/daily"
	"github.com/km0/edgeproc/lake"
)

// mustWriteTable writes recs as `edgeproc daily` writes the lake's table.
func mustWriteTable(tb testing.TB, path string, recs []daily.Record) {
	tb.Helper()
	if _, err := lake.WriteFileAtomic(path, func(w io.Writer) error { return daily.WriteParquet(w, recs, true) }); err != nil {
		tb.Fatal(err)
	}
}

func TestReadTable_ReadsWhatDailyWrote(t *testing.T) {
	dir := t.TempDir()
	path := daily.TablePath(dir, "girona", "2026-12-03")
	if want := filepath.Join(dir, "daily", "market=girona", "date=2026-12-03", "daily.parquet"); path != want {
		t.Fatalf("TablePath = %s, want %s", path, want)
	}
	var recs []daily.Record
	for i := range 1000 { // several batches
		c := fmt.Sprintf("c%04d", i)
		recs = append(recs, daily.Record{Courier: c, Key: "daily|girona|" + c + "|2026-12-03", DistanceM: float64(i) * 10.5,
			Positions: int64(i), LatePositions: int64(i % 3), FirstSeenMs: int64(i), LastSeenMs: int64(2 * i), EmittedAtMs: 7})
	}
	mustWriteTable(t, path, recs)
	var got []daily.Record
	if err := daily.ReadTable(path, func(r *daily.Record) error { got = append(got, *r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("read %d records, want %d", len(got), len(recs))
	}
	for i := range recs {
		if got[i] != recs[i] {
			t.Fatalf("record %d: got %+v, want %+v", i, got[i], recs[i])
		}
	}

	stop := errors.New("enough")
	n := 0
	err := daily.ReadTable(path, func(*daily.Record) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("fn's error: read %d records, got %v, want %v after 1", n, err, stop)
	}
	if err := daily.ReadTable(daily.TablePath(dir, "girona", "2026-12-04"), func(*daily.Record) error { return nil }); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a table not written: got %v, want fs.ErrNotExist", err)
	}
}

// A damaged table (cut short, bytes flipped, not Parquet, a positions
// file in its place) is an error naming the file, never a panic: the
// fleet board reads these tables in the live service.
func TestReadTable_DamagedIsAnErrorNotAPanic(t *testing.T) {
	var recs []daily.Record
	for i := range 500 {
		recs = append(recs, daily.Record{Courier: fmt.Sprintf("c%04d", i), DistanceM: float64(i), Positions: int64(i)})
	}
	var b bytes.Buffer
	if err := daily.WriteParquet(&b, recs, true); err != nil {
		t.Fatal(err)
	}
	whole := b.Bytes()
	path := filepath.Join(t.TempDir(), daily.TableFile)
	read := func(data []byte) error {
		t.Helper()
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return daily.ReadTable(path, func(*daily.Record) error { return nil })
	}
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"not Parquet", []byte("PAR1 this is not a table PAR1")},
		{"cut in half", whole[:len(whole)/2]},
		{"footer cut", whole[:len(whole)-3]},
	} {
		if err := read(c.data); err == nil || !bytes.Contains([]byte(err.Error()), []byte(path)) {
			t.Errorf("%s: got %v, want an error naming %s", c.name, err, path)
		}
	}
	// Random damage: some of it parquet-go decodes without noticing (no
	// checksums), some makes it panic; ReadTable must return either way.
	r := rand.New(rand.NewPCG(1, 2))
	errs := 0
	for i := range 600 {
		d := bytes.Clone(whole)
		if i%2 == 0 {
			d = d[:r.IntN(len(d))]
		} else {
			d[len(d)-8-r.IntN(min(len(d)-8, 600))] ^= byte(1 + r.IntN(255)) // the footer's region
		}
		if read(d) != nil {
			errs++
		}
	}
	if errs == 0 {
		t.Error("no damaged table gave an error")
	}
}

func TestYesterday_IsTheMarketsPreviousCalendarDay(t *testing.T) {
	madrid, err := time.LoadLocation("Europe/Madrid")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		utc  string
		loc  *time.Location
		want string
	}{
		{"2026-12-03T22:59:59Z", madrid, "2026-12-02"},   // 23:59:59 in Madrid
		{"2026-12-03T23:00:00Z", madrid, "2026-12-03"},   // midnight in Madrid: UTC is still on the 3rd
		{"2026-12-03T23:00:00Z", time.UTC, "2026-12-02"}, // the same instant in UTC
		{"2026-03-29T22:30:00Z", madrid, "2026-03-29"},   // after the 23-hour day
		{"2026-10-25T23:30:00Z", madrid, "2026-10-25"},   // after the 25-hour day
		{"2026-01-01T00:00:00Z", time.UTC, "2025-12-31"},
	} {
		now, err := time.Parse(time.RFC3339, c.utc)
		if err != nil {
			t.Fatal(err)
		}
		if got := daily.Yesterday(now, c.loc); got != c.want {
			t.Errorf("Yesterday(%s, %s) = %s, want %s", c.utc, c.loc, got, c.want)
		}
	}
}
