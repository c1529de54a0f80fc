package bridge_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/internal/testenv"
)

func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkKVCityFleet is a city fleet's courier-KV path: 25 000 couriers,
// one fix every 5 s each (5 000 positions/s) with timestamps on a simulated
// clock, one op per position, the writer ticking every 100 ms of that clock
// as its ticker would. It reports KV writes per position and per simulated
// second, and the process's CPU per position (the embedded NATS server that
// stores the writes included). Run it long enough for the KV interval to
// matter: go test -run '^$' -bench KVCityFleet -benchtime 300000x ./bridge
// (60 simulated seconds).
func BenchmarkKVCityFleet(b *testing.B) {
	const (
		couriers = 25_000
		perSec   = 5_000 // positions per simulated second
		tick     = 100 * time.Millisecond
	)
	srv := testenv.StartNATS(b)
	nc := srv.Connect(b)
	start := time.Unix(1_726_308_000, 0)
	var simNanos atomic.Int64
	now := func() time.Time { return start.Add(time.Duration(simNanos.Load())) }
	cfg := bridge.Config{Market: "girona", KVInterval: bridge.DefaultKVInterval, ComputeCell: true, CellResolution: 9}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	br, err := bridge.OpenWithClock(ctx, nc, cfg, nil, now)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(context.Background())
	ids := make([][]byte, couriers)
	for i := range ids {
		ids[i] = fmt.Appendf(nil, "courier-%05d", i)
	}
	step := time.Second / perSec
	perTick := int(tick / step)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for i := range b.N {
		c := i % couriers
		ts := now().UnixMilli()
		br.UpdatePosition(ids[c], ts, 41.9+float64(c)*1e-5, 2.8+float64(i/couriers)*1e-5)
		simNanos.Add(int64(step))
		if (i+1)%perTick == 0 {
			br.TickKV()
		}
	}
	br.TickKV()
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	st := br.Stats()
	sim := time.Duration(simNanos.Load()).Seconds()
	b.ReportMetric(float64(st.KVWrites)/float64(b.N), "writes/pos")
	b.ReportMetric(float64(st.KVWrites)/sim, "writes/sim-s")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-µs/pos")
	if st.KVErrors != 0 {
		b.Errorf("%d KV errors", st.KVErrors)
	}
}

// BenchmarkKVCityFleetWallClock is BenchmarkKVCityFleet on the wall clock,
// at the fleet's real rate (so -benchtime 50000x takes 10 s), using only
// Open, UpdatePosition and Stats: it runs unchanged against older bridges,
// for before/after figures.
func BenchmarkKVCityFleetWallClock(b *testing.B) {
	const (
		couriers = 25_000
		perStep  = 500 // positions per 100 ms: 5 000/s
	)
	srv := testenv.StartNATS(b)
	nc := srv.Connect(b)
	br := mustOpen(b, nc, bridge.Config{Market: "girona", ComputeCell: true, CellResolution: 9, MaxCouriers: 200_000})
	ids := make([][]byte, couriers)
	for i := range ids {
		ids[i] = fmt.Appendf(nil, "courier-%05d", i)
	}
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU(b)
	for i := range b.N {
		c := i % couriers
		br.UpdatePosition(ids[c], time.Now().UnixMilli(), 41.9+float64(c)*1e-5, 2.8)
		if (i+1)%perStep == 0 {
			time.Sleep(time.Until(start.Add(time.Duration((i+1)/perStep) * 100 * time.Millisecond)))
		}
	}
	time.Sleep(200 * time.Millisecond) // the writer's last round
	el, cpu := time.Since(start), processCPU(b)-cpu0
	b.StopTimer()
	st := br.Stats()
	b.ReportMetric(float64(st.KVWrites)/float64(b.N), "writes/pos")
	b.ReportMetric(float64(st.KVWrites)/el.Seconds(), "writes/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-µs/pos")
}

// BenchmarkUpdatePosition is the per-position cost to the caller (the
// engine's sequencer): an append to the writer's inbox under its mutex.
func BenchmarkUpdatePosition(b *testing.B) {
	srv := testenv.StartNATS(b)
	nc := srv.Connect(b)
	br := mustOpen(b, nc, bridge.Config{Market: "girona", KVInterval: time.Hour})
	ids := make([][]byte, 25_000)
	for i := range ids {
		ids[i] = fmt.Appendf(nil, "courier-%05d", i)
	}
	// Every courier known and written, and the inbox grown, first: the
	// figure is the steady state, not the first sight of a fleet.
	for range 3 {
		for i, id := range ids {
			br.UpdatePosition(id, int64(1+i), 41.9, 2.8)
		}
		br.ScanKV()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		br.UpdatePosition(ids[i%len(ids)], int64(len(ids)+i), 41.9, 2.8)
	}
	b.StopTimer()
	// Waits mean the caller outran the writer's apply step (this loop
	// does nothing else): a fleet's real rate is far below it.
	b.ReportMetric(float64(br.Stats().KVWaits)/float64(b.N), "waits/op")
}
