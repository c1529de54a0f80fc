package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/service"
)

func testLog(tb testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// gauge reads the series of a gathered counter or gauge of a market, or
// -1 when absent.
func gauge(tb testing.TB, reg *prometheus.Registry, name, market string) float64 {
	tb.Helper()
	return seriesWith(tb, reg, name, market, "", "")
}

// seriesWith reads the series of a gathered counter or gauge whose market
// and label have the given values (label "": the market alone), or -1
// when absent.
func seriesWith(tb testing.TB, reg *prometheus.Registry, name, market, label, value string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			if ls["market"] != market || label != "" && ls[label] != value {
				continue
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return -1
}

// TestRun_KappaLiveEqualsReplay is the Kappa proof: a fleet published to
// Mosquitto as fast as possible gives, in the JetStream stream, exactly the
// results edgeproc replay gives over the same payloads with the arrival
// times the service recorded. A second, quiet market runs alongside and
// must not hold the first back. Ending with a cancelled context also proves
// the graceful shutdown: Run returns nil and every result is acked.
func TestRun_KappaLiveEqualsReplay(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	girona := mustConfig(t, "girona", mosq.URL(), ns.URL())
	quiet := mustConfig(t, "valencia", mosq.URL(), ns.URL())
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	svc := startService(t, []config.Config{girona, quiet}, service.Deps{Log: testLog(t), Record: rec.record, Registry: reg})

	msgs := testenv.FleetMessages("girona", 40, 15*time.Minute, 7, time.Now().Add(-time.Minute))
	pub := mosq.Publisher(t, "kappa-pub")
	waitReady(t, svc, 20*time.Second)
	published := map[string]bool{}
	start := time.Now()
	for _, m := range msgs {
		pub.MustPublish(t, m.Topic, m.Payload)
		published[string(m.Payload)] = true
	}
	t.Logf("published %d messages in %v", len(msgs), time.Since(start).Round(time.Millisecond))
	rec.waitSeen(t, published, 60*time.Second)
	svc.stop(t, 15*time.Second)

	if p, a := gauge(t, reg, "edgeproc_bridge_published_total", "girona"), gauge(t, reg, "edgeproc_bridge_acked_total", "girona"); p <= 0 || a != p {
		t.Errorf("after shutdown: got %v results acked of %v published, want all", a, p)
	}
	if got := gauge(t, reg, "edgeproc_positions_received_total", "valencia"); got != 0 {
		t.Errorf("quiet market received %v positions, want 0", got)
	}
	inputs := rec.inputs["girona"]
	if len(inputs) < len(msgs) {
		t.Fatalf("got %d inputs recorded, want at least the %d published", len(inputs), len(msgs))
	}
	for i, in := range inputs {
		if !in.HasArrival || (i > 0 && in.Line <= inputs[i-1].Line) {
			t.Fatalf("input %d: got line %d, has arrival %v; want a log index above the previous input's, with an arrival", i, in.Line, in.HasArrival)
		}
		if i > 0 && in.Arrival < inputs[i-1].Arrival {
			t.Fatalf("input %d: arrival %d before the previous %d", i, in.Arrival, inputs[i-1].Arrival)
		}
	}
	compareResults(t, streamResults(t, ns.URL(), girona.NATS.Stream), expectedResults(t, girona, inputs))
}

// TestRun_RevisionsLiveEqualReplay is the Kappa proof under allowed
// lateness: a fleet from the past (event time before the clock, so the
// watermark follows the positions), some of them delivered late by the
// delay profile, published through Mosquitto, gives in the stream exactly
// the replay's results, revisions included.
func TestRun_RevisionsLiveEqualReplay(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	cfg := mustConfig(t, "girona", mosq.URL(), ns.URL())
	cfg.Windows.AllowedLateness = 2 * time.Minute
	rec := newRecorder()
	svc := startService(t, []config.Config{cfg}, service.Deps{Log: testLog(t), Record: rec.record})
	msgs := testenv.FleetMessages("girona", 30, 12*time.Minute, 5, time.Now().Add(-13*time.Minute))
	pub := mosq.Publisher(t, "revisions-pub")
	waitReady(t, svc, 20*time.Second)
	published := map[string]bool{}
	for _, m := range msgs {
		pub.MustPublish(t, m.Topic, m.Payload)
		published[string(m.Payload)] = true
	}
	rec.waitSeen(t, published, 60*time.Second)
	svc.stop(t, 15*time.Second)
	want := expectedResults(t, cfg, rec.inputs["girona"])
	revisions := testenv.Revisions(want)
	if revisions == 0 {
		t.Fatalf("the replay has no revision: the test proves nothing about them")
	}
	t.Logf("%d revisions in the replay", revisions)
	compareResults(t, streamResults(t, ns.URL(), cfg.NATS.Stream), want)
}

// TestRun_BrokerRestartLosesNothing restarts Mosquitto in the middle of the
// run: the persistent session resumes, every published position reaches
// the engine, and the results still equal the replay's.
func TestRun_BrokerRestartLosesNothing(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	cfg := mustConfig(t, "girona", mosq.URL(), ns.URL())
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	svc := startService(t, []config.Config{cfg}, service.Deps{Log: testLog(t), Record: rec.record, Registry: reg})
	waitReady(t, svc, 20*time.Second)

	msgs := testenv.FleetMessages("girona", 20, 10*time.Minute, 11, time.Now().Add(-time.Minute))
	published := map[string]bool{}
	half := len(msgs) / 2
	pub := mosq.Publisher(t, "restart-pub")
	for _, m := range msgs[:half] {
		pub.MustPublish(t, m.Topic, m.Payload)
		published[string(m.Payload)] = true
	}
	pub.Close()
	// Restart at once: part of the first half is still queued or in flight.
	mosq.Restart()
	pub = mosq.Publisher(t, "restart-pub")
	for _, m := range msgs[half:] {
		pub.MustPublish(t, m.Topic, m.Payload)
		published[string(m.Payload)] = true
	}
	rec.waitSeen(t, published, 60*time.Second)
	if got := gauge(t, reg, "edgeproc_mqtt_reconnects_total", "girona"); got < 1 {
		t.Errorf("got %v MQTT reconnections, want the session resumed at least once", got)
	}
	svc.stop(t, 15*time.Second)
	compareResults(t, streamResults(t, ns.URL(), cfg.NATS.Stream), expectedResults(t, cfg, rec.inputs["girona"]))
}

// TestRun_NATSOutageLosesNothing keeps publishing positions while NATS is
// down: /readyz reports it, and once NATS is back every result is in the
// stream.
func TestRun_NATSOutageLosesNothing(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	cfg := mustConfig(t, "girona", mosq.URL(), ns.URL())
	rec := newRecorder()
	svc := startService(t, []config.Config{cfg}, service.Deps{Log: testLog(t), Record: rec.record})
	base := waitReady(t, svc, 20*time.Second)

	msgs := testenv.FleetMessages("girona", 20, 10*time.Minute, 13, time.Now().Add(-time.Minute))
	published := map[string]bool{}
	pub := mosq.Publisher(t, "outage-pub")
	third := len(msgs) / 3
	for i, m := range msgs {
		switch i {
		case third:
			ns.Shutdown()
		case 2 * third:
			if code := getStatus(t, base+"/readyz"); code != http.StatusServiceUnavailable {
				t.Errorf("/readyz with NATS down: got %d, want 503", code)
			}
			time.Sleep(time.Second)
			ns.Restart()
		}
		pub.MustPublish(t, m.Topic, m.Payload)
		published[string(m.Payload)] = true
	}
	rec.waitSeen(t, published, 60*time.Second)
	svc.stop(t, 20*time.Second)
	compareResults(t, streamResults(t, ns.URL(), cfg.NATS.Stream), expectedResults(t, cfg, rec.inputs["girona"]))
}

// waitReady waits for the HTTP listener and for /readyz to say 200, and
// returns the base URL.
func waitReady(tb testing.TB, r *running, d time.Duration) string {
	tb.Helper()
	var base string
	select {
	case a := <-r.addr:
		base = "http://" + a.String()
	case <-time.After(d):
		tb.Fatalf("no HTTP listener within %v", d)
	}
	deadline := time.Now().Add(d)
	for {
		// Run returning first (every market failed) says why, where the
		// closed listener would only say "connection refused".
		select {
		case err := <-r.done:
			r.done <- err // for the cleanup
			tb.Fatalf("the service stopped before it was ready: %v", err)
		default:
		}
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("/readyz not 200 within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func getStatus(tb testing.TB, url string) int {
	tb.Helper()
	code, _ := get(tb, url)
	return code
}

func get(tb testing.TB, url string) (int, string) {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRun_HTTPEndpointsOnLoopback(t *testing.T) {
	if got := config.Default().HTTP.Listen; !strings.HasPrefix(got, "127.0.0.1:") {
		t.Errorf("default http.listen: got %q, want 127.0.0.1:PORT", got)
	}
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	// Two markets on one address share one listener.
	a, b := mustConfig(t, "girona", mosq.URL(), ns.URL()), mustConfig(t, "valencia", mosq.URL(), ns.URL())
	svc := startService(t, []config.Config{a, b}, service.Deps{Log: testLog(t)})
	base := waitReady(t, svc, 20*time.Second)
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Errorf("listener at %s, want 127.0.0.1", base)
	}
	select {
	case extra := <-svc.addr:
		t.Errorf("a second listener at %s, want one shared by both markets", extra)
	default:
	}
	cases := []struct {
		path     string
		wantCode int
		wantBody []string
	}{
		{"/healthz", 200, []string{"ok"}},
		{"/readyz", 200, []string{"ready"}},
		{"/metrics", 200, []string{`edgeproc_mqtt_connected{market="girona"} 1`, `edgeproc_nats_connected{market="valencia"} 1`, "go_goroutines"}},
		{"/debug/pprof/", 404, nil}, // opt-in only
	}
	for _, c := range cases {
		code, body := get(t, base+c.path)
		if code != c.wantCode {
			t.Errorf("GET %s: got %d, want %d", c.path, code, c.wantCode)
		}
		for _, w := range c.wantBody {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: body lacks %q", c.path, w)
			}
		}
	}
}

func TestRun_PprofWhenAsked(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	c := mustConfig(t, "girona", mosq.URL(), ns.URL())
	c.HTTP.Pprof = true
	svc := startService(t, []config.Config{c}, service.Deps{Log: testLog(t)})
	base := waitReady(t, svc, 20*time.Second)
	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/goroutine?debug=1": "service.",
		"/debug/pprof/profile?seconds=1": "", // a CPU profile, binary
	} {
		code, body := get(t, base+path)
		if code != 200 || !strings.Contains(body, want) || body == "" {
			t.Errorf("GET %s: got %d (%d bytes), want 200 with %q", path, code, len(body), want)
		}
	}
}

func TestRun_RefusesBadSetups(t *testing.T) {
	mk := func(market, listen string, edit func(*config.Config)) config.Config {
		c := mustConfig(t, market, "mqtt://127.0.0.1:1", "nats://127.0.0.1:1")
		c.HTTP.Listen = listen
		if edit != nil {
			edit(&c)
		}
		return c
	}
	cases := []struct {
		name    string
		cfgs    []config.Config
		wantErr string
		clash   bool
	}{
		{"same market twice", []config.Config{mk("girona", "127.0.0.1:0", nil), mk("girona", "127.0.0.1:0", func(c *config.Config) {
			c.MQTT.ClientID, c.NATS.Stream = "other", "OTHER"
		})}, "market", true},
		{"same client id", []config.Config{mk("girona", "127.0.0.1:0", nil), mk("valencia", "127.0.0.1:0", func(c *config.Config) {
			c.MQTT.ClientID = "edgeproc-girona"
		})}, "client_id", true},
		{"same stream", []config.Config{mk("girona", "127.0.0.1:0", nil), mk("valencia", "127.0.0.1:0", func(c *config.Config) {
			c.NATS.Stream = "EDGEPROC_GIRONA"
		})}, "stream", true},
		{"same port, other address", []config.Config{mk("girona", "127.0.0.1:9464", nil), mk("valencia", "localhost:9464", nil)}, "http.listen", true},
		{"embedded nats without a connection", []config.Config{mk("girona", "127.0.0.1:0", func(c *config.Config) { c.NATS.URL = service.Embedded })}, "no NATS connection", false},
		{"no market", nil, "no market", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := service.Run(ctx, c.cfgs, service.Deps{})
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("got %v, want an error mentioning %q", err, c.wantErr)
			}
			if got := errors.Is(err, service.ErrClash); got != c.clash {
				t.Errorf("errors.Is(err, ErrClash) = %v, want %v (%v)", got, c.clash, err)
			}
		})
	}
}

// TestRun_NATSAbsentSaysWhy starts a market whose NATS server is not
// there: the log names the URL and the dial error at once, and /readyz
// says the same, not a bare timeout.
func TestRun_NATSAbsentSaysWhy(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	natsURL := "nats://" + testenv.FreeAddr(t) // nothing listens there
	cfg := mustConfig(t, "girona", mosq.URL(), natsURL)
	var logs testenv.LogBuffer
	start := time.Now()
	svc := startService(t, []config.Config{cfg}, service.Deps{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	base := "http://" + (<-svc.addr).String()
	var body string
	testenv.WaitFor(t, 20*time.Second, "/readyz naming the cause", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(body, natsURL) && strings.Contains(body, "connection refused")
	})
	t.Logf("after %v: /readyz %q", time.Since(start).Round(time.Millisecond), strings.TrimSpace(body))
	testenv.WaitFor(t, 20*time.Second, "a log line naming the URL and the dial error", func() bool {
		l := logs.String()
		return strings.Contains(l, natsURL) && strings.Contains(l, "connection refused")
	})
	if n := strings.Count(logs.String(), "nats: cannot connect"); n > 3 {
		t.Errorf("%d connection warnings in %v, want them rate-limited:\n%s", n, time.Since(start).Round(time.Millisecond), logs.String())
	}
}
