package daily

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/km0/edgeproc/lake"
)

// TableFile is the name of `edgeproc daily`'s table in its date folder.
const TableFile = "daily.parquet"

// TablePath is where `edgeproc daily` keeps the table of market's date
// in the lake under dir: dir/daily/market=MARKET/date=DATE/daily.parquet.
func TablePath(dir, market, date string) string {
	return filepath.Join(dir, lake.DailyDir, "market="+market, "date="+date, TableFile)
}

// Yesterday is the calendar date (YYYY-MM-DD) before now's in loc: the
// date `edgeproc daily --date yesterday` computes. A day of 23 or 25
// hours changes nothing: it is the calendar's previous day.
func Yesterday(now time.Time, loc *time.Location) string {
	y, m, d := now.In(loc).Date()
	return time.Date(y, m, d-1, 0, 0, 0, 0, time.UTC).Format(lake.DateLayout)
}

// tableBatch is how many rows ReadTable decodes at a time.
const tableBatch = 256

// ReadTable reads the table at path, as `edgeproc daily` writes it in
// the lake (TablePath; WriteParquet with partitioned set), calling fn
// with each record in the table's order (couriers in byte order of their
// id). Market and Date are not columns of the table, the path holds
// them: they are left empty. fn gets the same *Record each time and must
// not keep it; its error stops the read and is returned, wrapped. Rows are
// decoded a batch at a time, so memory does not grow with the table.
//
// A table that does not exist gives an error for which errors.Is(err,
// fs.ErrNotExist); a damaged one (not Parquet, cut short, a column
// missing or corrupt) an error naming the file, never a panic.
func ReadTable(path string, fn func(r *Record) error) (err error) {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// parquet-go trusts a file's metadata for offsets and lengths; a
	// damaged file can make it panic. A table that cannot be read is the
	// caller's to report, not a reason to take the process down.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("read %s: damaged table: %v", path, p)
		}
	}()
	if err := readTable(f, fn); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

func readTable(f *os.File, fn func(r *Record) error) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return err
	}
	for _, c := range tableColumns {
		if _, ok := pf.Schema().Lookup(c); !ok {
			return fmt.Errorf("no column %s", c)
		}
	}
	rd := parquet.NewGenericReader[tableRow](pf)
	defer rd.Close()
	buf := make([]tableRow, tableBatch)
	var rec Record
	var read int64
	for {
		n, err := rd.Read(buf)
		for i := range buf[:n] {
			t := &buf[i]
			rec = Record{Courier: t.Courier, Key: t.Key, DistanceM: t.DistanceM, Positions: t.Positions,
				LatePositions: t.LatePositions, FirstSeenMs: t.FirstSeenMs, LastSeenMs: t.LastSeenMs, EmittedAtMs: t.EmittedAtMs}
			if err := fn(&rec); err != nil {
				return err
			}
		}
		read += int64(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if read != pf.NumRows() {
		return fmt.Errorf("%d rows read of %d", read, pf.NumRows())
	}
	return nil
}

// tableColumns are the columns of the lake's daily table.
var tableColumns = []string{"courier", "key", "distance_m", "positions", "late_positions", "first_seen_ms", "last_seen_ms", "emitted_at_ms"}
