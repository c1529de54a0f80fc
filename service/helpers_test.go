package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/oracle"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/replay"
	"github.com/km0/edgeproc/service"
)

// mustConfig returns a market's configuration on the given servers, with
// idle_timeout 0 so that results depend on the inputs and their arrival
// times only (the 100 ms ticker then cannot move the watermark).
func mustConfig(tb testing.TB, market, mqttURL, natsURL string) config.Config {
	tb.Helper()
	return mustConfigMQTT(tb, market, mqttURL, natsURL, "")
}

// mustConfigMQTT is mustConfig with more keys of the mqtt section
// (flow-style YAML, such as `format: owntracks`).
func mustConfigMQTT(tb testing.TB, market, mqttURL, natsURL, mqttKeys string) config.Config {
	tb.Helper()
	if mqttKeys != "" {
		mqttKeys = ", " + mqttKeys
	}
	y := fmt.Sprintf(`market: %s
mqtt: {url: %q%s}
nats: {url: %q}
windows: {idle_timeout: 0s}
state: {dir: %q}
http: {listen: "127.0.0.1:0"}
`, market, mqttURL, mqttKeys, natsURL, tb.TempDir())
	c, err := config.Parse(strings.NewReader(y), market+".yaml")
	if err != nil {
		tb.Fatalf("config: %v", err)
	}
	return c
}

// recorder keeps every input the service pushed, per market.
type recorder struct {
	mu     sync.Mutex
	inputs map[string][]engine.Input
	seen   map[string]bool // payloads seen, any market
}

func newRecorder() *recorder {
	return &recorder{inputs: map[string][]engine.Input{}, seen: map[string]bool{}}
}

func (r *recorder) record(market string, in engine.Input) {
	in.Payload = bytes.Clone(in.Payload)
	r.mu.Lock()
	r.inputs[market] = append(r.inputs[market], in)
	r.seen[string(in.Payload)] = true
	r.mu.Unlock()
}

// waitSeen waits until every payload was pushed at least once.
func (r *recorder) waitSeen(tb testing.TB, payloads map[string]bool, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		r.mu.Lock()
		missing := 0
		for p := range payloads {
			if !r.seen[p] {
				missing++
			}
		}
		r.mu.Unlock()
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d published payloads never reached the engine", missing, len(payloads))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running is a service.Run in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
	addr   chan net.Addr
}

func startService(tb testing.TB, cfgs []config.Config, deps service.Deps) *running {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), addr: make(chan net.Addr, 4)}
	deps.Listening = func(a net.Addr) { r.addr <- a }
	go func() { r.done <- service.Run(ctx, cfgs, deps) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			tb.Errorf("service did not stop")
		}
	})
	return r
}

// stopFailed cancels the service and requires Run to return, within d,
// an error naming the market that failed.
func (r *running) stopFailed(tb testing.TB, market string, d time.Duration) {
	tb.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err == nil || !strings.Contains(err.Error(), market) {
			tb.Errorf("Run returned %v, want the failed market %s's error", err, market)
		}
		r.done <- nil // for the cleanup
	case <-time.After(d):
		tb.Fatalf("shutdown hangs after market %s failed", market)
	}
}

// stop cancels the service and requires Run to return nil within d.
func (r *running) stop(tb testing.TB, d time.Duration) {
	tb.Helper()
	start := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			tb.Fatalf("Run returned %v, want nil", err)
		}
		r.done <- nil // for the cleanup
	case <-time.After(d):
		tb.Fatalf("Run did not return within %v of the cancellation", d)
	}
	tb.Logf("graceful shutdown took %v", time.Since(start).Round(time.Millisecond))
}

// replayFile renders recorded inputs as a replay file: each payload with
// the arrival the service recorded, on the line of its log index, then one last line one millisecond
// later that is rejected and fires nothing (idle_timeout is 0), so that
// whatever replay.Run emits only because the input ends carries a later
// emitted_at_ms than every live result.
func replayFile(inputs []engine.Input) ([]byte, int64) {
	var b bytes.Buffer
	var last, line int64
	for _, in := range inputs {
		// Blank lines stand for the log's other entries (listens, ticks),
		// so that each payload has its log index as its line: the line of
		// a rejected record's key.
		for ; line+1 < in.Line; line++ {
			b.WriteByte('\n')
		}
		b.Write(withArrival(in.Payload, in.Arrival))
		b.WriteByte('\n')
		line++
		last = in.Arrival
	}
	fmt.Fprintf(&b, "{\"arrival_ms\":%d}\n", last+1)
	return b.Bytes(), last
}

// withArrival inserts "arrival_ms" before the closing brace of a payload
// that ends as a JSON object; other payloads are rejected whatever their
// arrival and are left alone. Payloads over 4 KiB are too_large, their
// arrival is not read, and they are left alone too.
func withArrival(p []byte, arrival int64) []byte {
	t := bytes.TrimRight(p, " \t\r")
	if len(p) > 4096 || len(t) == 0 || t[len(t)-1] != '}' {
		return p
	}
	body := bytes.TrimRight(t[:len(t)-1], " \t\r\n")
	out := append([]byte(nil), body...)
	if len(body) > 0 && body[len(body)-1] != '{' {
		out = append(out, ',')
	}
	out = append(out, `"arrival_ms":`...)
	out = strconv.AppendInt(out, arrival, 10)
	return append(out, '}')
}

// clockRe is what two runs over the same inputs may differ in: a
// record's emitted_at_ms, and the arrival withArrival put into a rejected
// payload, as escaped in the record's raw string (only a replay's has it).
var clockRe = regexp.MustCompile(`,?"emitted_at_ms":-?\d+|,?\\"arrival_ms\\":\d+`)

type record struct {
	Type      string `json:"type"`
	Key       string `json:"key"`
	EmittedAt int64  `json:"emitted_at_ms"`
	EOI       bool   `json:"end_of_input"`
}

// expectedResults replays the recorded inputs and returns, by key, the
// records emitted before the end of the input (the first record of a
// repeated key: the stream drops later ones as duplicates), with what
// differs between runs removed.
func expectedResults(tb testing.TB, cfg config.Config, inputs []engine.Input) map[string]string {
	tb.Helper()
	return replayExpected(tb, market.EngineConfig(cfg), inputs, clockRe)
}

// replayExpected is expectedResults for an engine configuration of the
// caller's, with strip removed from every record.
func replayExpected(tb testing.TB, ecfg engine.Config, inputs []engine.Input, strip *regexp.Regexp) map[string]string {
	tb.Helper()
	file, last := replayFile(inputs)
	var out bytes.Buffer
	if _, err := replay.Run(ecfg, bytes.NewReader(file), &out); err != nil {
		tb.Fatalf("replay: %v", err)
	}
	x := oracle.NewResults(strip, false)
	for _, line := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		var r record
		if err := json.Unmarshal(line, &r); err != nil {
			tb.Fatalf("replay output %q: %v", line, err)
		}
		if !r.EOI && r.EmittedAt <= last {
			x.Add(line)
		}
	}
	return x.ByKey(tb)
}

// streamResults returns the stream's messages by Nats-Msg-Id, with
// emitted_at_ms removed, and fails on a testenv.Message whose id is not its key.
func streamResults(tb testing.TB, url, stream string) map[string]string {
	tb.Helper()
	x := oracle.NewResults(clockRe, false)
	for _, m := range testenv.ReadStream(tb, url, stream) {
		var r record
		if err := json.Unmarshal(m.Data, &r); err != nil {
			tb.Fatalf("stream message %q: %v", m.Data, err)
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != r.Key {
			tb.Errorf("message id %q, want the key %q", id, r.Key)
		}
		if want := "." + r.Type; r.Type != "late" && r.Type != "rejected" && !strings.HasSuffix(m.Subject, want) {
			tb.Errorf("%s on subject %s, want a subject ending %s", r.Key, m.Subject, want)
		}
		x.Add(m.Data)
	}
	return x.ByKey(tb)
}

// compareResults requires got and want to hold the same keys with the same
// bytes, reporting at most ten differences.
func compareResults(tb testing.TB, got, want map[string]string) {
	tb.Helper()
	diffs := testenv.DiffResults(got, want, "the replay")
	if len(diffs) > 0 {
		tb.Errorf("%d differences between the stream (%d results) and the replay (%d results); first ones:", len(diffs), len(got), len(want))
		for _, d := range diffs[:min(10, len(diffs))] {
			tb.Errorf("  %s", d)
		}
	}
	if len(want) == 0 {
		tb.Errorf("the replay emitted nothing: the test proves nothing")
	}
	types := map[string]int{}
	for _, g := range got {
		var r record
		_ = json.Unmarshal([]byte(g), &r)
		types[r.Type]++
	}
	tb.Logf("compared %d results: %v", len(want), types)
}
