package lake

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Layout of the lake's root.
const (
	positionsDir = "positions"
	durableDir   = "_durable"
	// DailyDir holds `edgeproc daily`'s tables.
	DailyDir = "daily"
	// tmpSuffix ends a file being written: never a name ending .parquet.
	tmpSuffix = ".tmp"
	// DateLayout is a date folder's date.
	DateLayout = "2006-01-02"
)

// indexDigits is how many digits a log index takes in a file name: every
// uint64 fits, so names sort in log order.
const indexDigits = 20

var prefixRE = regexp.MustCompile(`^[a-z0-9_-]{0,32}$`)

// MarketDir is DIR/positions/market=MARKET.
func MarketDir(dir, market string) string {
	return filepath.Join(dir, positionsDir, "market="+market)
}

// DateDir is the folder of market's positions of date (YYYY-MM-DD).
func DateDir(dir, market, date string) string {
	return filepath.Join(MarketDir(dir, market), "date="+date)
}

// fileName is the name of a series' file of the rows first..last.
func fileName(prefix string, first, last uint64) string {
	return fmt.Sprintf("%s%020d-%020d.parquet", prefix, first, last)
}

// parseName returns the log range a file name of the series prefix
// holds; ok is false for any other name.
func parseName(prefix, name string) (first, last uint64, ok bool) {
	return parseRange(prefix, name, ".parquet")
}

// parseRange returns the log range of a name PREFIXFIRST-LASTSUFFIX, as
// the lake names its files and staging segments.
func parseRange(prefix, name, suffix string) (first, last uint64, ok bool) {
	rest, found := strings.CutPrefix(name, prefix)
	if !found || len(rest) != 2*indexDigits+1+len(suffix) || !strings.HasSuffix(rest, suffix) || rest[indexDigits] != '-' {
		return 0, 0, false
	}
	a, err1 := strconv.ParseUint(rest[:indexDigits], 10, 64)
	b, err2 := strconv.ParseUint(rest[indexDigits+1:2*indexDigits+1], 10, 64)
	if err1 != nil || err2 != nil || a > b {
		return 0, 0, false
	}
	return a, b, true
}

// splitName returns the series prefix and range of any file name this
// package writes.
func splitName(name string) (prefix string, first, last uint64, ok bool) {
	n := len(name) - (2*indexDigits + 1 + len(".parquet"))
	if n < 0 {
		return "", 0, 0, false
	}
	first, last, ok = parseName(name[:n], name)
	return name[:n], first, last, ok
}

// dateSpan returns the date of ts (ms) in loc and the span of that date,
// [start, end) in ms.
func dateSpan(ts int64, loc *time.Location) (date string, start, end int64) {
	y, m, d := time.UnixMilli(ts).In(loc).Date()
	s := time.Date(y, m, d, 0, 0, 0, 0, loc)
	return s.Format(DateLayout), s.UnixMilli(), time.Date(y, m, d+1, 0, 0, 0, 0, loc).UnixMilli()
}

// DateOf is the calendar date of ts (ms since the epoch) in loc, as the
// lake partitions it.
func DateOf(ts int64, loc *time.Location) string {
	d, _, _ := dateSpan(ts, loc)
	return d
}

// DateBounds returns the span of date (YYYY-MM-DD) in loc, [start, end)
// in ms: 23 or 25 hours on a daylight-saving change.
func DateBounds(date string, loc *time.Location) (start, end int64, err error) {
	t, err := time.Parse(DateLayout, date)
	if err != nil {
		return 0, 0, fmt.Errorf("date %q: want YYYY-MM-DD", date)
	}
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, loc).UnixMilli(), time.Date(y, m, d+1, 0, 0, 0, 0, loc).UnixMilli(), nil
}
