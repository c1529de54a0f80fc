package lake_test

import (
	"context"
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
