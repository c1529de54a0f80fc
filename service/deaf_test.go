package service_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/internal/walreplay"
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

	const couriers = 5
	pub := mosq.Publisher(t, "jumps-pub")
	lastTS := map[string]int64{}
	jumps := map[int]time.Duration{10: time.Hour, 20: -2 * time.Hour, 30: 2 * time.Hour}
	for round := range 40 { // every 200 ms for 8 s
		if d, ok := jumps[round]; ok {
			offset.Add(int64(d))
		}
		for c := range couriers {
			courier := fmt.Sprintf("c%d", c)
			ts := time.Now().UnixMilli() // the phones' clocks do not jump
			pub.MustPublish(t, "km0/jumps/positions/"+courier,
				fmt.Appendf(nil, `{"courier":%q,"lat":41.98,"lon":%.5f,"timestamp_ms":%d}`, courier, 2.82+float64(round)*1e-4, ts))
			lastTS[courier] = ts
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The final silence: each courier's warning comes about idle_timeout
	// + gap + tolerated_delay later.
	noSignals := func() map[string][]int64 {
		out := map[string][]int64{}
		for _, m := range testenv.ReadStream(t, ns.URL(), cfg.NATS.Stream) {
			var r struct {
				Type     string `json:"type"`
				Courier  string `json:"courier"`
				LastSeen int64  `json:"last_seen_ms"`
			}
			if json.Unmarshal(m.Data, &r) == nil && r.Type == "no_signal" {
				out[r.Courier] = append(out[r.Courier], r.LastSeen)
			}
		}
		return out
	}
	testenv.WaitFor(t, 30*time.Second, "every courier's final no_signal", func() bool { return len(noSignals()) == couriers })
	svc.stop(t, 15*time.Second)
	for courier, seen := range noSignals() {
		if len(seen) != 1 || seen[0] != lastTS[courier] {
			t.Errorf("courier %s: no_signal with last_seen %v, want one, at its last position %d", courier, seen, lastTS[courier])
		}
	}
	compareResults(t, streamResults(t, ns.URL(), cfg.NATS.Stream), walreplay.Results(t, cfg, emittedRe))
}
