package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/daily"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/service"
)

// boardFleet publishes a small live fleet: every courier every period,
// event time on the clock, a third of them still and the others moving
// east; silent stops after silentAfter.
type boardFleet struct {
	couriers    int
	period      time.Duration
	silent      string
	silentAfter time.Duration

	mu       sync.Mutex
	lastSeen time.Time // when silent published its last position
}

func (f *boardFleet) id(i int) string { return fmt.Sprintf("c-%02d", i) }

// run publishes until ctx ends.
func (f *boardFleet) run(ctx context.Context, tb testing.TB, pub *testenv.Publisher, market string) {
	start := time.Now()
	t := time.NewTicker(f.period)
	defer t.Stop()
	for step := 0; ; step++ {
		now := time.Now()
		for i := range f.couriers {
			id := f.id(i)
			if id == f.silent && now.Sub(start) >= f.silentAfter {
				continue
			}
			lat := 41.96 + float64(i%6)*0.006
			lon := 2.80 + float64(i/6)*0.006 + float64(step)*0.00004*float64(i%3) // 0, 3.3 or 6.6 m a step
			p := fmt.Sprintf(`{"courier":%q,"lat":%.6f,"lon":%.6f,"timestamp_ms":%d}`, id, lat, lon, now.UnixMilli())
			if err := pub.Publish(ctx, "km0/"+market+"/positions/"+id, []byte(p)); err != nil {
				return // ctx ended
			}
			if id == f.silent {
				f.mu.Lock()
				f.lastSeen = now
				f.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (f *boardFleet) silentSince() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastSeen
}

var boardPNG = flag.String("board.png", "", "also write the fleet board's screenshot to this file (e.g. ../docs/board.png)")

// The fleet board in a real headless Chromium against the live service:
// the page loads with no console error, draws every courier of the fleet,
// turns a courier that goes silent to no-signal once its gap has passed
// (not before), and its event stream agrees with the courier bucket and
// the distance results, the side of the service area included: the
// couriers north of it, first seen there, are outside on both.
func TestBoard_LiveFleetInChromium(t *testing.T) {
	const market = "brd"
	mq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	cfg := mustConfig(t, market, mq.URL(), ns.URL())
	cfg.Windows.Size, cfg.Windows.Slide, cfg.Windows.Gap = 2*time.Second, time.Second, 3*time.Second
	cfg.Windows.ToleratedDelay = 0
	cfg.Distance.MinMoveM, cfg.Distance.StoppedBelowM = 0, 20
	// The bucket is written at most once per courier per kv_interval: short,
	// so that it has settled when the comparison below runs.
	cfg.NATS.KVInterval = 300 * time.Millisecond
	// South of lat 41.975: the fleet's rows at 41.96 and 41.966 inside,
	// 41.984 and 41.99 outside (41.972 and 41.978 in the border band).
	area, err := geo.ParseArea("south", []byte(`{"type":"Polygon","coordinates":[[[2.7,41.9],[2.9,41.9],[2.9,41.975],[2.7,41.975],[2.7,41.9]]]}`), geo.AreaResolution)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Geo.ServiceArea, cfg.Geo.Area = "south", area
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := startService(t, []config.Config{cfg}, service.Deps{Shards: 2})
	base := "http://" + (<-r.addr).String()

	br := testenv.StartChromium(t, 1280, 800)
	br.Do(t, 20*time.Second, chromedp.Navigate(base+"/board/"))

	fl := &boardFleet{couriers: 30, period: 250 * time.Millisecond, silent: "c-07", silentAfter: 1500 * time.Millisecond}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	fleetDone := make(chan struct{})
	pub := mq.Publisher(t, "board-fleet")
	go func() {
		defer close(fleetDone)
		fl.run(ctx, t, pub, market)
	}()

	// Every courier drawn, as the page's own count of what it drew.
	br.Wait(t, 15*time.Second, fmt.Sprintf(`document.getElementById("map").dataset.drawn == %d`, fl.couriers),
		`document.getElementById("map").dataset.drawn`)

	// The silent courier: online until its gap has passed, then no_signal
	// within the pipeline's delay (one position period for the watermark
	// to pass it, one board interval, one frame) plus slack for a loaded
	// machine.
	var turned time.Duration
	deadline := time.Now().Add(15 * time.Second)
	for {
		since := fl.silentSince()
		st := testenv.Eval[string](t, br, `String(window.board.stateOf("c-07"))`)
		if st == "no_signal" && !since.IsZero() {
			turned = time.Since(since)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c-07 still %q %v after its last position", st, time.Since(since))
		}
		time.Sleep(50 * time.Millisecond)
	}
	gap := cfg.Windows.Gap
	if turned < gap-200*time.Millisecond || turned > gap+3*time.Second {
		t.Errorf("c-07 turned no_signal %v after its last position, want between %v and %v", turned, gap, gap+3*time.Second)
	}
	t.Logf("c-07 shown as no_signal %v after its last position (gap %v)", turned, gap)
	if n := testenv.Eval[int](t, br, `document.getElementById("map").dataset.drawn_no_signal|0`); n != 1 {
		t.Errorf("%d couriers drawn as no_signal, want 1", n)
	}
	if row := testenv.Eval[string](t, br, `document.querySelector("#nosignal tbody").textContent`); !strings.Contains(row, "c-07") {
		t.Errorf("no-signal list %q does not name c-07", row)
	}
	if errs := br.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}

	png := br.Screenshot(t)
	writeArtifact(t, "board.png", png)
	if *boardPNG != "" {
		if err := os.WriteFile(*boardPNG, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	stop()
	<-fleetDone
	pub.Close()
	// The stream, once both settle, holds exactly the bucket's state and
	// the latest distance result of each courier.
	u := compareBoardWithBucket(t, base, ns, market, fl.couriers)
	for i, c := range u.Couriers {
		row := 0
		fmt.Sscanf(c.ID, "c-%d", &row)
		if row %= 6; row == 5 && !c.Outside || row == 0 && c.Outside {
			t.Errorf("courier %d %s on row %d (lat %v): outside %v", i, c.ID, row, c.Lat, c.Outside)
		}
	}

	// Open pages (the browser's and this one) do not hold up a graceful
	// shutdown: their streams end when the listener closes.
	resp, err := http.Get(base + "/board/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	st := board.NewStream(resp.Body)
	if _, _, err := st.Next(); err != nil {
		t.Fatal(err)
	}
	r.stop(t, 4*time.Second) // Run must return nil: no server shutdown timed out
	for {
		if _, _, err := st.Next(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("stream ended with %v, want EOF", err)
			}
			break
		}
	}
}

func writeArtifact(tb testing.TB, name string, data []byte) {
	tb.Helper()
	dir := tb.(*testing.T).ArtifactDir()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("artifact %s (%d bytes)", p, len(data))
}

// compareBoardWithBucket requires, within a few KV intervals, that a fresh
// snapshot of the board's event stream holds every courier of the bucket
// with its position, timestamp, status and side of the service area, and
// that each courier's distance is the one of its latest distance result on
// the stream. It returns that snapshot.
func compareBoardWithBucket(tb testing.TB, base string, ns *testenv.NATS, market string, couriers int) board.Update {
	tb.Helper()
	lastDist := map[string]struct {
		end  int64
		dist float64
	}{}
	for _, m := range testenv.ReadStream(tb, ns.URL(), "EDGEPROC_"+strings.ToUpper(market)) {
		var r struct {
			Type    string  `json:"type"`
			Courier string  `json:"courier"`
			End     int64   `json:"window_end_ms"`
			Dist    float64 `json:"distance_m"`
		}
		if err := json.Unmarshal(m.Data, &r); err != nil {
			tb.Fatal(err)
		}
		if r.Type == "distance" && r.End >= lastDist[r.Courier].end {
			lastDist[r.Courier] = struct {
				end  int64
				dist float64
			}{r.End, r.Dist}
		}
	}
	if len(lastDist) == 0 {
		tb.Fatal("no distance result on the stream: the comparison proves nothing")
	}

	nc := ns.Connect(tb)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	var diffs []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		kv := readBucket(tb, js, "edgeproc_couriers_"+market)
		u := boardSnapshot(tb, base)
		diffs = diffs[:0]
		seen := map[string]bool{}
		for _, c := range u.Couriers {
			seen[c.ID] = true
			k, ok := kv[c.ID]
			switch {
			case !ok:
				diffs = append(diffs, c.ID+": on the board, not in the bucket")
				continue
			case k.Lat != c.Lat || k.Lon != c.Lon || k.TS != c.TS:
				diffs = append(diffs, fmt.Sprintf("%s: board %v,%v@%d, bucket %v,%v@%d", c.ID, c.Lat, c.Lon, c.TS, k.Lat, k.Lon, k.TS))
			case (k.Status == bridge.StatusNoSignal) != (c.State == board.NoSignal):
				diffs = append(diffs, fmt.Sprintf("%s: board %v, bucket %s", c.ID, c.State, k.Status))
			case (k.Area == bridge.AreaOutside) != c.Outside:
				diffs = append(diffs, fmt.Sprintf("%s: board outside %v, bucket area %q", c.ID, c.Outside, k.Area))
			}
			if d, ok := lastDist[c.ID]; ok != c.HasDistance || (ok && (d.end != c.WindowEnd || math.Abs(d.dist-c.DistanceM) > 0.05)) {
				diffs = append(diffs, fmt.Sprintf("%s: board distance %v (%v) to %d, stream %+v", c.ID, c.DistanceM, c.HasDistance, c.WindowEnd, d))
			}
		}
		for id := range kv {
			if !seen[id] {
				diffs = append(diffs, id+": in the bucket, not on the board")
			}
		}
		if len(diffs) == 0 {
			if len(kv) != couriers {
				tb.Errorf("%d couriers in the bucket, want %d", len(kv), couriers)
			}
			outside := 0
			for _, k := range kv {
				if k.Area == bridge.AreaOutside {
					outside++
				}
			}
			tb.Logf("board agrees with the bucket (%d couriers, %d outside the service area) and the stream (%d with a distance)", len(kv), outside, len(lastDist))
			return u
		}
		if time.Now().After(deadline) {
			tb.Fatalf("board and bucket disagree: %q", diffs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func readBucket(tb testing.TB, js jetstream.JetStream, bucket string) map[string]bridge.CourierState {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		tb.Fatalf("bucket %s: %v", bucket, err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]bridge.CourierState{}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			tb.Fatal(err)
		}
		var cs bridge.CourierState
		if err := json.Unmarshal(e.Value(), &cs); err != nil {
			tb.Fatal(err)
		}
		out[cs.Courier] = cs
	}
	return out
}

// boardSnapshot reads the first message of a new event stream.
func boardSnapshot(tb testing.TB, base string) board.Update {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/board/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	u, _, err := board.NewStream(resp.Body).Next()
	if err != nil || !u.Full {
		tb.Fatalf("first message %v, full %v", err, u.Full)
	}
	return u
}

// http.board: false serves no board; the operations endpoints stay.
func TestBoard_Off(t *testing.T) {
	mq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	cfg := mustConfig(t, "off", mq.URL(), ns.URL())
	cfg.HTTP.Board = false
	r := startService(t, []config.Config{cfg}, service.Deps{})
	base := "http://" + (<-r.addr).String()
	for path, want := range map[string]int{"/board/": 404, "/board/events": 404, "/healthz": 200} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %s, want %d", path, resp.Status, want)
		}
	}
}

// A market with lake.dir shows, on the live service's board in a real
// headless Chromium, yesterday's greatest distances from the table
// edgeproc daily wrote for the market's previous day (in its time zone).
func TestBoard_YesterdayInChromium(t *testing.T) {
	const market = "yday"
	mq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	cfg := mustConfig(t, market, mq.URL(), ns.URL())
	cfg.Lake.Dir, cfg.Timezone = t.TempDir(), "Europe/Madrid"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	yesterday := daily.Yesterday(time.Now(), cfg.Location())
	recs := []daily.Record{
		{Courier: "van-1", DistanceM: 81234.5, Positions: 1438},
		{Courier: "van-2", DistanceM: 120456.7, Positions: 2051},
		{Courier: "van-3", DistanceM: 4321, Positions: 97},
	}
	path := daily.TablePath(cfg.Lake.Dir, market, yesterday)
	if _, err := lake.WriteFileAtomic(path, func(w io.Writer) error { return daily.WriteParquet(w, recs, true) }); err != nil {
		t.Fatal(err)
	}
	r := startService(t, []config.Config{cfg}, service.Deps{})
	base := "http://" + (<-r.addr).String()

	br := testenv.StartChromium(t, 1280, 800)
	br.Do(t, 20*time.Second, chromedp.Navigate(base+"/board/"+market))
	br.Wait(t, 15*time.Second, `document.querySelectorAll("#daily-0 tbody tr").length == 3`, `document.getElementById("daily-list").innerText`)
	rows := testenv.Eval[[][]string](t, br, `[...document.querySelectorAll("#daily-0 tbody tr")].map(r => [...r.cells].map(c => c.textContent))`)
	if want := `[[van-2 120.5 2051] [van-1 81.2 1438] [van-3 4.3 97]]`; fmt.Sprint(rows) != want {
		t.Errorf("yesterday's list %q, want %s", rows, want)
	}
	summary := testenv.Eval[string](t, br, `document.querySelector("#daily-list .summary").textContent`)
	if !strings.Contains(summary, yesterday+": 3 couriers, 206.0 km in all; top 3:") {
		t.Errorf("yesterday's summary %q, want it to name %s and its figures", summary, yesterday)
	}
	if errs := br.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
}
