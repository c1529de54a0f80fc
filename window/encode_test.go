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
			want.Checkpointed()                                 // a restored state is its checkpoint
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d step %d: restored\n%+v\nwant\n%+v", seed, i, got, want)
			}
		}
	}
}

// TestDistance_DeltaRoundTrip checkpoints a courier every few steps of a
// noisy, out-of-order stream, with and without allowed lateness and with
// silences that drop every fix, as a delta on the previous checkpoint's
// state, and requires the state rebuilt from the deltas to equal the
// courier's bit for bit at every checkpoint; and a steady courier's deltas
// to be a small part of its state.
func TestDistance_DeltaRoundTrip(t *testing.T) {
	const epoch = 1_767_225_600_000
	for seed := uint64(0); seed < 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 3))
		s := NewSpec(5*minute, minute)
		if seed%2 == 1 {
			s = lateSpec()
		}
		f := geo.Filter{MinMoveM: 15, MaxSpeedKmh: 150}
		if seed%4 == 0 {
			f = geo.Filter{}
		}
		var d Distance
		d.Start(0)
		var ck Distance // the state as the checkpoints rebuild it
		wm, now, north := int64(0), int64(epoch), 0.0
		deltaBytes, stateBytes := 0, 0
		for i := 0; i < 600; i++ {
			now += 5_000
			if r.IntN(150) == 0 {
				now += 20 * minute // silence: every fix is dropped
			}
			ts := now - int64(r.IntN(40_000))
			north += 3 * r.Float64() * float64(i/100%2)
			if !s.Late(ts, wm) && !d.Has(ts) {
				x := fixAt(ts, north+10*r.NormFloat64())
				x.Acc = float64(r.IntN(15))
				d.Insert(s, f, x)
				if s.Lateness > 0 && ts < wm {
					d.Revise(s, ts, func(Window) {})
				}
			}
			wm = max(wm, now-45_000)
			d.Advance(s, wm, func(Window) {})
			if r.IntN(3) != 0 {
				continue
			}
			delta := d.AppendDelta(s, nil)
			if err := ck.ApplyDelta(s, wire.NewReader(delta)); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, i, err)
			}
			got, want := ck.AppendState(nil), d.AppendState(nil)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: the deltas rebuilt\n%x\nwant\n%x", seed, i, got, want)
			}
			d.Checkpointed()
			deltaBytes += len(delta)
			stateBytes += len(want)
		}
		if seed%4 != 0 && 10*deltaBytes > 3*stateBytes {
			t.Errorf("seed %d: deltas %d bytes, whole states %d: want under 30 %%", seed, deltaBytes, stateBytes)
		}
	}
}

// A delta applied to a state it was not made from is refused, not
// misapplied.
func TestDistance_DeltaOnAnotherStateIsRefused(t *testing.T) {
	const epoch = 1_767_225_600_000
	s := NewSpec(5*minute, minute)
	f := geo.Filter{}
	var d, other Distance
	d.Start(0)
	other.Start(0)
	for i := range 100 {
		d.Insert(s, f, fixAt(epoch+int64(i)*5_000, float64(i)))
	}
	d.Checkpointed()
	for i := range 3 {
		other.Insert(s, f, fixAt(epoch+int64(i)*5_000, float64(i)))
	}
	d.Insert(s, f, fixAt(epoch+100*5_000, 100))
	if err := other.ApplyDelta(s, wire.NewReader(d.AppendDelta(s, nil))); err == nil {
		t.Fatalf("a delta on 100 fixes applied to a state of 3")
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
