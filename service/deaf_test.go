package service_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/oracle"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/service"
)

// TestRun_ClockJumpsAreNotSilence injects the processing clock into a
// running service and makes it jump while a fleet keeps publishing:
// forward by an hour (what a pause of the process looks like to it, and a
// step of the system clock), then back by two (a step back: arrival
// stamps never go back, so they stop while the clock catches up), then
// forward again. Every courier keeps publishing throughout, so the only
// no_signal each may get is the one after the fleet's final silence, with
// its last position as last_seen; the stream must also equal the engine's
// replay of the write-ahead log, listens and ticks included. Without the
// intake's look at the clocks the first jump closes every session at
// once, an hour early.
func TestRun_ClockJumpsAreNotSilence(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	dir := t.TempDir()
	y := fmt.Sprintf(`market: jumps
mqtt: {url: %q}
nats: {url: %q}
windows: {size: 4s, slide: 2s, gap: 3s, tolerated_delay: 500ms, idle_timeout: 1s, max_future_skew: 3h}
state: {dir: %q, checkpoint_interval: 1h}
http: {listen: "127.0.0.1:0"}
`, mosq.URL(), ns.URL(), dir)
	cfg, err := config.Parse(strings.NewReader(y), "jumps.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var offset atomic.Int64 // ns added to the clock
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	svc := startService(t, []config.Config{cfg}, service.Deps{Log: testLog(t), Clock: clock, Shards: 2})
	waitReady(t, svc, 20*time.Second)

	pub := mosq.Publisher(t, "jumps-pub")
	jumps := map[int]time.Duration{10: time.Hour, 20: -2 * time.Hour, 30: 2 * time.Hour}
	last := testenv.LiveFleet("jumps", 5, 40, 200*time.Millisecond, func(round int) {
		if d, ok := jumps[round]; ok {
			offset.Add(int64(d))
		}
	}, func(topic string, payload []byte) { pub.MustPublish(t, topic, payload) })
	// The final silence: each courier's warning comes about idle_timeout
	// + gap + tolerated_delay later.
	testenv.WaitFinalSilence(t, ns.URL(), cfg.NATS.Stream, last, 30*time.Second)
	svc.stop(t, 15*time.Second)
	testenv.CheckOnlyFinalSilence(t, ns.URL(), cfg.NATS.Stream, last)
	compareResults(t, streamResults(t, ns.URL(), cfg.NATS.Stream), oracle.WALResults(t, cfg, oracle.EmittedRe))
}
