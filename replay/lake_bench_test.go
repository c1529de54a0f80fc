package replay_test

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/replay"
)

// benchLake writes make bench's fleet (500 couriers, 2 hours, seed 1:
// 717 038 positions) to a lake under dir as fleetgen -lake does (one
// series, rolled every 10 minutes of arrival time), and returns its
// files and the same positions as a JSONL file.
func benchLake(b *testing.B, dir string) (files []string, jsonl []byte) {
	b.Helper()
	w, err := lake.Open(lake.Options{Dir: dir, Market: "bench", Location: time.UTC, RollInterval: 10 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	f := fleet.New(fleet.Config{Couriers: 500, Duration: 2 * time.Hour, Seed: 1})
	var r lake.Row
	var n uint64
	var next int64
	for e, ok := f.Next(); ok; e, ok = f.Next() {
		if e.Raw != nil || e.Duplicate {
			continue
		}
		if e.Arrival >= next {
			w.Tick(time.UnixMilli(e.Arrival))
			next = e.Arrival + 10_000
		}
		n++
		r = lake.Row{Index: n, Courier: append(r.Courier[:0], e.Courier...), TimestampMs: e.TS, ArrivalMs: e.Arrival,
			Lat: e.Lat, Lon: e.Lon, AccuracyM: e.Accuracy, HasAccuracy: true}
		for err := w.Append(&r); err != nil; err = w.Append(&r) {
			if err != lake.ErrBehind {
				b.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		jsonl = append(fleet.AppendJSON(jsonl, e, true), '\n')
	}
	if err := w.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	if files, err = lake.Files(filepath.Join(dir, "positions", "market=bench")); err != nil {
		b.Fatal(err)
	}
	return files, jsonl
}

// BenchmarkRunLake replays make bench's fleet from the lake's Parquet
// files and, for comparison, from a JSONL file of the same positions
// (default configuration, shards as the machine has cores), results
// discarded.
func BenchmarkRunLake(b *testing.B) {
	files, jsonl := benchLake(b, b.TempDir())
	c := config.Default()
	c.Market = "bench"
	ecfg := market.EngineConfig(c)
	for _, in := range []string{"lake", "jsonl"} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			var n int64
			for b.Loop() {
				var sum replay.Summary
				var err error
				if in == "lake" {
					sum, err = replay.RunLake(ecfg, files, io.Discard)
				} else {
					sum, err = replay.Run(ecfg, bytes.NewReader(jsonl), io.Discard)
				}
				if err != nil {
					b.Fatal(err)
				}
				n += sum.Stats.Received
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "positions/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/position")
		})
	}
}
