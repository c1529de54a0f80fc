// Package walreplay is a test oracle for the live service: it applies a
// market's whole write-ahead log to a new engine, each entry as the
// contract says (a position at its arrival, a tick as the idle rule, a
// listen as the start of listening), and returns the results by key, so
// a test can compare what the service published with what its log
// decides.
package walreplay

import (
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/result"
	"github.com/km0/edgeproc/wal"
)

// Results replays the log in cfg.State.Dir/wal from its first entry and
// returns each key's first result, with what drop matches removed (the
// emitted_at_ms field, which differs between runs). The log must hold
// everything since the market started: no checkpoint may have truncated
// it (a long state.checkpoint_interval keeps it whole).
func Results(tb testing.TB, cfg config.Config, drop *regexp.Regexp) map[string]string {
	tb.Helper()
	log, _, err := wal.Open(filepath.Join(cfg.State.Dir, "wal"), wal.Options{}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer log.Close()
	if first := log.FirstIndex(); first != 1 {
		tb.Fatalf("the log starts at %d: truncated, it cannot be replayed from the start", first)
	}
	ecfg := market.EngineConfig(cfg)
	ecfg.Topic, ecfg.Shards = cfg.MQTT.Topic, 1
	var mu sync.Mutex
	want := map[string]string{}
	e := engine.New(ecfg, func(rs []result.Record) {
		mu.Lock()
		defer mu.Unlock()
		for i := range rs {
			if k := rs[i].Key(); want[k] == "" {
				want[k] = drop.ReplaceAllString(string(rs[i].AppendJSON(nil)), "")
			}
		}
	})
	kinds := map[entry.Kind]int{}
	err = log.Replay(1, func(i uint64, en entry.Entry) error {
		kinds[en.Kind]++
		switch en.Kind {
		case entry.Position:
			e.Push(&engine.Input{Payload: en.Payload, Topic: en.Topic, Arrival: en.Arrival, HasArrival: true, Line: int64(i)})
		case entry.Tick:
			e.Tick(en.Arrival)
		case entry.Listen:
			e.Listen(en.Arrival)
		}
		return nil
	})
	e.Stop()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("replayed the write-ahead log: %v", kinds)
	return want
}
