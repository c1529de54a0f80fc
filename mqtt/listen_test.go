package mqtt

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// transitions records OnListening and OnDeaf calls, checking they never
// overlap.
type transitions struct {
	mu     sync.Mutex
	events []string // "listening" or "deaf"
	at     []time.Time
	inside bool
	bad    string
}

func (tr *transitions) record(ev string) func(time.Time) {
	return func(at time.Time) {
		tr.mu.Lock()
		if tr.inside {
			tr.bad = "callbacks overlap"
		}
		tr.inside = true
		tr.events = append(tr.events, ev)
		tr.at = append(tr.at, at)
		tr.inside = false
		tr.mu.Unlock()
	}
}

func (tr *transitions) snapshot() ([]string, string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.events...), tr.bad
}

// A broker restart makes the source deaf, then listening again once the
// subscription is renewed; the calls alternate, and Listening agrees.
func TestSource_ListeningAcrossBrokerRestart(t *testing.T) {
	t.Parallel()
	broker := testenv.StartMosquitto(t)
	var tr transitions
	cfg := testConfig(broker.URL(), "edgeproc-listening")
	cfg.OnListening, cfg.OnDeaf = tr.record("listening"), tr.record("deaf")
	rec := newRecorder()
	src := mustStart(t, cfg, func(m *Message) { rec.handle(m); m.Ack() })
	if ok, _ := src.Listening(); ok {
		t.Fatal("Listening true before any connection")
	}

	testenv.WaitFor(t, 10*time.Second, "listening", func() bool { ev, _ := tr.snapshot(); return len(ev) == 1 })
	ok, since := src.Listening()
	if !ok || !src.Stats().Subscribed || since.IsZero() {
		t.Fatalf("after OnListening: Listening %v since %v, Subscribed %v; want both true", ok, since, src.Stats().Subscribed)
	}
	// Listening means heard: a message published now arrives.
	publishSeq(t, broker.Publisher(t, ""), "van-1", 0, 1)
	rec.waitLen(t, 1, 10*time.Second)

	broker.Stop()
	testenv.WaitFor(t, 10*time.Second, "deaf", func() bool { ev, _ := tr.snapshot(); return len(ev) == 2 })
	if ok, _ := src.Listening(); ok {
		t.Error("Listening true after OnDeaf")
	}
	broker.Restart()
	testenv.WaitFor(t, 20*time.Second, "listening again", func() bool { ev, _ := tr.snapshot(); return len(ev) == 3 })
	ok, since2 := src.Listening()
	if !ok || !since2.After(since) {
		t.Errorf("after the restart: Listening %v since %v, want true since after %v", ok, since2, since)
	}
	publishSeq(t, broker.Publisher(t, ""), "van-1", 1, 2)
	rec.waitLen(t, 2, 10*time.Second)

	mustClose(t, src)
	events, bad := tr.snapshot()
	if want := "listening deaf listening deaf"; strings.Join(events, " ") != want || bad != "" {
		t.Errorf("got transitions %v (%s), want %q", events, bad, want)
	}
	mustClose(t, src) // a second Close: no second OnDeaf, no panic
	if events, _ := tr.snapshot(); len(events) != 4 {
		t.Errorf("a second Close added transitions: %v", events)
	}
}

// Retained messages are never delivered (retain handling 2): a new session
// must not ingest an old position as if it had just arrived.
func TestSource_IgnoresRetained(t *testing.T) {
	t.Parallel()
	broker := testenv.StartMosquitto(t)
	pub := broker.Publisher(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pub.PublishRetained(ctx, testTopic("van-old"), []byte("retained")); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	src := mustStart(t, testConfig(broker.URL(), "edgeproc-retained"), func(m *Message) { rec.handle(m); m.Ack() })
	waitSubscribed(t, src)
	pub.MustPublish(t, testTopic("van-new"), []byte("live"))
	got := rec.waitLen(t, 1, 10*time.Second)
	time.Sleep(200 * time.Millisecond) // a retained message would have come first anyway
	if got = rec.snapshot(); len(got) != 1 || string(got[0].Payload) != "live" {
		var ps []string
		for _, m := range got {
			ps = append(ps, string(m.Payload))
		}
		t.Fatalf("got payloads %q, want only the live one", ps)
	}
}

// The Maximum Packet Size announced in CONNECT follows MaxPayload: payloads
// up to it arrive (to be counted too_large upstream); the broker drops
// larger ones for this client.
func TestSource_MaxPayload(t *testing.T) {
	t.Parallel()
	broker := testenv.StartMosquitto(t)
	for _, tt := range []struct {
		name       string
		maxPayload int
		sizes      []int // published in order; the last always fits
		want       []int // sizes delivered
	}{
		{"default 1 MiB", 0, []int{1 << 20, 100}, []int{1 << 20, 100}},
		{"smaller", 64 << 10, []int{64 << 10, 64<<10 + PacketOverhead + 1, 100}, []int{64 << 10, 100}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(broker.URL(), "edgeproc-size-"+strings.ReplaceAll(tt.name, " ", "-"))
			cfg.MaxPayload = tt.maxPayload
			rec := newRecorder()
			src := mustStart(t, cfg, func(m *Message) { rec.handle(m); m.Ack() })
			waitSubscribed(t, src)
			pub := broker.Publisher(t, "")
			for _, n := range tt.sizes {
				pub.MustPublish(t, testTopic("big"), bytes.Repeat([]byte{'x'}, n))
			}
			got := rec.waitLen(t, len(tt.want), 10*time.Second)
			time.Sleep(100 * time.Millisecond)
			got = rec.snapshot()
			if len(got) != len(tt.want) {
				t.Fatalf("got %d messages, want %d", len(got), len(tt.want))
			}
			for i, m := range got {
				if len(m.Payload) != tt.want[i] {
					t.Errorf("message %d: %d bytes, want %d", i, len(m.Payload), tt.want[i])
				}
			}
			mustClose(t, src)
		})
	}
}

// Start fails at once, naming the file, for a CA file it cannot use; it
// starts nothing, so there is nothing to close.
func TestStart_UnreadableCAFile(t *testing.T) {
	for name, path := range map[string]string{
		"directory": t.TempDir(),
		"missing":   t.TempDir() + "/missing.pem",
	} {
		t.Run(name, func(t *testing.T) {
			cfg := Config{URL: "mqtts://127.0.0.1:1", Topic: "t", ClientID: "c", CAFile: path}
			start := time.Now()
			src, err := Start(context.Background(), cfg, nil, func(*Message) {})
			if err == nil || src != nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("got (%v, %v), want a nil Source and an error naming %s", src, err, path)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Start took %v to fail", d)
			}
		})
	}
	_, err := Start(context.Background(), Config{URL: "mqtt://127.0.0.1:1", Topic: "t", ClientID: "c", MaxPayload: -1}, nil, func(*Message) {})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("negative MaxPayload: got %v, want ErrInvalidConfig", err)
	}
}
