package service_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/result"
	"github.com/km0/edgeproc/wal"
)

func benchEngineConfig() engine.Config {
	return engine.Config{
		Market: "bench", Size: 300_000, Slide: 60_000, Gap: 180_000, ToleratedDelay: 45_000,
		MaxFutureSkew: 60_000, RestoreTTL: 86_400_000, H3Resolution: 9,
	}
}

// payloads returns n positions of couriers couriers, in time order.
func payloads(n, couriers int) [][]byte {
	out := make([][]byte, n)
	base := int64(1_726_308_000_000)
	for i := range out {
		c := i % couriers
		ts := base + int64(i/couriers)*5000
		out[i] = fmt.Appendf(nil, `{"courier":"c%06d","lat":%.6f,"lon":%.6f,"timestamp_ms":%d}`,
			c, 41.97+float64(c%100)*1e-3, 2.82+float64(i%50)*1e-5, ts)
	}
	return out
}

// BenchmarkDurableIngest is the service's ingest path without MQTT: Append
// to the write-ahead log with group commit (fsync), the done callback
// forwarding to a bounded channel, one goroutine pushing durable entries
// into the engine in index order.
func BenchmarkDurableIngest(b *testing.B) {
	ps := payloads(1<<16, 1000)
	log, _, err := wal.Open(filepath.Join(b.TempDir(), "wal"), wal.Options{Sync: wal.SyncBatch}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	eng := engine.New(benchEngineConfig(), func([]result.Record) {})
	type item struct {
		index   uint64
		payload []byte
	}
	in := make(chan item, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for it := range in {
			eng.Push(&engine.Input{Payload: it.payload, Topic: "t", Arrival: 1_726_308_000_000, HasArrival: true, Line: int64(it.index)})
		}
		eng.Stop()
	}()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		p := ps[i%len(ps)]
		if _, err := log.Append(entry.Entry{Arrival: 1, Topic: "t", Payload: p}, func(idx uint64, err error) {
			in <- item{idx, p}
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := log.Sync(); err != nil {
		b.Fatal(err)
	}
	close(in)
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "positions/s")
}

// BenchmarkCheckpoint measures one checkpoint of an engine holding n
// couriers: barrier to snapshot, plus the atomic file write; and the
// longest Push while the barrier is in flight (the intake stall).
func BenchmarkCheckpoint(b *testing.B) {
	// fixes is how many positions each courier holds: 2 is a fleet that
	// just started; 60 is steady state at one position every 5 s with
	// 5-minute windows (about 2 KB of state a courier).
	for _, bc := range []struct{ n, fixes int }{{10_000, 2}, {100_000, 2}, {10_000, 60}, {100_000, 60}} {
		n := bc.n
		b.Run(fmt.Sprintf("%d_couriers_%d_fixes", n, bc.fixes), func(b *testing.B) {
			eng := engine.New(benchEngineConfig(), func([]result.Record) {})
			defer eng.Stop()
			for i, p := range payloads(bc.fixes*n, n) {
				eng.Push(&engine.Input{Payload: p, Arrival: 1_726_308_000_000, HasArrival: true, Line: int64(i + 1)})
			}
			eng.Sync()
			store, err := checkpoint.Open(filepath.Join(b.TempDir(), "ckpt"), 0)
			if err != nil {
				b.Fatal(err)
			}
			extra := payloads(4096, n)
			var size int64
			var maxStall time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				got := make(chan [][]byte, 1)
				t0 := time.Now()
				eng.Checkpoint(uint64(i+1), func(s [][]byte) { got <- s })
				maxStall = max(maxStall, time.Since(t0))
				// Intake goes on while the barrier travels.
			push:
				for j := 0; ; j++ {
					select {
					case snap := <-got:
						c, err := store.Write(uint64(i+1), snap...)
						if err != nil {
							b.Fatal(err)
						}
						size = c.Size
						break push
					default:
						t := time.Now()
						eng.Push(&engine.Input{Payload: extra[j%len(extra)], Arrival: 1_726_308_000_000, HasArrival: true})
						maxStall = max(maxStall, time.Since(t))
					}
				}
			}
			b.ReportMetric(float64(size), "bytes")
			b.ReportMetric(float64(maxStall.Microseconds())/1000, "max-push-stall-ms")
		})
	}
}

// BenchmarkRecoveryReplay is the start-up replay: read the write-ahead log
// after the checkpoint and push every entry through the engine.
func BenchmarkRecoveryReplay(b *testing.B) {
	const n = 200_000
	dir := filepath.Join(b.TempDir(), "wal")
	log, _, err := wal.Open(dir, wal.Options{Sync: wal.SyncNone}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range payloads(n, 1000) {
		if _, err := log.Append(entry.Entry{Arrival: 1_726_308_000_000, Topic: "t", Payload: p}, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := log.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var entries int
	for b.Loop() {
		log, _, err := wal.Open(dir, wal.Options{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		eng := engine.New(benchEngineConfig(), func([]result.Record) {})
		err = log.Replay(1, func(i uint64, e entry.Entry) error {
			eng.Push(&engine.Input{Payload: e.Payload, Topic: e.Topic, Arrival: e.Arrival, HasArrival: true, Line: int64(i)})
			entries++
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		eng.Stop()
		log.Close()
	}
	b.ReportMetric(float64(entries)/b.Elapsed().Seconds(), "entries/s")
}
