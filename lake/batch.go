package lake

import (
	"math"
	"sort"
	"time"
	"unsafe"
)

// dateBuf is one date's rows of a batch, column by column: no allocation
// per row once its slices have grown (they are reused batch after batch).
type dateBuf struct {
	date       string
	start, end int64 // the date's span in ms, [start, end)
	idx        []uint64
	ts, arr    []int64
	lat, lon   []float64
	acc        []float64 // noAccuracy (NaN) for null
	flags      []uint8   // 1 late_distance, 2 late_session
	cend       []uint32  // end offset of row i's courier in names
	names      []byte
}

func (d *dateBuf) reset(date string, start, end int64) {
	d.date, d.start, d.end = date, start, end
	d.idx, d.ts, d.arr = d.idx[:0], d.ts[:0], d.arr[:0]
	d.lat, d.lon, d.acc, d.flags = d.lat[:0], d.lon[:0], d.acc[:0], d.flags[:0]
	d.cend, d.names = d.cend[:0], d.names[:0]
}

func (d *dateBuf) add(r *Row) {
	d.idx = append(d.idx, r.Index)
	d.ts = append(d.ts, r.TimestampMs)
	d.arr = append(d.arr, r.ArrivalMs)
	d.lat = append(d.lat, r.Lat)
	d.lon = append(d.lon, r.Lon)
	a := noAccuracy
	if r.HasAccuracy {
		a = r.AccuracyM
	}
	d.acc = append(d.acc, a)
	var f uint8
	if r.LateDistance {
		f |= 1
	}
	if r.LateSession {
		f |= 2
	}
	d.flags = append(d.flags, f)
	d.names = append(d.names, r.Courier...)
	d.cend = append(d.cend, uint32(len(d.names)))
}

func (d *dateBuf) len() int { return len(d.idx) }

// courier returns row i's courier id, aliasing the buffer.
func (d *dateBuf) courier(i int) string {
	s := uint32(0)
	if i > 0 {
		s = d.cend[i-1]
	}
	b := d.names[s:d.cend[i]]
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// fill sets rows[k] to row from+k of d, for the writer; acc is scratch
// for the accuracies the rows point to.
func (d *dateBuf) fill(rows []fileRow, acc []float64, from int) {
	for k := range rows {
		i := from + k
		a := d.acc[i]
		var p *float64
		if !math.IsNaN(a) {
			acc[k] = a
			p = &acc[k]
		}
		rows[k] = fileRow{
			Courier: d.courier(i), TimestampMs: d.ts[i], ArrivalMs: d.arr[i], Lat: d.lat[i], Lon: d.lon[i],
			AccuracyM: p, LateDistance: d.flags[i]&1 != 0, LateSession: d.flags[i]&2 != 0,
		}
	}
}

// batch is the rows appended between two rolls, by date.
type batch struct {
	dates []*dateBuf // those in use first, then spares
	used  int
	last  *dateBuf // the date of the last row: consecutive rows share it
	rows  int
	bytes int
	first uint64    // index of the first row
	since time.Time // when its first row was appended (the last Tick's time)
	// seen is the log index up to which the batch accounts for the log
	// (its last row, or a later Advance).
	seen uint64
}

func (b *batch) reset() {
	b.used, b.last, b.rows, b.bytes, b.first, b.seen = 0, nil, 0, 0, 0, 0
}

// add appends r to its date's buffer; date lookups happen only when a
// row's date differs from the previous row's.
func (b *batch) add(r *Row, loc *time.Location) {
	d := b.last
	if d == nil || r.TimestampMs < d.start || r.TimestampMs >= d.end {
		d = b.dateOf(r.TimestampMs, loc)
		b.last = d
	}
	if b.rows == 0 {
		b.first = r.Index
	}
	d.add(r)
	b.rows++
	b.bytes += RowCost + len(r.Courier)
	b.seen = r.Index
}

func (b *batch) dateOf(ts int64, loc *time.Location) *dateBuf {
	for _, d := range b.dates[:b.used] {
		if ts >= d.start && ts < d.end {
			return d
		}
	}
	date, start, end := dateSpan(ts, loc)
	if b.used == len(b.dates) {
		b.dates = append(b.dates, &dateBuf{})
	}
	d := b.dates[b.used]
	b.used++
	d.reset(date, start, end)
	return d
}

// inUse returns the batch's dates in date order.
func (b *batch) inUse() []*dateBuf {
	ds := b.dates[:b.used]
	sort.Slice(ds, func(i, j int) bool { return ds[i].start < ds[j].start })
	return ds
}
