// Package oracle is the results oracle of the integration tests (service,
// crashtest, partition): what a run must have published, computed by a
// new engine over the same log, and kept by key the way the results
// stream keeps it, so that both sides of a comparison are built alike.
package oracle

import (
	"encoding/json"
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

// EmittedRe matches a record's emitted_at_ms, the one field two runs
// over the same input may differ in (contract §4).
var EmittedRe = regexp.MustCompile(`,?"emitted_at_ms":-?\d+`)

// Results is the results oracle of the integration tests: the records of
// a run by key, as the results stream keeps them (the first record of a
// key; the stream drops a later one as a duplicate). An engine's results
// reach it through Sink, a stream's or a replay's JSON through Add; both
// sides of a comparison go through it, so they are kept alike.
type Results struct {
	strip         *regexp.Regexp
	splitRejected bool

	mu       sync.Mutex
	byKey    map[string]string
	rejected map[string]bool
	bad      []string
}

// NewResults returns an empty oracle. strip, when set, is removed from
// every record (EmittedRe: compare runs whose clocks differ); with
// splitRejected, rejected inputs are kept apart as (reason, raw) pairs
// (Rejected) rather than by their key, whose line differs between runs.
func NewResults(strip *regexp.Regexp, splitRejected bool) *Results {
	return &Results{strip: strip, splitRejected: splitRejected, byKey: map[string]string{}, rejected: map[string]bool{}}
}

// Sink is an engine.Sink.
func (x *Results) Sink(rs []result.Record) {
	var buf []byte
	for i := range rs {
		buf = rs[i].AppendJSON(buf[:0])
		x.Add(buf)
	}
}

// Add takes one record as JSON.
func (x *Results) Add(data []byte) {
	var r struct {
		Type   string `json:"type"`
		Key    string `json:"key"`
		Reason string `json:"reason"`
		Raw    string `json:"raw"`
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := json.Unmarshal(data, &r); err != nil {
		x.bad = append(x.bad, string(data))
		return
	}
	if x.splitRejected && r.Type == "rejected" {
		x.rejected[r.Reason+"\x00"+r.Raw] = true
		return
	}
	if _, dup := x.byKey[r.Key]; dup {
		return
	}
	s := string(data)
	if x.strip != nil {
		s = x.strip.ReplaceAllString(s, "")
	}
	x.byKey[r.Key] = s
}

// ByKey is the records by key; it fails tb if any record was not JSON.
func (x *Results) ByKey(tb testing.TB) map[string]string {
	tb.Helper()
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.bad) > 0 {
		tb.Fatalf("%d records are not JSON objects, the first: %q", len(x.bad), x.bad[0])
	}
	return x.byKey
}

// Rejected is the (reason, raw) pairs of the rejected inputs, with
// splitRejected.
func (x *Results) Rejected() map[string]bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.rejected
}

// WALResults replays a market's whole write-ahead log (cfg.State.Dir/wal)
// from its first entry through a new engine, every entry as the live
// source applies it (engine.Apply), and returns the results by key with
// strip removed: what the log decides. The log must hold everything since
// the market started: no checkpoint may have truncated it (a long
// state.checkpoint_interval keeps it whole).
func WALResults(tb testing.TB, cfg config.Config, strip *regexp.Regexp) map[string]string {
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
	x := NewResults(strip, false)
	e := engine.New(ecfg, x.Sink)
	n := 0
	err = log.Replay(1, func(i uint64, en entry.Entry) error {
		e.Apply(i, en)
		n++
		return nil
	})
	e.Stop()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("replayed the write-ahead log: %d entries", n)
	return x.ByKey(tb)
}
