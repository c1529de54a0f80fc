package mqtt

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// testTopicFilter and testTopic follow the contract's topic shape: the last
// level carries the courier id.
const testTopicFilter = "km0/test/positions/+"

func testTopic(courier string) string { return "km0/test/positions/" + courier }

// testConfig is a Config with fast timings for a broker at brokerURL.
func testConfig(brokerURL, clientID string) Config {
	return Config{
		URL:            brokerURL,
		Topic:          testTopicFilter,
		ClientID:       clientID,
		SessionExpiry:  time.Hour,
		ConnectTimeout: 2 * time.Second,
		ReconnectMin:   50 * time.Millisecond,
		ReconnectMax:   500 * time.Millisecond,
	}
}

// recorder collects what the handler is given, in order.
type recorder struct {
	mu     sync.Mutex
	msgs   []*Message
	notify chan struct{} // signalled (non-blocking) after each message
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) handle(m *Message) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

func (r *recorder) snapshot() []*Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*Message(nil), r.msgs...)
}

// waitLen waits until at least n messages were recorded and returns them.
func (r *recorder) waitLen(tb testing.TB, n int, timeout time.Duration) []*Message {
	tb.Helper()
	deadline := time.After(timeout)
	for {
		if r.len() >= n {
			return r.snapshot()
		}
		select {
		case <-r.notify:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			tb.Fatalf("received %d messages within %s, want at least %d", r.len(), timeout, n)
		}
	}
}

// mustStart starts a Source and closes it when the test ends.
func mustStart(tb testing.TB, cfg Config, handle func(*Message)) *Source {
	tb.Helper()
	s, err := Start(context.Background(), cfg, testLogger(tb), handle)
	if err != nil {
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() { mustClose(tb, s) })
	return s
}

func mustClose(tb testing.TB, s *Source) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		tb.Errorf("Close: %v", err)
	}
}

// waitSubscribed waits until the source holds a granted subscription, so
// that messages published afterwards are routed to its session.
func waitSubscribed(tb testing.TB, s *Source) {
	tb.Helper()
	testenv.WaitFor(tb, 10*time.Second, "source subscribed", func() bool { return s.Stats().Subscribed })
}

// publishSeq publishes payloads "from".."to-1" (decimal) to courier's topic.
func publishSeq(tb testing.TB, p *testenv.Publisher, courier string, from, to int) {
	tb.Helper()
	for i := from; i < to; i++ {
		p.MustPublish(tb, testTopic(courier), []byte(strconv.Itoa(i)))
	}
}

// seqOf parses a message payload written by publishSeq.
func seqOf(tb testing.TB, m *Message) int {
	tb.Helper()
	n, err := strconv.Atoi(string(m.Payload))
	if err != nil {
		tb.Fatalf("payload %q is not a sequence number", m.Payload)
	}
	return n
}

// testLogger sends the source's log to the test log until the test ends
// (the Source may log from a goroutine that outlives it, and t.Log would panic).
func testLogger(tb testing.TB) *slog.Logger {
	w := &tbWriter{tb: tb}
	tb.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tbWriter struct {
	tb   testing.TB
	done atomic.Bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
