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
// Earlier dates are read once, before the date's own rows, for what
// they give: each courier's last position before the date within
// restore_ttl (its predecessor: a position further back could not give a
// segment), and its positions of the last FilterWarmUp (an hour) before
// the date, over which the filter warms up, starting afresh at the first
// of them. With the filters off (plain haversine, contract §3) only the
// predecessor counts and the result is exact; with them on, a courier
// moving across midnight can differ from an unbounded history by the
// filter's decisions in its first minutes of warm-up.
package daily

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
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
	ctxFiles, files, err := listFiles(o, from)
	if err != nil {
		return nil, sum, err
	}
	sum.Files = len(ctxFiles) + len(files)
	var total int64
	for _, p := range files {
		f, err := lake.OpenFile(p)
		if err != nil {
			return nil, sum, err
		}
		total += f.NumRows()
		f.Close()
	}
	in := &interner{names: map[string]uint32{}}
	ctx, err := readContext(o, ctxFiles, in, from, start, &sum)
	if err != nil {
		return nil, sum, err
	}
	total += int64(len(ctx))
	passes := int(max(1, (total*RowBytes+o.MemoryBudget-1)/o.MemoryBudget))
	sum.Passes = passes
	seed := maphash.MakeSeed()
	bucket := func(courier string) int {
		if passes == 1 {
			return 0
		}
		return int(maphash.String(seed, courier) % uint64(passes))
	}
	var recs []Record
	// Sized for a pass's share (and a margin for an uneven one), so that
	// growth neither copies nor leaves garbage the size of the budget.
	rows := make([]row, 0, min(total, total/int64(passes)*11/10+1024))
	for pass := range passes {
		rows = rows[:0]
		for _, r := range ctx {
			if bucket(in.ids[r.courier]) == pass {
				rows = append(rows, r)
			}
		}
		for fi, p := range files {
			fi += len(ctxFiles) // files of D come after the context's in log order
			var rowNum int64
			err := lake.ReadFile(p, func(r *lake.Row) error {
				n := rowNum
				rowNum++
				sum.Rows++
				if r.TimestampMs < start || r.TimestampMs >= end {
					return nil // not D's (a lake written in another time zone)
				}
				if passes > 1 && int(maphash.Bytes(seed, r.Courier)%uint64(passes)) != pass {
					return nil
				}
				rows = append(rows, rowOf(r, in.id(r.Courier), fi, n))
				return nil
			})
			if err != nil {
				return nil, sum, err
			}
		}
		recs = append(recs, days(o, rows, in.ids, start)...)
	}
	slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.Courier, b.Courier) })
	return recs, sum, nil
}

// FilterWarmUp is how much of the time before the date daily keeps of
// every courier (besides its last position before the date, always
// kept): the distance filter starts afresh at the first of those rows.
const FilterWarmUp = time.Hour

// interner numbers couriers.
type interner struct {
	names map[string]uint32
	ids   []string
}

func (in *interner) id(courier []byte) uint32 {
	id, ok := in.names[string(courier)]
	if !ok {
		id = uint32(len(in.ids))
		in.ids = append(in.ids, string(courier))
		in.names[in.ids[id]] = id
	}
	return id
}

func rowOf(r *lake.Row, courier uint32, file int, n int64) row {
	acc := 0.0
	if r.HasAccuracy {
		acc = geo.Accuracy(max(r.AccuracyM, 0))
	}
	return row{ts: r.TimestampMs, arr: r.ArrivalMs, ord: int64(file)<<32 | n,
		lat: r.Lat, lon: r.Lon, acc: acc, courier: courier, late: r.LateDistance}
}

// readContext reads, once, what the dates before o.Date give the
// couriers' days: each courier's rows of the last FilterWarmUp before
// the date's start, or, when it has none there, its last row since from
// (restore_ttl before the start; its predecessor could be no further
// back). With the filters off only that last row counts (the
// predecessor); with them on, the filter warms up over the rest. Holding
// that rather than whole earlier days keeps daily's memory and passes to
// about the date's own rows.
func readContext(o Options, files []string, in *interner, from, start int64, sum *Summary) ([]row, error) {
	warm := start - FilterWarmUp.Milliseconds()
	var ctx []row
	var last []row // by courier: the last row before warm
	hasWarm := map[uint32]bool{}
	for fi, p := range files {
		var rowNum int64
		err := lake.ReadFile(p, func(r *lake.Row) error {
			n := rowNum
			rowNum++
			sum.Rows++
			if r.TimestampMs < from || r.TimestampMs >= start {
				return nil
			}
			x := rowOf(r, in.id(r.Courier), fi, n)
			if x.ts >= warm {
				ctx = append(ctx, x)
				hasWarm[x.courier] = true
				return nil
			}
			for int(x.courier) >= len(last) {
				last = append(last, row{ts: math.MinInt64})
			}
			// The latest timestamp; of one timestamp, the first to arrive.
			if l := &last[x.courier]; x.ts > l.ts || x.ts == l.ts && (x.arr < l.arr || x.arr == l.arr && x.ord < l.ord) {
				*l = x
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for c, l := range last {
		if l.ts != math.MinInt64 && !hasWarm[uint32(c)] {
			ctx = append(ctx, l)
		}
	}
	return ctx, nil
}

// listFiles lists the files of the dates from the one holding from to
// the day before o.Date (the context), and of o.Date, each in log order.
func listFiles(o Options, from int64) (ctx, day []string, err error) {
	var dirs []string
	for d := lake.DateOf(from, o.Location); d < o.Date; {
		if dir := lake.DateDir(o.Dir, o.Market, d); isDir(dir) {
			dirs = append(dirs, dir)
		}
		t, _ := time.Parse(lake.DateLayout, d)
		d = t.AddDate(0, 0, 1).Format(lake.DateLayout)
	}
	if len(dirs) > 0 {
		if ctx, err = lake.Files(dirs...); err != nil {
			return nil, nil, err
		}
	}
	if dir := lake.DateDir(o.Dir, o.Market, o.Date); isDir(dir) {
		if day, err = lake.Files(dir); err != nil {
			return nil, nil, err
		}
	}
	return ctx, day, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
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
