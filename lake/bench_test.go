package lake_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/km0/edgeproc/lake"
)

// BenchmarkAppend is the cost on the service's per-position path: a row
// into the batch (files are written by the Writer's own goroutine, whose
// cost shows in the wall time when it competes for the cores).
func BenchmarkAppend(b *testing.B) {
	w, err := lake.Open(lake.Options{Dir: b.TempDir(), Market: "m"})
	if err != nil {
		b.Fatal(err)
	}
	rs := mkRows(1, 4096, 1_767_614_400_000, 100)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := rs[i%len(rs)]
		r.Index = uint64(i + 1)
		r.TimestampMs += int64(i/len(rs)) * 409600
		if err := w.Append(&r); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.StopTimer()
	w.Close(context.Background())
}

// BenchmarkFeed is the lake's cost on a live source's path: the merger's
// Add, a Cut and its staging every 50 000 rows (a 10 s checkpoint interval
// at 5 000 positions/s), and the Writer's Append on the feed's goroutine.
// staged-B/row is the staging's bytes a row.
func BenchmarkFeed(b *testing.B) {
	f, err := lake.OpenFeed(lake.Options{Dir: b.TempDir(), Market: "m"})
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Start(0); err != nil {
		b.Fatal(err)
	}
	rs := mkRows(1, 4096, 1_767_614_400_000, 100)
	for i := range rs {
		rs[i].Courier = []byte(fmt.Sprintf("courier-%05d", i%2500))
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := rs[i%len(rs)]
		r.Index = uint64(i + 1)
		r.TimestampMs += int64(i/len(rs)) * 409600
		f.Add(&r)
		i++
		if i%50000 == 0 {
			f.Cut(uint64(i))
			if err := f.Staged(ctx, uint64(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	f.Cut(uint64(i))
	if err := f.Staged(ctx, uint64(i)); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(f.Stats().StagedBytes)/float64(i), "staged-B/row")
	f.Close(ctx)
}
