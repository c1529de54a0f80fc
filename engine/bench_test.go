package engine

import (
	"bytes"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/result"
)

func benchConfig(shards int) Config {
	return Config{
		Market: "girona", Size: 300_000, Slide: 60_000, Gap: 180_000, ToleratedDelay: 45_000,
		IdleTimeout: 30_000, MaxFutureSkew: 60_000, RestoreTTL: 24 * 3600_000,
		Filter: geo.Filter{MinMoveM: 15, MaxSpeedKmh: 150}, StoppedBelowM: 50, H3Resolution: 9,
		Shards: shards,
	}
}

// fleetInputs returns a simulated fleet's messages in arrival order.
func fleetInputs(couriers int, d time.Duration) []Input {
	f := fleet.New(fleet.Config{Couriers: couriers, Duration: d, Seed: 1})
	var ins []Input
	for e, ok := f.Next(); ok; e, ok = f.Next() {
		ins = append(ins, Input{Payload: fleet.AppendJSON(nil, e, false), Arrival: e.Arrival, HasArrival: true})
	}
	return ins
}

// recording is a fleet's messages kept the way a file or a socket holds
// them: bytes with no pointers in them, so that the garbage collector of
// the benchmark process does not scan 700 000 payloads that a replay (which
// streams its input) never holds.
type recording struct {
	bytes []byte
	msgs  []struct {
		off, end int32
		arrival  int64
	}
}

func fleetRecording(couriers int, d time.Duration) *recording {
	return recordingOf(fleet.Config{Couriers: couriers, Duration: d, Seed: 1})
}

func recordingOf(cfg fleet.Config) *recording {
	f := fleet.New(cfg)
	r := &recording{}
	for e, ok := f.Next(); ok; e, ok = f.Next() {
		off := len(r.bytes)
		r.bytes = fleet.AppendJSON(r.bytes, e, false)
		r.msgs = append(r.msgs, struct {
			off, end int32
			arrival  int64
		}{int32(off), int32(len(r.bytes)), e.Arrival})
	}
	return r
}

// BenchmarkEngineLateness is BenchmarkEngine's fleet with 10 % of the
// positions delivered 1-4 minutes late, under allowed_lateness 0s (they are
// late records) and 5m (they revise the windows they belong to), 2 shards.
func BenchmarkEngineLateness(b *testing.B) {
	rec := recordingOf(fleet.Config{Couriers: 500, Duration: 2 * time.Hour, Seed: 1, LateRate: 0.10})
	for _, l := range []time.Duration{0, 5 * time.Minute} {
		b.Run("allowed_lateness="+l.String(), func(b *testing.B) {
			cfg := benchConfig(2)
			cfg.AllowedLateness = l.Milliseconds()
			n := 0
			var st Stats
			cpu0 := cpuTime()
			for b.Loop() {
				e := New(cfg, func([]result.Record) {})
				for _, m := range rec.msgs {
					e.Push(&Input{Payload: rec.bytes[m.off:m.end], Arrival: m.arrival, HasArrival: true})
				}
				e.EndOfInput()
				st = e.Stats()
				n += len(rec.msgs)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "positions/s")
			b.ReportMetric(float64(n)/(cpuTime()-cpu0).Seconds(), "positions/cpu-s")
			b.ReportMetric(float64(st.LateDistance)/float64(len(rec.msgs)), "late/position")
			b.ReportMetric(float64(st.Revisions)/float64(len(rec.msgs)), "revisions/position")
		})
	}
}

// BenchmarkEngine measures the engine alone (decode, watermark, shards,
// windows, sessions, ordering; no file and no output encoding) over the
// 500-courier, 2-hour fleet, per position.
func BenchmarkEngine(b *testing.B) {
	rec := fleetRecording(500, 2*time.Hour)
	for _, c := range []struct {
		name   string
		shards int
		rows   bool
	}{{"shards=1", 1, false}, {"shards=2", 2, false}, {"shards=1/rows", 1, true}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			cpu0 := cpuTime()
			cfg := benchConfig(c.shards)
			if c.rows { // the lake's feed, taken and dropped
				cfg.OnRows = func([]Row) {}
			}
			for b.Loop() {
				e := New(cfg, func([]result.Record) {})
				for _, m := range rec.msgs {
					e.Push(&Input{Payload: rec.bytes[m.off:m.end], Arrival: m.arrival, HasArrival: true})
				}
				e.EndOfInput()
				n += len(rec.msgs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/position")
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "positions/s")
			// CPU time over all cores: positions per CPU-second is the
			// per-core throughput.
			b.ReportMetric(float64(n)/(cpuTime()-cpu0).Seconds(), "positions/cpu-s")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStatePerCourier reports the heap the engine retains per active
// courier in steady state: 20 000 couriers sending every ~5 s, measured
// after 10 minutes of event time, when every window and session is full.
//
// Under allowed_lateness 5m a courier keeps its fixes for size + 5m: the
// state and the checkpoint alongside.
func BenchmarkStatePerCourier(b *testing.B) {
	const couriers = 20_000
	ins := fleetInputs(couriers, 15*time.Minute)
	for _, l := range []time.Duration{0, 5 * time.Minute} {
		b.Run("allowed_lateness="+l.String(), func(b *testing.B) {
			cfg := benchConfig(2)
			cfg.AllowedLateness = l.Milliseconds()
			for b.Loop() {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				e := New(cfg, func([]result.Record) {})
				for i := range ins {
					e.Push(&ins[i])
				}
				e.Sync()
				runtime.GC()
				runtime.ReadMemStats(&after)
				active := e.Stats().Couriers
				size := 0
				e.Checkpoint(0, func(parts [][]byte) {
					for _, p := range parts {
						size += len(p)
					}
				})
				e.EndOfInput()
				var closed runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&closed)
				// What the engine frees when its couriers go is their state.
				b.ReportMetric(float64(after.HeapAlloc-closed.HeapAlloc)/float64(active), "B/courier")
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(active), "B/courier+engine")
				b.ReportMetric(float64(size)/float64(active), "checkpoint-B/courier")
				runtime.KeepAlive(ins)
			}
		})
	}
}

// BenchmarkEngineArea is BenchmarkEngine's fleet (2 shards) without a
// service area, with Girona's (30 km², the fleet's couriers drive in and
// out of it) and with a 500 km² square round the city (every fix inside):
// the cost of following each courier's side, one H3 lookup a position.
func BenchmarkEngineArea(b *testing.B) {
	rec := fleetRecording(500, 2*time.Hour)
	square, err := geo.ParseArea("500km2", fmt.Appendf(nil,
		`{"type":"Polygon","coordinates":[[[%[1]f,%[2]f],[%[3]f,%[2]f],[%[3]f,%[4]f],[%[1]f,%[4]f],[%[1]f,%[2]f]]]}`,
		2.8214-0.1353, 41.9794-0.1007, 2.8214+0.1353, 41.9794+0.1007), geo.AreaResolution)
	if err != nil {
		b.Fatal(err)
	}
	girona, err := geo.LoadArea("../demo/girona-area.geojson", geo.AreaResolution)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		area *geo.Area
	}{{"none", nil}, {"girona", girona}, {"500km2", square}} {
		b.Run("area="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			cfg := benchConfig(2)
			cfg.Area = c.area
			n, moves := 0, int64(0)
			for b.Loop() {
				e := New(cfg, func([]result.Record) {})
				for _, m := range rec.msgs {
					e.Push(&Input{Payload: rec.bytes[m.off:m.end], Arrival: m.arrival, HasArrival: true})
				}
				e.EndOfInput()
				st := e.Stats()
				moves = st.Results["left_area"] + st.Results["entered_area"]
				n += len(rec.msgs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/position")
			b.ReportMetric(float64(moves), "moves")
			if c.area != nil {
				b.ReportMetric(float64(c.area.Len()), "cells")
			}
		})
	}
}

// BenchmarkCheckpointDelta is a city at the courier limit: 200 000
// couriers tracked, of which 25 000 send a fix every 5 s (the others sent
// one 30 minutes before and are idle). After 15 minutes the windows are
// full; then every 10 s of fixes (a checkpoint interval) is followed by an
// incremental checkpoint. It reports a whole checkpoint's bytes, the
// deltas' bytes per interval, their ratio, and how long the recovery of
// the whole one and 6 deltas takes (Merge, then Restore).
func BenchmarkCheckpointDelta(b *testing.B) {
	const (
		idle, active = 175_000, 25_000
		every        = 5_000 // ms between two fixes of an active courier
		interval     = 10_000
	)
	for b.Loop() {
		cfg := benchConfig(2)
		e := New(cfg, func([]result.Record) {})
		t0 := int64(1_767_225_600_000)
		var in Input
		push := func(courier int, ts int64) {
			lat := 41.9 + float64(courier%500)*0.001 + float64(ts-t0)/1e9
			lon := 2.8 + float64(courier/500)*0.001
			in.Payload = fmt.Appendf(in.Payload[:0], `{"courier":"c%06d","lat":%.6f,"lon":%.6f,"timestamp_ms":%d,"accuracy_m":8}`, courier, lat, lon, ts)
			in.Arrival, in.HasArrival = ts+300, true
			e.Push(&in)
		}
		for c := range idle {
			push(active+c, t0+int64(c%1000))
		}
		now := t0 + 30*60_000
		run := func(from, to int64) { // every active courier's fixes in [from, to)
			for ts := from; ts < to; ts += 100 {
				for c := int((ts / 100) % (every / 100)); c < active; c += every / 100 {
					push(c, ts)
				}
			}
		}
		run(now-15*60_000, now)
		snaps := make(chan []byte, 1)
		keep := func(s [][]byte) { snaps <- bytes.Join(s, nil) }
		e.Checkpoint(1, keep)
		whole := <-snaps
		var deltas [][]byte
		deltaBytes := 0
		for i := range 6 {
			run(now+int64(i)*interval, now+int64(i+1)*interval)
			e.CheckpointDelta(uint64(i+1), uint64(i+2), keep)
			d := <-snaps
			deltas = append(deltas, d)
			deltaBytes += len(d)
		}
		tracked := e.Stats().Couriers
		e.Stop()
		start := time.Now()
		merged, err := Merge(cfg, whole, deltas...)
		if err != nil {
			b.Fatal(err)
		}
		r, _, err := Restore(cfg, func([]result.Record) {}, merged)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		r.Stop()
		b.ReportMetric(float64(tracked), "couriers")
		b.ReportMetric(float64(len(whole))/1e6, "whole-MB")
		b.ReportMetric(float64(deltaBytes)/6/1e6, "delta-MB/interval")
		b.ReportMetric(float64(deltaBytes)/6/float64(len(whole)), "delta/whole")
		b.ReportMetric(float64(took.Milliseconds()), "recover-ms")
	}
}
