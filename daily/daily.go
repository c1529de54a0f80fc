// Package daily computes each courier's day from the lake (contract §9,
// `edgeproc daily`): distance, positions, late positions, first and last
// seen, for one market and one calendar date in its time zone.
//
// The rules, as the contract gives them: a courier's positions on date D
// are its lake rows of D, distinct by timestamp_ms (the first in arrival
// order kept: arrival_ms, then file name, then row); late ones included.
// They are ordered, with the courier's rows of earlier dates, by
// timestamp_ms, and each carries the segment geo's distance filter gives
// it in that order — the same code (geo.Stepper) the distance windows
// use, with the market's distance settings — except a position more than
// windows.restore_ttl after its predecessor, which starts afresh, as a
// forgotten courier does. distance_m is the sum of D's positions'
// segments.
//
// Earlier dates are read back to restore_ttl before D's start: a
// predecessor further back could not give a segment anyway. The filter's
// state (with min_move_m on, an anchor that depends on the fixes before)
// starts afresh at the first row of that context, so with filters on a
// courier who never paused for restore_ttl may differ from an unbounded
// history by the filter's decisions at the context's start; with filters
// off (plain haversine, contract §3) the result is exact.
package daily

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/lake"
)

// Record is one courier's day.
type Record struct {
	Market, Courier, Key, Date string
	DistanceM                  float64
	Positions, LatePositions   int64
	FirstSeenMs, LastSeenMs    int64
	EmittedAtMs                int64
}

// Options say which day to compute and how.
type Options struct {
	Dir      string // lake.dir
	Market   string
	Location *time.Location
	Date     string // YYYY-MM-DD
	// RestoreTTL is windows.restore_ttl.
	RestoreTTL time.Duration
	// Filter is the distance filter (distance.min_move_m,
	// distance.max_speed_kmh), as the engine's.
	Filter geo.Filter
	// EmittedAt is emitted_at_ms.
	EmittedAt int64
	// MemoryBudget bounds the rows held at once, in bytes (RowBytes a
	// row): a lake larger than it is read in several passes, each over a
	// share of the couriers. Default 1 GiB.
	MemoryBudget int64
}

// RowBytes is what a row costs while its courier's day is computed: 56
// bytes of row and 4 of its index in the courier sort.
const RowBytes = 60

// DefaultMemoryBudget is Options.MemoryBudget's default.
const DefaultMemoryBudget = 1 << 30

// Summary says what Compute read.
type Summary struct {
	Files  int
	Rows   int64 // rows read (of every pass)
	Passes int
}

// row is a lake row as the day's computation holds it.
type row struct {
	ts, arr  int64
	ord      int64 // file << 32 | row: log order, for ties of arrival
	lat, lon float64
	acc      float64 // geo.Accuracy'd, 0 when unknown
	courier  uint32  // index in the pass's names
	late     bool
}

// Compute returns the records of o.Date, couriers in byte order of their
// id.
func Compute(o Options) ([]Record, Summary, error) {
	var sum Summary
	if o.Location == nil {
		o.Location = time.UTC
	}
	if o.MemoryBudget <= 0 {
		o.MemoryBudget = DefaultMemoryBudget
	}
	start, end, err := lake.DateBounds(o.Date, o.Location)
	if err != nil {
		return nil, sum, err
	}
	from := start - o.RestoreTTL.Milliseconds()
	files, err := dayFiles(o, from, start)
	if err != nil {
		return nil, sum, err
	}
	sum.Files = len(files)
	var total int64
	for _, p := range files {
		f, err := lake.OpenFile(p)
		if err != nil {
			return nil, sum, err
		}
		total += f.NumRows()
		f.Close()
	}
	passes := int(max(1, (total*RowBytes+o.MemoryBudget-1)/o.MemoryBudget))
	sum.Passes = passes
	seed := maphash.MakeSeed()
	var recs []Record
	// Sized for a pass's share (and a margin for an uneven one), so that
	// growth neither copies nor leaves garbage the size of the budget.
	rows := make([]row, 0, min(total, total/int64(passes)*11/10+1024))
	for pass := range passes {
		names := map[string]uint32{}
		var ids []string
		rows = rows[:0]
		for fi, p := range files {
			var rowNum int64
			err := lake.ReadFile(p, func(r *lake.Row) error {
				n := rowNum
				rowNum++
				sum.Rows++
				if r.TimestampMs < from || r.TimestampMs >= end {
					return nil
				}
				if passes > 1 && int(maphash.Bytes(seed, r.Courier)%uint64(passes)) != pass {
					return nil
				}
				id, ok := names[string(r.Courier)]
				if !ok {
					id = uint32(len(ids))
					ids = append(ids, string(r.Courier))
					names[ids[id]] = id
				}
				acc := 0.0
				if r.HasAccuracy {
					acc = geo.Accuracy(max(r.AccuracyM, 0))
				}
				rows = append(rows, row{ts: r.TimestampMs, arr: r.ArrivalMs, ord: int64(fi)<<32 | n,
					lat: r.Lat, lon: r.Lon, acc: acc, courier: id, late: r.LateDistance})
				return nil
			})
			if err != nil {
				return nil, sum, err
			}
		}
		recs = append(recs, days(o, rows, ids, start)...)
	}
	slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.Courier, b.Courier) })
	return recs, sum, nil
}

// dayFiles lists the files of the dates from the one holding from to
// o.Date, in log order.
func dayFiles(o Options, from, start int64) ([]string, error) {
	var dirs []string
	for d := lake.DateOf(from, o.Location); ; {
		dir := lake.DateDir(o.Dir, o.Market, d)
		if _, err := os.Stat(dir); err == nil {
			dirs = append(dirs, dir)
		}
		if d >= o.Date {
			break
		}
		t, _ := time.Parse(lake.DateLayout, d)
		d = t.AddDate(0, 0, 1).Format(lake.DateLayout)
	}
	if len(dirs) == 0 {
		return nil, nil
	}
	return lake.Files(dirs...)
}

// days computes the records of the couriers in rows.
func days(o Options, rows []row, ids []string, start int64) []Record {
	// Couriers in byte order: a counting sort of the rows' indexes by
	// courier (stable, so each courier's rows stay in log order, nearly
	// sorted by timestamp already), then each courier's by timestamp, and
	// one timestamp's by arrival order, so that the first of each is
	// kept. Sorting the rows themselves by all four keys took half of
	// the time.
	order := make([]uint32, len(ids))
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortFunc(order, func(a, b uint32) int { return strings.Compare(ids[a], ids[b]) })
	rank := make([]uint32, len(ids))
	for r, i := range order {
		rank[i] = uint32(r)
	}
	at := make([]int, len(ids)+1) // where each rank's indexes start
	for i := range rows {
		rows[i].courier = rank[rows[i].courier]
		at[rows[i].courier+1]++
	}
	for r := 1; r < len(at); r++ {
		at[r] += at[r-1]
	}
	idx := make([]uint32, len(rows))
	next := slices.Clone(at[:len(ids)])
	for i := range rows {
		c := rows[i].courier
		idx[next[c]] = uint32(i)
		next[c]++
	}
	ttl := o.RestoreTTL.Milliseconds()
	var recs []Record
	st := o.Filter.Stepper()
	for c := range ids {
		seg := idx[at[c]:at[c+1]]
		slices.SortFunc(seg, func(i, j uint32) int {
			a, b := &rows[i], &rows[j]
			switch {
			case a.ts != b.ts:
				return cmp.Compare(a.ts, b.ts)
			case a.arr != b.arr:
				return cmp.Compare(a.arr, b.arr)
			}
			return cmp.Compare(a.ord, b.ord)
		})
		var tr geo.Track
		rec := Record{Market: o.Market, Courier: ids[order[c]], Date: o.Date, EmittedAtMs: o.EmittedAt}
		prev := int64(0)
		for k, i := range seg {
			x := &rows[i]
			if k > 0 && x.ts == prev {
				continue // a later copy of the same timestamp
			}
			if k > 0 && x.ts-prev > ttl {
				tr = geo.Track{} // forgotten: no segment
			}
			d := st.Step(&tr, geo.Fix{TS: x.ts, Lat: x.lat, Lon: x.lon, Acc: x.acc})
			prev = x.ts
			if x.ts < start {
				continue
			}
			if rec.Positions == 0 {
				rec.FirstSeenMs = x.ts
			}
			rec.Positions++
			rec.DistanceM += d
			rec.LastSeenMs = x.ts
			if x.late {
				rec.LatePositions++
			}
		}
		if rec.Positions > 0 {
			rec.Key = fmt.Sprintf("daily|%s|%s|%s", o.Market, rec.Courier, o.Date)
			recs = append(recs, rec)
		}
	}
	return recs
}
