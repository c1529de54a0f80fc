package wal

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/km0/edgeproc/entry"
)

// benchEntry is a position-sized entry: ~100-byte payload.
var benchEntry = entry.Entry{
	Arrival: 1726308298123,
	Topic:   "couriers/bcn/van-3/pos",
	Payload: []byte(`{"courier":"van-3","lat":41.97941,"lon":2.82142,"timestamp_ms":1726308298000,"accuracy_m":8.5}`),
}

// BenchmarkAppend measures entries/s until durable (the final Sync is timed),
// from one producer and from several.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways, SyncNone} {
		for _, producers := range []int{1, 4} {
			if mode == SyncAlways && producers > 1 {
				continue
			}
			b.Run(fmt.Sprintf("%s/producers=%d", mode, producers), func(b *testing.B) {
				l, _ := mustOpen(b, b.TempDir(), Options{Sync: mode})
				defer mustClose(b, l)
				b.ReportAllocs()
				b.SetBytes(int64(len(benchEntry.Payload)))
				start := time.Now()
				if producers == 1 {
					for b.Loop() {
						if _, err := l.Append(benchEntry, nil); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					var wg sync.WaitGroup
					per := b.N / producers
					b.ResetTimer()
					for range producers {
						wg.Go(func() {
							for range per {
								if _, err := l.Append(benchEntry, nil); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
				}
				if err := l.Sync(); err != nil {
					b.Fatal(err)
				}
				elapsed := time.Since(start)
				st := l.Stats()
				b.ReportMetric(float64(st.Appended)/elapsed.Seconds(), "entries/s")
				if mode != SyncNone && st.Fsyncs > 0 {
					b.ReportMetric(float64(st.Synced)/float64(st.Fsyncs), "entries/fsync")
					b.ReportMetric(float64(st.FsyncTotal.Microseconds())/float64(st.Fsyncs), "µs/fsync")
				}
			})
		}
	}
}

// BenchmarkReplay measures reading a closed-and-reopened log: each op is a
// full replay of 200k entries.
func BenchmarkReplay(b *testing.B) {
	const n = 200_000
	dir := b.TempDir()
	l, _ := mustOpen(b, dir, Options{Sync: SyncNone})
	for range n {
		if _, err := l.Append(benchEntry, nil); err != nil {
			b.Fatal(err)
		}
	}
	mustClose(b, l)
	l, _ = mustOpen(b, dir, Options{Sync: SyncNone})
	defer mustClose(b, l)
	b.ReportAllocs()
	var total int
	for b.Loop() {
		err := l.Replay(0, func(_ uint64, e entry.Entry) error {
			total += len(e.Payload)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkOpen measures Open (verifying every entry) of a 200k-entry log.
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	l, _ := mustOpen(b, dir, Options{Sync: SyncNone})
	for range 200_000 {
		if _, err := l.Append(benchEntry, nil); err != nil {
			b.Fatal(err)
		}
	}
	mustClose(b, l)
	for b.Loop() {
		l, _ := mustOpen(b, dir, Options{Sync: SyncNone})
		mustClose(b, l)
	}
}

// BenchmarkTruncateFront measures TruncateFront at the middle of a default
// 4 MiB segment, as at a checkpoint.
func BenchmarkTruncateFront(b *testing.B) {
	l, _ := mustOpen(b, b.TempDir(), Options{Sync: SyncNone})
	defer mustClose(b, l)
	fill := func(n int) {
		for range n {
			if _, err := l.Append(benchEntry, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	frameSize := len(appendFrame(nil, benchEntry)) + 1
	perSeg := DefaultSegmentSize / frameSize
	fill(4 * perSeg)
	next := uint64(perSeg / 2)
	for b.Loop() {
		if l.LastIndex() < next+uint64(2*perSeg) {
			b.StopTimer()
			fill(4 * perSeg)
			b.StartTimer()
		}
		if err := l.TruncateFront(next); err != nil {
			b.Fatal(err)
		}
		next += uint64(perSeg)
	}
}
