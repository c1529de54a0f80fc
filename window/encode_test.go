package window

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/wire"
	"github.com/km0/edgeproc/position"
)

// TestDistance_StateRoundTrip checkpoints a courier at every step of a
// noisy, out-of-order stream (anchors, pending fixes, settled anchors,
// spikes) and requires the restored state to equal the original bit for bit.
func TestDistance_StateRoundTrip(t *testing.T) {
	const epoch = 1_767_225_600_000 // timestamps are the contract's: after 1970
	for seed := uint64(0); seed < 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 2))
		s := NewSpec(5*minute, minute)
		f := geo.Filter{MinMoveM: 15, MaxSpeedKmh: 150}
		if seed%4 == 0 {
			f = geo.Filter{}
		}
		var d Distance
		d.Start(0)
		wm := int64(0)
		north := 0.0
		for i := 0; i < 400; i++ {
			ts := epoch + int64(i)*5_000 - int64(r.IntN(40_000))
			north += 3 * r.Float64() * float64(i/100%2) // parked and moving in turns
			if !s.Late(ts, wm) && !d.Has(ts) {
				x := fixAt(ts, north+10*r.NormFloat64())
				x.Acc = float64(r.IntN(15))
				d.Insert(s, f, x)
			}
			wm = max(wm, epoch+int64(i)*5_000-45_000)
			d.Advance(s, wm, func(Window) {})
			b := d.AppendState(nil)
			var got Distance
			if err := got.ReadState(s, wire.NewReader(b), true); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, i, err)
			}
			want := d
			want.segs, want.marks, want.dense = nil, nil, false // caches: not checkpointed
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d step %d: restored\n%+v\nwant\n%+v", seed, i, got, want)
			}
		}
	}
}

// BenchmarkInsert measures the distance operator per fix for a courier
// sending every 5 s with the default filter: in order, and with every
// tenth fix arriving 30 s late (it replays the filter from its pane on).
func BenchmarkInsert(b *testing.B) {
	for _, tc := range []struct {
		name  string
		every int // every n-th fix swaps with the one 6 fixes later
	}{{"in-order", 0}, {"out-of-order-10pct", 10}} {
		b.Run(tc.name, func(b *testing.B) {
			const n = 1 << 14
			ts := make([]int64, n)
			for i := range ts {
				ts[i] = int64(i) * 5_000
			}
			if tc.every > 0 {
				for i := 0; i+6 < n; i += tc.every {
					ts[i], ts[i+6] = ts[i+6], ts[i]
				}
			}
			r := rand.New(rand.NewPCG(1, 1))
			fixes := make([]geo.Fix, n)
			for i := range fixes {
				fixes[i] = fixAt(ts[i], float64(ts[i])/5_000*7+6*r.NormFloat64())
			}
			s := NewSpec(5*minute, minute)
			f := geo.Filter{MinMoveM: 15, MaxSpeedKmh: 150}
			b.ReportAllocs()
			k := 0
			var d Distance
			for b.Loop() {
				if k%n == 0 {
					d.Start(0)
				}
				x := fixes[k%n]
				k++
				d.Advance(s, x.TS-45_000, func(Window) {})
				if !s.Late(x.TS, d.fired) {
					d.Insert(s, f, x)
				}
			}
		})
	}
}

// BenchmarkInsertHot is one of the hot couriers: a fix every 5 ms
// (200/s), arriving after the fleet's measured delays (median 1.2 s, so most
// arrive out of order), 5-minute windows sliding by a minute (12 000 fixes
// a pane), watermark 45 s behind the newest fix. Per arrival.
func BenchmarkInsertHot(b *testing.B) {
	const n = 1 << 16
	r := rand.New(rand.NewPCG(2, 2))
	type arrival struct {
		at int64
		x  geo.Fix
	}
	arr := make([]arrival, n)
	for i := range arr {
		ts := int64(i) * 5
		arr[i] = arrival{ts + fleet.DelayQuantile(r.Float64()).Milliseconds(), fixAt(ts, float64(i)*0.04+4*r.NormFloat64())}
	}
	slices.SortStableFunc(arr, func(a, b arrival) int { return int(a.at - b.at) })
	s := NewSpec(5*minute, minute)
	f := geo.Filter{MinMoveM: 15, MaxSpeedKmh: 150}
	b.ReportAllocs()
	k := 0
	var d Distance
	var newest int64
	for b.Loop() {
		if k%n == 0 {
			d.Start(0)
			newest = 0
		}
		x := arr[k%n].x
		k++
		newest = max(newest, x.TS)
		d.Advance(s, newest-45_000, func(Window) {})
		if !s.Late(x.TS, d.fired) && !d.Has(x.TS) {
			d.Insert(s, f, x)
		}
	}
}

// BenchmarkAppendState is a checkpoint's cost per courier of the city
// fleet at steady state: a fix every 5 s under 5-minute windows sliding
// by 1 minute keeps about 70 fixes.
func BenchmarkAppendState(b *testing.B) {
	s := NewSpec(5*minute, minute)
	f := geo.Filter{MinMoveM: 15, MaxSpeedKmh: 150}
	var d Distance
	d.Start(0)
	north := 0.0
	for i := range 1000 {
		ts := int64(i) * 5_000
		north += 2
		x := fixAt(ts, north)
		x.Acc = 8
		d.Insert(s, f, x)
		d.Advance(s, ts-10_000, func(Window) {})
	}
	buf := d.AppendState(nil)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		buf = d.AppendState(buf[:0])
	}
	b.ReportMetric(float64(len(d.fixes)), "fixes")
}

// TestFix_PackKeepsEveryField: a kept fix gives back the timestamp,
// coordinates and accuracy it was given, over the contract's whole range
// of timestamps and every accuracy the filter tells apart.
func TestFix_PackKeepsEveryField(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	xs := []geo.Fix{
		{TS: 1, Lat: -90, Lon: -180},
		{TS: position.MaxTimestamp, Lat: 90, Lon: 180, Acc: geo.Accuracy(1e9)},
		{TS: 1767225600000, Lat: 41.9794, Lon: 2.8214, Acc: 3.9},
	}
	for range 10_000 {
		xs = append(xs, geo.Fix{
			TS:  1 + r.Int64N(position.MaxTimestamp),
			Lat: r.Float64()*180 - 90, Lon: r.Float64()*360 - 180,
			Acc: geo.Accuracy(r.Float64() * 800),
		})
	}
	for _, x := range xs {
		f := pack(x)
		if got := f.unpack(); got != x {
			t.Fatalf("pack(%+v).unpack() = %+v", x, got)
		}
	}
}
