package sim

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/internal/testenv"
)

// received is one message as a subscriber saw it.
type received struct {
	topic   string
	payload string
	at      time.Time
}

// subscriber collects every message on filter, in arrival order.
type subscriber struct {
	mu   sync.Mutex
	msgs []received
}

func (s *subscriber) snapshot() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.msgs...)
}

// mustSubscribe connects a QoS 1 subscriber to filter and returns once the
// subscription is acknowledged.
func mustSubscribe(t *testing.T, brokerURL, filter string) *subscriber {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	s := &subscriber{}
	ctx, cancel := context.WithCancel(context.Background())
	subscribed := make(chan error, 1)
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     20,
		CleanStartOnInitialConnection: true,
		ConnectTimeout:                5 * time.Second,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			go func() {
				_, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
				subscribed <- err
			}()
		},
		ClientConfig: paho.ClientConfig{
			ClientID: "sim-test-sub",
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				s.mu.Lock()
				s.msgs = append(s.msgs, received{pr.Packet.Topic, string(pr.Packet.Payload), time.Now()})
				s.mu.Unlock()
				return true, nil
			}},
		},
	})
	if err != nil {
		cancel()
		t.Fatalf("subscriber: %v", err)
	}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer dcancel()
		_ = cm.Disconnect(dctx)
		cancel()
	})
	select {
	case err := <-subscribed:
		if err != nil {
			t.Fatalf("subscribe %s: %v", filter, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("subscriber not subscribed to %s within 10s", filter)
	}
	return s
}

// waitFor polls until s holds n messages or the timeout passes.
func waitFor(t *testing.T, s *subscriber, n int, timeout time.Duration) []received {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := s.snapshot()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// payload is the part of a position the tests look at.
type payload struct {
	Courier string `json:"courier"`
	TS      int64  `json:"timestamp_ms"`
}

func TestRun_FixedRateInOrder(t *testing.T) {
	const n = 200
	m := testenv.StartMosquitto(t)
	sub := mustSubscribe(t, m.URL(), "km0/test/positions/#")

	opts := Options{URL: m.URL(), Market: "test", Couriers: 30, Rate: 1000, Count: n, Seed: 7}
	st, err := Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st.Sent != n || st.Acked != n || st.Errors != 0 {
		t.Errorf("got sent %d acked %d errors %d, want %d %d 0", st.Sent, st.Acked, st.Errors, n, n)
	}
	// 200 messages at 1000/s are spread over ~199 ms; allow for coarse
	// timers but not for an absent rate limit (which takes a few ms).
	if st.Sending < 150*time.Millisecond {
		t.Errorf("got %d messages sent in %s, want >= 150ms at 1000/s", n, st.Sending)
	}
	if r := st.Rate(); r > 1400 || r < 300 {
		t.Errorf("got achieved rate %.0f/s, want about 1000/s", r)
	}

	// The subscriber sees exactly the fleet's events, in arrival order,
	// shifted by Stats.Shift, each on its courier's topic.
	f := fleet.New(opts.fleetConfig())
	got := waitFor(t, sub, n, 10*time.Second)
	if len(got) != n {
		t.Fatalf("subscriber got %d messages, want %d", len(got), n)
	}
	for i, r := range got {
		e, _ := f.Next()
		var p payload
		if err := json.Unmarshal([]byte(r.payload), &p); err != nil {
			t.Fatalf("message %d: %v: %s", i, err, r.payload)
		}
		if p.Courier != e.Courier || p.TS != e.TS+st.Shift {
			t.Fatalf("message %d: got %s@%d, want %s@%d (in arrival order)", i, p.Courier, p.TS, e.Courier, e.TS+st.Shift)
		}
		if want := "km0/test/positions/" + e.Courier; r.topic != want {
			t.Errorf("message %d: got topic %q, want %q", i, r.topic, want)
		}
	}
}

func TestRun_RealTimeShiftsToNow(t *testing.T) {
	m := testenv.StartMosquitto(t)
	sub := mustSubscribe(t, m.URL(), "rt/#")

	start := time.Now()
	opts := Options{URL: m.URL(), Market: "rt", TopicPrefix: "rt/", Couriers: 50, Duration: 2 * time.Second,
		Seed: 3, DuplicateRate: 0.3, BadRate: 0.3}
	st, err := Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st.Elapsed < 2*time.Second || st.Elapsed > 8*time.Second {
		t.Errorf("got elapsed %s, want about the 2s duration", st.Elapsed)
	}
	// 50 couriers every ~5 s over 2 s, minus arrival delays: about 15
	// positions, plus duplicates and bad payloads.
	if st.Sent < 5 || st.Sent > 60 {
		t.Errorf("got %d messages sent in 2s of real time, want about 15-30", st.Sent)
	}
	if st.Acked != st.Sent || st.Errors != 0 {
		t.Errorf("got acked %d errors %d, want %d 0", st.Acked, st.Errors, st.Sent)
	}
	if st.Bad == 0 {
		t.Errorf("got no bad payloads at BadRate 0.3")
	}
	got := waitFor(t, sub, int(st.Sent), 10*time.Second)
	if uint64(len(got)) != st.Sent {
		t.Fatalf("subscriber got %d messages, want %d", len(got), st.Sent)
	}
	// The messages are the fleet's, in order; valid positions are shifted
	// to now: none from before the run, none from after it reached the
	// subscriber. (Bad payloads keep the fleet's bytes.)
	f := fleet.New(opts.fleetConfig())
	var valid int
	for i, r := range got {
		e, _ := f.Next()
		if e.Raw != nil {
			if r.payload != string(e.Raw) {
				t.Errorf("message %d: got %q, want the bad payload %q", i, r.payload, e.Raw)
			}
			continue
		}
		valid++
		ts := e.TS + st.Shift
		e.TS, e.Arrival = ts, e.Arrival+st.Shift
		if want := string(fleet.AppendJSON(nil, e, false)); r.payload != want {
			t.Errorf("message %d: got %s, want %s", i, r.payload, want)
		}
		if ts < start.UnixMilli() || ts > r.at.UnixMilli() {
			t.Errorf("%s: got timestamp %d, want within [%d, %d]", e.Courier, ts, start.UnixMilli(), r.at.UnixMilli())
		}
	}
	if valid == 0 {
		t.Errorf("got no valid position among %d messages", len(got))
	}
}

func TestRun_StopsOnContext(t *testing.T) {
	m := testenv.StartMosquitto(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	st, err := Run(ctx, Options{URL: m.URL(), Market: "x", Rate: 100, Seed: 1}, nil)
	if err != nil {
		t.Fatalf("Run: got %v, want nil when ctx ends", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("Run returned %s after ctx ended, want promptly", d)
	}
	if st.Sent == 0 || st.Acked != st.Sent {
		t.Errorf("got sent %d acked %d, want some, all acked", st.Sent, st.Acked)
	}
}

func TestRun_Errors(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no URL", Options{Market: "m"}, "URL is required"},
		{"no market", Options{URL: "mqtt://127.0.0.1:1"}, "market is required"},
		{"negative rate", Options{URL: "mqtt://127.0.0.1:1", Market: "m", Rate: -1}, "must not be negative"},
		{"wildcard prefix", Options{URL: "mqtt://127.0.0.1:1", Market: "m", TopicPrefix: "a/+/"}, "wildcards"},
		// Port 1 on loopback refuses connections.
		{"unreachable broker", Options{URL: "mqtt://127.0.0.1:1", Market: "m", ConnectTimeout: 500 * time.Millisecond}, "connect to mqtt://127.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(context.Background(), tt.opts, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
