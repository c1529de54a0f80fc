package board

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	where "github.com/km0/edgeproc/courier"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/result"
)

// newHub starts a hub for the tests with markets a and b and a fixed clock.
func newHub(tb testing.TB, mod func(*Config)) *Hub {
	tb.Helper()
	cfg := Config{
		Markets:  []Market{{Name: "a"}, {Name: "b"}},
		Interval: 20 * time.Millisecond, DrainEvery: 5 * time.Millisecond,
		Now: func() time.Time { return time.UnixMilli(1_000_000) },
	}
	if mod != nil {
		mod(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.Close)
	return h
}

// stream is a page's event stream read by a test.
type stream struct {
	resp *http.Response
	s    *Stream
}

func openStream(tb testing.TB, url string) *stream {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %s", url, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		tb.Fatalf("Content-Type %q", ct)
	}
	return &stream{resp: resp, s: NewStream(resp.Body)}
}

// next returns the next message, raw and decoded.
func (s *stream) next(tb testing.TB) (string, Update) {
	tb.Helper()
	u, _, err := s.s.Next()
	if err != nil {
		tb.Fatal(err)
	}
	return string(s.s.msg), u
}

// until reads messages until ok accepts the courier set seen so far
// (snapshot plus diffs), or fails after d.
func (s *stream) until(tb testing.TB, d time.Duration, ok func(map[string]CourierUpdate) bool) map[string]CourierUpdate {
	tb.Helper()
	seen := map[string]CourierUpdate{}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		_, u := s.next(tb)
		if u.Full {
			clear(seen)
		}
		for _, c := range u.Couriers {
			seen[c.ID] = c
		}
		if ok(seen) {
			return seen
		}
	}
	tb.Fatalf("condition not met within %v; couriers %+v", d, seen)
	return nil
}

func serve(tb testing.TB, h *Hub) *httptest.Server {
	srv := httptest.NewServer(h.Handler())
	tb.Cleanup(srv.Close)
	return srv
}

// The courier bucket's rules (bridge.UpdatePosition, MarkNoSignal,
// MarkOnline), and the board's own movement state on top.
func TestHub_AppliesTheBucketRules(t *testing.T) {
	type step func(f *Feed)
	pos := func(ts int64, lat, lon float64) step {
		return func(f *Feed) { f.Position([]byte("c1"), ts, lat, lon) }
	}
	res := func(r result.Record) step {
		r.Courier = "c1"
		return func(f *Feed) { f.Result(&r) }
	}
	noSignal := func(lastSeen int64, lat, lon float64) step {
		return res(result.Record{Type: result.NoSignal, Start: lastSeen - 100, End: lastSeen, Lat: lat, Lon: lon})
	}
	restored := res(result.Record{Type: result.SignalRestored, SilentFrom: 1, RestoredAt: 2})
	dist := func(end int64, m float64, stopped bool) step {
		return res(result.Record{Type: result.Distance, Start: end - 300, End: end, DistanceM: m, Stopped: stopped})
	}
	revision := func(end int64, m float64, n int) step {
		return res(result.Record{Type: result.Distance, Start: end - 300, End: end, DistanceM: m, Revision: n})
	}
	tests := []struct {
		name  string
		steps []step
		want  string // lat lon ts state distance (absent: not shown)
	}{
		{"first position", []step{pos(10, 1, 2)}, "1 2 10 unknown -"},
		{"newer position moves it", []step{pos(10, 1, 2), pos(20, 3, 4)}, "3 4 20 unknown -"},
		{"older position ignored", []step{pos(20, 3, 4), pos(10, 1, 2)}, "3 4 20 unknown -"},
		{"same timestamp ignored", []step{pos(20, 3, 4), pos(20, 1, 2)}, "3 4 20 unknown -"},
		{"distance moving", []step{pos(10, 1, 2), dist(300, 900, false)}, "1 2 10 moving 900"},
		{"distance stopped", []step{pos(10, 1, 2), dist(300, 5, true)}, "1 2 10 stopped 5"},
		{"older window ignored", []step{pos(10, 1, 2), dist(600, 5, true), dist(300, 900, false)}, "1 2 10 stopped 5"},
		// Allowed lateness: a window's revisions come in order, each
		// replacing the one before; the board shows the newest window's
		// newest revision, and no older window's. Out of order:
		// TestHub_KeepsTheHighestRevision.
		{"revision of the shown window replaces it", []step{pos(10, 1, 2), dist(600, 5, true), revision(600, 700, 1)}, "1 2 10 moving 700"},
		{"revision of an older window ignored", []step{pos(10, 1, 2), dist(600, 5, true), revision(300, 700, 1)}, "1 2 10 stopped 5"},
		{"no_signal takes its last position", []step{pos(10, 1, 2), noSignal(15, 5, 6)}, "5 6 15 no_signal -"},
		{"no_signal of an unknown courier shows it", []step{noSignal(15, 5, 6)}, "5 6 15 no_signal -"},
		{"no_signal older than a position ignored", []step{pos(20, 1, 2), noSignal(15, 5, 6)}, "1 2 20 unknown -"},
		{"no_signal at the last position applies", []step{pos(15, 1, 2), noSignal(15, 1, 2)}, "1 2 15 no_signal -"},
		{"newer position ends no_signal", []step{noSignal(15, 5, 6), pos(16, 7, 8)}, "7 8 16 unknown -"},
		{"restored ends no_signal", []step{pos(10, 1, 2), dist(300, 900, false), noSignal(10, 1, 2), restored}, "1 2 10 moving 900"},
		{"no_signal overrides movement", []step{pos(10, 1, 2), dist(300, 900, false), noSignal(10, 1, 2)}, "1 2 10 no_signal 900"},
		{"distance of an unknown courier not shown", []step{dist(300, 900, false)}, ""},
		{"restored of an unknown courier not shown", []step{restored}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHub(t, nil)
			f := h.Feed("a")
			for _, s := range tt.steps {
				s(f)
			}
			_, u := openStream(t, serve(t, h).URL+"/board/events").next(t)
			got := ""
			for _, c := range u.Couriers {
				d := "-"
				if c.HasDistance {
					d = fmt.Sprint(c.DistanceM)
				}
				got = fmt.Sprintf("%v %v %v %v %s", c.Lat, c.Lon, c.TS, c.State, d)
			}
			if len(u.Couriers) > 1 || got != tt.want {
				t.Errorf("got %q (%d couriers), want %q", got, len(u.Couriers), tt.want)
			}
		})
	}
}

// Regression: revisions of a window may reach the board out of
// order (results re-delivered after a restart). The board keeps, for the
// latest window, the firing with the highest revision: an older revision,
// or the first firing, arriving after a newer one changes nothing; a newer
// window still replaces an older one, whatever their revisions.
func TestHub_KeepsTheHighestRevision(t *testing.T) {
	// firing is window [end-300, end)'s firing number rev (0: the first).
	type firing struct {
		end     int64
		m       float64
		stopped bool
		rev     int
	}
	tests := []struct {
		name  string
		fired []firing
		want  string // state distance window_end revision
	}{
		{"revision 1 after revision 2 ignored",
			[]firing{{600, 900, false, 2}, {600, 700, false, 1}}, "moving 900 600 2"},
		{"first firing after revisions 2 and 1 ignored",
			[]firing{{600, 900, false, 2}, {600, 700, false, 1}, {600, 5, true, 0}}, "moving 900 600 2"},
		{"first firing after revision 1 ignored",
			[]firing{{600, 700, false, 1}, {600, 5, true, 0}}, "moving 700 600 1"},
		{"revisions in order replace each other",
			[]firing{{600, 5, true, 0}, {600, 700, false, 1}, {600, 900, false, 2}}, "moving 900 600 2"},
		{"newer revision skipping one replaces",
			[]firing{{600, 5, true, 0}, {600, 900, false, 2}}, "moving 900 600 2"},
		{"same revision again changes nothing",
			[]firing{{600, 900, false, 2}, {600, 900, false, 2}}, "moving 900 600 2"},
		{"newer window replaces an older window",
			[]firing{{300, 900, false, 0}, {600, 5, true, 0}}, "stopped 5 600 0"},
		{"newer window replaces an older window's revision",
			[]firing{{300, 900, false, 3}, {600, 5, true, 0}}, "stopped 5 600 0"},
		{"older window's revision ignored",
			[]firing{{600, 5, true, 0}, {300, 900, false, 3}}, "stopped 5 600 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHub(t, nil)
			f := h.Feed("a")
			f.Position([]byte("c1"), 10, 1, 2)
			for _, w := range tt.fired {
				f.Result(&result.Record{Type: result.Distance, Courier: "c1", Start: w.end - 300, End: w.end,
					DistanceM: w.m, Stopped: w.stopped, Revision: w.rev})
			}
			_, u := openStream(t, serve(t, h).URL+"/board/events").next(t)
			if len(u.Couriers) != 1 || !u.Couriers[0].HasDistance {
				t.Fatalf("got couriers %+v, want c1 with a distance", u.Couriers)
			}
			c := u.Couriers[0]
			if got := fmt.Sprintf("%v %v %v %v", c.State, c.DistanceM, c.WindowEnd, c.Revision); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// A stopped courier is stopped since the start of the first of its
// consecutive stopped windows; a moving window ends it, and a no_signal
// shows no stop.
func TestHub_StoppedSince(t *testing.T) {
	type firing struct {
		start, end int64
		stopped    bool
	}
	tests := []struct {
		name     string
		fired    []firing
		noSignal bool
		want     string // "since N", or "-" (not stopped)
	}{
		{"one stopped window", []firing{{0, 300, true}}, false, "since 0"},
		{"consecutive stopped windows keep the first", []firing{{0, 300, true}, {100, 400, true}, {200, 500, true}}, false, "since 0"},
		{"moving in between starts again", []firing{{0, 300, true}, {100, 400, false}, {200, 500, true}}, false, "since 200"},
		{"moving", []firing{{0, 300, true}, {100, 400, false}}, false, "-"},
		{"an older window's revision changes nothing", []firing{{100, 400, true}, {0, 300, false}}, false, "since 100"},
		{"silent", []firing{{0, 300, true}}, true, "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHub(t, nil)
			f := h.Feed("a")
			f.Position([]byte("c1"), 10, 1, 2)
			for _, w := range tt.fired {
				f.Result(&result.Record{Type: result.Distance, Courier: "c1", Start: w.start, End: w.end, Stopped: w.stopped})
			}
			if tt.noSignal {
				f.Result(&result.Record{Type: result.NoSignal, Courier: "c1", Start: 10, End: 10, Lat: 1, Lon: 2})
			}
			_, u := openStream(t, serve(t, h).URL+"/board/events").next(t)
			if len(u.Couriers) != 1 {
				t.Fatalf("got couriers %+v, want c1", u.Couriers)
			}
			got := "-"
			if c := u.Couriers[0]; c.State == Stopped {
				got = fmt.Sprintf("since %d", c.StoppedSince)
			} else if c.StoppedSince != 0 {
				got = fmt.Sprintf("%v with stopped since %d", c.State, c.StoppedSince)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestHub_SnapshotThenDiffsOfChangedCouriersOnly(t *testing.T) {
	h := newHub(t, nil)
	fa, fb := h.Feed("a"), h.Feed("b")
	fa.Position([]byte("a1"), 10, 41.5, 2.5)
	fb.Position([]byte("b1"), 10, 39.4, -0.3)
	s := openStream(t, serve(t, h).URL+"/board/events")
	_, u := s.next(t)
	if !u.Full || len(u.Couriers) != 2 || len(u.Markets) != 2 || u.Markets[1].Name != "b" {
		t.Fatalf("snapshot %+v", u)
	}
	for _, c := range u.Couriers {
		if u.Markets[c.Market].Name != c.ID[:1] {
			t.Errorf("courier %s in market %s", c.ID, u.Markets[c.Market].Name)
		}
	}
	// The first update may repeat what changed just before the snapshot
	// (harmless: updates are idempotent); after it, only changes.
	s.next(t)
	fb.Position([]byte("b1"), 20, 39.5, -0.4)
	seen := s.until(t, 5*time.Second, func(m map[string]CourierUpdate) bool { return m["b1"].TS == 20 })
	if _, ok := seen["a1"]; ok {
		t.Errorf("a diff carried a1, which did not change: %+v", seen)
	}
	if c := seen["b1"]; c.Lat != 39.5 || c.Lon != -0.4 {
		t.Errorf("b1 = %+v", c)
	}
}

func TestHub_MarketFilter(t *testing.T) {
	h := newHub(t, nil)
	h.Feed("a").Position([]byte("a1"), 10, 1, 1)
	h.Feed("b").Position([]byte("b1"), 10, 2, 2)
	srv := serve(t, h)
	_, u := openStream(t, srv.URL+"/board/events?market=b").next(t)
	if len(u.Markets) != 1 || u.Markets[0].Name != "b" || len(u.Couriers) != 1 || u.Couriers[0].ID != "b1" || u.Couriers[0].Market != 0 {
		t.Errorf("market b's stream: %+v", u)
	}
	if resp, err := http.Get(srv.URL + "/board/events?market=zz"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown market: %v %v", resp.Status, err)
	}
	if h.Feed("zz") != nil {
		t.Error("Feed of an unknown market is not nil")
	}
	var nilFeed *Feed
	nilFeed.Position([]byte("x"), 1, 1, 1) // must not panic
	nilFeed.Result(&result.Record{Type: result.NoSignal, Courier: "x"})
}

// However fast positions come, a page gets at most one message per
// Interval, with each courier once, at its latest state.
func TestHub_CoalescesUpdates(t *testing.T) {
	const interval = 100 * time.Millisecond
	h := newHub(t, func(c *Config) { c.Interval = interval })
	f := h.Feed("a")
	s := openStream(t, serve(t, h).URL+"/board/events")
	s.next(t) // the snapshot
	stop := make(chan struct{})
	fed := make(chan int64)
	go func() {
		var ts int64
		for {
			select {
			case <-stop:
				fed <- ts
				return
			default:
			}
			ts++
			f.Position([]byte("c1"), ts, 1, 1)
			f.Position([]byte("c2"), ts, 2, 2)
			if ts%64 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	start := time.Now()
	msgs := 0
	var c1 int64 // c1's latest timestamp seen
	for time.Since(start) < 10*interval {
		raw, u := s.next(t)
		msgs++
		for _, c := range u.Couriers {
			if c.ID == "c1" {
				c1 = c.TS
			}
		}
		if n := strings.Count(raw, `["c1"`); n > 1 {
			t.Fatalf("c1 %d times in one message", n)
		}
		if len(u.Couriers) > 2 {
			t.Fatalf("%d couriers in one message", len(u.Couriers))
		}
	}
	elapsed := time.Since(start)
	close(stop)
	last := <-fed
	if max := int(elapsed/interval) + 2; msgs > max {
		t.Errorf("%d messages in %v, want at most %d (one per %v)", msgs, elapsed, max, interval)
	}
	if last < int64(msgs)*4 {
		t.Fatalf("only %d positions fed per courier: not a coalescing test", last)
	}
	if c1 != last {
		s.until(t, 5*time.Second, func(m map[string]CourierUpdate) bool { return m["c1"].TS == last })
	}
	t.Logf("%d positions per courier in %d messages", last, msgs)
}

// Feeding never blocks: with the hub busy, what does not fit in the
// mailbox is dropped and counted, and the rest is shown.
func TestHub_MailboxBoundDropsAndCounts(t *testing.T) {
	busy := make(chan struct{})
	h := newHub(t, func(c *Config) {
		c.Mailbox, c.DrainEvery, c.Interval = 4, time.Hour, time.Hour
		// The hub reads the status once as it starts, before it drains
		// anything: it stays busy there until the feeding is done.
		c.Markets[0].Status = func() Status { <-busy; return Status{} }
	})
	f := h.Feed("a")
	for i := range 10 {
		f.Position(fmt.Appendf(nil, "c%d", i), 10, 1, 1)
	}
	close(busy)
	if got := h.Stats().Dropped; got != 6 {
		t.Errorf("Dropped = %d, want 6", got)
	}
	_, u := openStream(t, serve(t, h).URL+"/board/events").next(t) // joining drains the mailbox
	if len(u.Couriers) != 4 || u.Dropped != 6 {
		t.Errorf("snapshot has %d couriers and dropped %d, want 4 and 6", len(u.Couriers), u.Dropped)
	}
}

func TestHub_MaxCouriersRefusesAndCounts(t *testing.T) {
	h := newHub(t, func(c *Config) { c.MaxCouriers = 3 })
	f := h.Feed("a")
	for i := range 5 {
		f.Position(fmt.Appendf(nil, "c%d", i), 10, 1, 1)
	}
	f.Position([]byte(strings.Repeat("x", 65)), 10, 1, 1) // over the contract's 64
	f.Position([]byte("c0"), 11, 2, 2)                    // tracked: still updated
	s := openStream(t, serve(t, h).URL+"/board/events")
	seen := s.until(t, 5*time.Second, func(m map[string]CourierUpdate) bool { return m["c0"].TS == 11 })
	if len(seen) != 3 {
		t.Errorf("%d couriers shown, want 3", len(seen))
	}
	if st := h.Stats(); st.Refused != 3 || st.Couriers != 3 {
		t.Errorf("stats %+v, want 3 refused and 3 couriers", st)
	}
}

// A page that does not read is disconnected, never waited for.
func TestHub_DropsSlowClient(t *testing.T) {
	h := newHub(t, func(c *Config) { c.ClientBuffer = 2 })
	c := &client{market: -1, ch: make(chan []byte, h.cfg.ClientBuffer)}
	h.join <- c
	f := h.Feed("a")
	deadline := time.Now().Add(10 * time.Second)
	for h.Stats().SlowClients == 0 {
		if time.Now().After(deadline) {
			t.Fatal("slow client never dropped")
		}
		f.Position([]byte("c1"), time.Now().UnixNano(), 1, 1)
		time.Sleep(5 * time.Millisecond)
	}
	n := 0
	for range c.ch { // closed after the buffered messages
		n++
	}
	if n != h.cfg.ClientBuffer {
		t.Errorf("%d messages buffered, want %d", n, h.cfg.ClientBuffer)
	}
	if st := h.Stats(); st.Clients != 0 {
		t.Errorf("stats %+v, want no client", st)
	}
}

func TestHub_MaxClientsAndClose(t *testing.T) {
	h := newHub(t, func(c *Config) { c.MaxClients = 1 })
	srv := serve(t, h)
	s := openStream(t, srv.URL+"/board/events")
	s.next(t)
	resp, err := http.Get(srv.URL + "/board/events")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("second page: %v %v, want 503", resp.Status, err)
	}
	h.Close()
	done := make(chan error, 1)
	go func() {
		for {
			if _, _, err := s.s.Next(); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Errorf("stream ended with %v, want EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the stream")
	}
	resp, err = http.Get(srv.URL + "/board/events")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("after Close: %v %v, want 503", resp.Status, err)
	}
}

func TestHandler_PagesAndAssets(t *testing.T) {
	h := newHub(t, nil)
	srv := serve(t, h)
	tests := []struct {
		method, path string
		status       int
		contains     string
	}{
		{"GET", "/board/", 200, `data-market=""`},
		{"GET", "/board/b", 200, `data-market="b"`},
		{"GET", "/board/zz", 404, ""},
		{"GET", "/board/static/board.js", 200, "EventSource"},
		{"GET", "/board/static/board.css", 200, "--no_signal"},
		{"GET", "/board/static/missing.js", 404, ""},
		{"POST", "/board/", 405, ""},
		{"POST", "/board/events", 405, ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.contains) {
			t.Errorf("%s %s: %s, body contains %q: %v", tt.method, tt.path, resp.Status, tt.contains, strings.Contains(string(body), tt.contains))
		}
	}
	// No asset from elsewhere: the page must work on a box with no internet.
	for _, p := range []string{"/board/", "/board/static/board.js", "/board/static/board.css"} {
		resp, _ := http.Get(srv.URL + p)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "http://") || strings.Contains(string(body), "https://") {
			t.Errorf("%s refers to an external URL", p)
		}
	}
}

func TestHub_MarketStatusAndRates(t *testing.T) {
	var calls int64 // the hub goroutine is the only reader and writer
	h := newHub(t, func(c *Config) {
		c.Markets = []Market{{Name: "a", Status: func() Status {
			calls++
			return Status{MQTT: true, NATS: false, Watermark: 990_000, HasWatermark: true,
				Received: calls * 100, Late: calls * 10, Rejected: calls}
		}, Timezone: "Europe/Madrid"}, {Name: "b"}}
		// One second of clock per sample: 100 received, 10 late and 1
		// rejected per second.
		c.Now = func() time.Time { return time.UnixMilli(1_000_000 + calls*1000) }
	})
	s := openStream(t, serve(t, h).URL+"/board/events")
	var m MarketUpdate
	for range 5 {
		_, u := s.next(t)
		m = u.Markets[0]
	}
	if !m.MQTT || m.NATS || m.LagMS == nil || *m.LagMS < 10_000 {
		t.Errorf("market %+v", m)
	}
	if m.ReceivedPerS != 100 || m.LatePerS != 10 || m.RejectedPerS != 1 {
		t.Errorf("rates %v %v %v, want 100 10 1", m.ReceivedPerS, m.LatePerS, m.RejectedPerS)
	}
	_, u := s.next(t)
	if tz := []string{u.Markets[0].Timezone, u.Markets[1].Timezone}; tz[0] != "Europe/Madrid" || tz[1] != "UTC" {
		t.Errorf("time zones %q, want Europe/Madrid and UTC (none set)", tz)
	}
}

func TestFeed_PositionDoesNotAllocate(t *testing.T) {
	h := newHub(t, nil)
	f := h.Feed("a")
	id := []byte("courier-1")
	var ts int64
	if n := testing.AllocsPerRun(1000, func() { ts++; f.Position(id, ts, 1, 2) }); n != 0 {
		t.Errorf("Position allocates %v times", n)
	}
}

func BenchmarkFeed_Position(b *testing.B) {
	h := newHub(b, func(c *Config) { c.Mailbox = 1 << 16 })
	f := h.Feed("a")
	ids := make([][]byte, 2000)
	for i := range ids {
		ids[i] = fmt.Appendf(nil, "courier-%04d", i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		f.Position(ids[i%len(ids)], int64(i), 41.9, 2.8)
	}
}

func TestAppendString(t *testing.T) {
	for in, want := range map[string]string{
		"van-3": `"van-3"`, `a"b\c`: `"a\"b\\c"`, "\n<&>": `"\u000a\u003c\u0026\u003e"`, "": `""`,
	} {
		if got := string(appendString(nil, in)); got != want {
			t.Errorf("appendString(%q) = %s, want %s", in, got, want)
		}
	}
}

// The hub's work per update at 2 000 couriers: encoding the message of
// every courier (a snapshot, or the diff when every window fires at once).
func BenchmarkEncode2000(b *testing.B) {
	st := &state{cfg: Config{Markets: []Market{{Name: "a"}}, Interval: time.Second}, markets: make([]marketView, 1)}
	cs := make([]*courier, 2000)
	for i := range cs {
		cs[i] = &courier{id: fmt.Sprintf("courier-%04d", i), place: where.Place{Lat: 41.9 + float64(i)*1e-5, Lon: 2.8 + float64(i)*1e-5,
			TS: 1726308298000 + int64(i)}, hasDist: true, dist: float64(i), distEnd: 1726308298000}
	}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		b.SetBytes(int64(len(st.encode(-1, now, cs, nil, true))))
	}
}

// A forgotten courier leaves the board: the next update says it is gone,
// later snapshots do not have it, and it may come back.
func TestHub_Forget(t *testing.T) {
	h := newHub(t, func(c *Config) { c.MaxCouriers = 2 })
	f := h.Feed("a")
	f.Position([]byte("c1"), 10, 1, 1)
	f.Position([]byte("c2"), 10, 2, 2)
	srv := serve(t, h)
	s := openStream(t, srv.URL+"/board/events")
	if _, u := s.next(t); len(u.Couriers) != 2 || len(u.Gone) != 0 {
		t.Fatalf("snapshot %+v", u)
	}
	f.Forget("c1")
	f.Forget("nobody")
	f.Position([]byte("c3"), 10, 3, 3) // room again under MaxCouriers
	var gone []string
	seen := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for !seen["c3"] && time.Now().Before(deadline) {
		_, u := s.next(t)
		gone = append(gone, u.Gone...)
		for _, c := range u.Couriers {
			seen[c.ID] = true
		}
	}
	if fmt.Sprint(gone) != "[c1]" || seen["c1"] || !seen["c3"] {
		t.Errorf("gone %v, couriers seen %v; want c1 gone and c3 added", gone, seen)
	}
	_, u := openStream(t, srv.URL+"/board/events").next(t)
	ids := []string{}
	for _, c := range u.Couriers {
		ids = append(ids, c.ID)
	}
	if fmt.Sprint(ids) != "[c2 c3]" || len(u.Gone) != 0 {
		t.Errorf("snapshot after forget: %v, gone %v", ids, u.Gone)
	}
	// Back: forgotten and seen again within one update, it is in both
	// lists, gone first.
	f.Forget("c2")
	f.Position([]byte("c2"), 20, 5, 5)
	got := s.until(t, 5*time.Second, func(m map[string]CourierUpdate) bool { return m["c2"].TS == 20 })
	if got["c2"].Lat != 5 {
		t.Errorf("c2 after coming back: %+v", got["c2"])
	}
	if st := h.Stats(); st.Couriers != 2 || st.Refused != 0 {
		t.Errorf("stats %+v, want 2 couriers, none refused", st)
	}
}

// Forgetting many couriers keeps the snapshot order compact and right.
func TestHub_ForgetCompacts(t *testing.T) {
	h := newHub(t, nil)
	f := h.Feed("a")
	for i := range 100 {
		f.Position(fmt.Appendf(nil, "c%03d", i), 10, 1, 1)
	}
	for i := range 100 {
		if i%3 != 0 { // two in three: past half, the order is compacted
			f.Forget(fmt.Sprintf("c%03d", i))
		}
	}
	f.Position([]byte("c001"), 11, 1, 1) // back, at the end
	_, u := openStream(t, serve(t, h).URL+"/board/events").next(t)
	var want []string
	for i := 0; i < 100; i += 3 {
		want = append(want, fmt.Sprintf("c%03d", i))
	}
	want = append(want, "c001")
	var got []string
	for _, c := range u.Couriers {
		got = append(got, c.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("snapshot %v, want %v", got, want)
	}
	if n := h.Stats().Couriers; n != len(want) {
		t.Errorf("Stats.Couriers %d, want %d", n, len(want))
	}
}

// A market is watched while a page shows it, its own or the all-markets
// page, and unwatched once none does.
func TestFeed_WatchedWhileAPageShowsTheMarket(t *testing.T) {
	h := newHub(t, nil)
	srv := serve(t, h)
	a, b := h.Feed("a"), h.Feed("b")
	isClosed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	wait := func(what string, c func() <-chan struct{}) {
		t.Helper()
		select {
		case <-c():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not within 10 s", what)
		}
	}
	if isClosed(a.Watched()) || !isClosed(a.Unwatched()) {
		t.Fatal("market a watched with no page")
	}
	ctx, closePageA := context.WithCancel(context.Background())
	defer closePageA()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/board/events?market=a", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wait("a watched with its page open", a.Watched)
	if isClosed(a.Unwatched()) {
		t.Error("a unwatched with its page open")
	}
	if isClosed(b.Watched()) {
		t.Error("b watched with only a's page open")
	}
	all := openStream(t, srv.URL+"/board/events")
	all.next(t)
	wait("b watched with the all-markets page open", b.Watched)
	closePageA()
	all.resp.Body.Close()
	wait("a unwatched once its pages closed", a.Unwatched)
	wait("b unwatched once its pages closed", b.Unwatched)
	if isClosed(a.Watched()) || isClosed(b.Watched()) {
		t.Error("watched once every page closed")
	}
	var nilFeed *Feed
	if nilFeed.Watched() != nil || !isClosed(nilFeed.Unwatched()) {
		t.Error("a nil Feed is watched")
	}
}

// With no page connected the hub drains its mailbox every Interval, not
// every DrainEvery, and as soon as it is half full: a burst of a
// mailbox's worth of events loses nothing, however long Interval is.
func TestHub_UnwatchedDrainsAHalfFullMailbox(t *testing.T) {
	h := newHub(t, func(c *Config) { c.Mailbox, c.DrainEvery, c.Interval = 64, time.Millisecond, time.Hour })
	f := h.Feed("a")
	for i := range 32 {
		f.Position(fmt.Appendf(nil, "c%d", i), 10, 1, 1)
	}
	testenv.WaitFor(t, 10*time.Second, "the half-full mailbox drained", func() bool { return h.Stats().Couriers == 32 })
	f.Position([]byte("late"), 10, 1, 1)                           // below half: waits for Interval (or a page)
	_, u := openStream(t, serve(t, h).URL+"/board/events").next(t) // joining drains the mailbox
	if len(u.Couriers) != 33 || h.Stats().Dropped != 0 {
		t.Errorf("snapshot has %d couriers and %d dropped, want 33 and none", len(u.Couriers), h.Stats().Dropped)
	}
}
