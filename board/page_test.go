package board

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/uber/h3-go/v4"

	"github.com/km0/edgeproc/daily"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/result"
)

// With a tile URL template the page draws the tiles under the couriers:
// in a real headless Chromium it asks a local tile server for the tile
// that holds them, at the zoom it shows, and reports no error.
func TestPage_TilesInChromium(t *testing.T) {
	var tile bytes.Buffer
	img := image.NewGray(image.Rect(0, 0, 256, 256))
	for i := range img.Pix {
		img.Pix[i] = 40
	}
	img.Set(0, 0, color.Gray{Y: 90})
	if err := png.Encode(&tile, img); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	asked := map[[3]int]bool{}
	tiles := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var z, x, y int
		if _, err := fmt.Sscanf(r.URL.Path, "/%d/%d/%d.png", &z, &x, &y); err != nil {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		asked[[3]int{z, x, y}] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(tile.Bytes())
	}))
	defer tiles.Close()

	h := newHub(t, func(c *Config) { c.Tiles = tiles.URL + "/{z}/{x}/{y}.png"; c.Now = time.Now })
	f := h.Feed("a")
	pos := [][2]float64{{41.9794, 2.8214}, {41.9820, 2.8250}, {41.9760, 2.8190}}
	for i, p := range pos {
		f.Position(fmt.Appendf(nil, "c%d", i), 10, p[0], p[1])
	}
	srv := serve(t, h)
	br := testenv.StartChromium(t, 1024, 700)
	br.Do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/board/a"))
	br.Wait(t, 15*time.Second, `document.getElementById("map").dataset.drawn == 3`, `document.getElementById("map").dataset.drawn`)
	deadline := time.Now().Add(15 * time.Second)
	// The tile of the first courier, at every zoom the page asked for.
	covered := func() (bool, int) {
		mu.Lock()
		defer mu.Unlock()
		for k := range asked {
			z, n := k[0], math.Exp2(float64(k[0]))
			x := int((pos[0][1] + 180) / 360 * n)
			s := math.Sin(pos[0][0] * math.Pi / 180)
			y := int((0.5 - math.Log((1+s)/(1-s))/(4*math.Pi)) * n)
			if asked[[3]int{z, x, y}] {
				return true, len(asked)
			}
		}
		return false, len(asked)
	}
	for {
		ok, n := covered()
		if ok {
			t.Logf("%d tiles asked for", n)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tile asked for covers the couriers (%d asked)", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if errs := br.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
}

// The dead-zone layer in a real headless Chromium: one dead zone is one
// hexagon on the map, hovering it tells its figures, and the legend's
// toggle hides it and shows it again.
func TestPage_DeadZoneInChromium(t *testing.T) {
	h := newHub(t, func(c *Config) { c.Now = time.Now })
	f := h.Feed("a")
	f.Position([]byte("c1"), 10, 41.995, 2.845) // ~2.5 km off: the hover is the zone's
	cell := h3.LatLngToCell(h3.LatLng{Lat: 41.9794, Lng: 2.8214}, 8)
	f.Result(&result.Record{Type: result.DeadZone, Start: t0 - hourMS, End: t0, Cell: cell,
		Zone: &result.Zone{Warnings: 3, Couriers: 2, Restored: 2, SilenceMs: 130_000, LongestMs: 90_000}})
	srv := serve(t, h)
	br := testenv.StartChromium(t, 1024, 700)
	br.Do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/board/a"))
	const polygon = `document.querySelector("#zones polygon")`
	br.Wait(t, 15*time.Second, `document.querySelectorAll("#zones polygon").length == 1 && document.getElementById("zones").dataset.drawn == 1 && document.getElementById("map").dataset.drawn == 1`,
		`document.querySelectorAll("#zones polygon").length + " polygons, drawn " + document.getElementById("zones").dataset.drawn`)
	if n := testenv.Eval[int](t, br, polygon+`.points.numberOfItems`); n != 6 {
		t.Errorf("the dead zone's polygon has %d points, want a hexagon's 6", n)
	}
	if class := testenv.Eval[string](t, br, polygon+`.getAttribute("class")`); class != "z2" {
		t.Errorf("the polygon of 3 warnings has class %q, want z2 (2–4)", class)
	}
	// The polygon's centre on the page, which must be the polygon itself
	// (drawn there, and on top).
	at := testenv.Eval[[]float64](t, br, `(() => { const r = `+polygon+`.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()`)
	x, y := at[0], at[1]
	under := fmt.Sprintf(`document.elementFromPoint(%v, %v) === %s`, x, y, polygon)
	if !testenv.Eval[bool](t, br, under) {
		t.Fatalf("the polygon's centre (%.0f, %.0f) is not on the polygon: %s", x, y,
			testenv.Eval[string](t, br, fmt.Sprintf(`String(document.elementFromPoint(%v, %v))`, x, y)))
	}
	br.Do(t, 5*time.Second, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x, y))
	want := "dead zone " + cell.String() + " (a)\n" +
		"3 warnings: 1 open, 2 restored\n" +
		"2 couriers\n" +
		"mean silence 1 min 5 s, longest 1 min 30 s\n" +
		"1 window: 2024-09-14 12:00 – 13:00 UTC"
	br.Wait(t, 5*time.Second, `!document.getElementById("tip").hidden`, `document.getElementById("tip").hidden`)
	if got := testenv.Eval[string](t, br, `document.getElementById("tip").textContent`); got != want {
		t.Errorf("hover text %q, want %q", got, want)
	}

	br.Do(t, 5*time.Second, chromedp.Click(chromedp.ID("zones-toggle")))
	br.Wait(t, 5*time.Second, `!`+polygon+`.checkVisibility() && document.getElementById("zones").dataset.drawn == 0 && !(`+under+`)`,
		`document.getElementById("zones").dataset.drawn`)
	if !testenv.Eval[bool](t, br, `document.getElementById("map").dataset.drawn == 1`) {
		t.Error("hiding the dead zones hid the courier")
	}
	br.Do(t, 5*time.Second, chromedp.Click(chromedp.ID("zones-toggle")))
	br.Wait(t, 5*time.Second, polygon+`.checkVisibility() && `+under, `document.getElementById("zones").dataset.drawn`)
	if errs := br.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
}

// The service area in a real headless Chromium: the outline is one path
// of two rings (the square and its hole) with the legend's entry, and the
// courier a left_area moved out has the outside ring and says since when
// on hover; the courier inside has neither.
func TestPage_ServiceAreaInChromium(t *testing.T) {
	area := mustLoadArea(t, squareHole)
	edges := newOutline(area, DefaultMaxAreaEdges).edges
	h := newHub(t, func(c *Config) { c.Now = time.Now; c.Markets[0].Area = area })
	f := h.Feed("a")
	// South of the legend, which is over the map's top left.
	f.Position([]byte("out"), t0-40*60_000, 41.77, 2.75)  // 3 km south of the area
	f.Position([]byte("in"), t0-40*60_000, 41.815, 2.785) // in its south-east corner
	f.Result(&result.Record{Type: result.LeftArea, Courier: "out", TS: t0 - 50*60_000, Lat: 41.79, Lon: 2.75})
	f.Result(&result.Record{Type: result.EnteredArea, Courier: "in", TS: t0 - 45*60_000, Lat: 41.815, Lon: 2.785})
	srv := serve(t, h)
	br := testenv.StartChromium(t, 1024, 700)
	br.Do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/board/a"))
	const path = `document.querySelector("#area path")`
	br.Wait(t, 15*time.Second, fmt.Sprintf(`document.querySelectorAll("#area path").length == 1 && document.getElementById("area").dataset.edges == %d && document.getElementById("map").dataset.drawn == 2 && document.getElementById("map").dataset.drawn_outside == 1`, edges),
		`document.querySelectorAll("#area path").length + " paths, " + document.getElementById("area").dataset.edges + " edges, drawn " + document.getElementById("map").dataset.drawn + ", outside " + document.getElementById("map").dataset.drawn_outside`)
	if n := testenv.Eval[int](t, br, path+`.getAttribute("d").split("M").length - 1`); n != 2 {
		t.Errorf("the outline's path has %d rings, want 2 (the square and its hole)", n)
	}
	// Drawn, and on the map: its box within the canvas, most of it.
	box := testenv.Eval[[]float64](t, br, `(() => { const r = `+path+`.getBoundingClientRect(), m = document.getElementById("map").getBoundingClientRect();
		return [r.left - m.left, r.top - m.top, r.right - m.left, r.bottom - m.top, m.width, m.height]; })()`)
	if box[0] < 0 || box[1] < 0 || box[2] > box[4] || box[3] > box[5] || box[2]-box[0] < box[4]/4 && box[3]-box[1] < box[5]/4 {
		t.Errorf("the outline's box %v is not well within the map's %v × %v", box[:4], box[4], box[5])
	}
	if !testenv.Eval[bool](t, br, path+`.checkVisibility() && document.getElementById("area-legend").checkVisibility() && document.getElementById("n-outside").textContent == "1"`) {
		t.Errorf("outline or legend not shown: legend %q", testenv.Eval[string](t, br, `document.getElementById("area-legend").textContent`))
	}
	hover := func(id string) string {
		at := testenv.Eval[[]float64](t, br, `(() => { const p = window.board.pointOf("`+id+`"), m = document.getElementById("map").getBoundingClientRect(); return [m.left + p[0], m.top + p[1]]; })()`)
		br.Do(t, 5*time.Second, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at[0], at[1]))
		br.Wait(t, 5*time.Second, `!document.getElementById("tip").hidden && document.getElementById("tip").textContent.startsWith("`+id+` ")`, `document.getElementById("tip").textContent`)
		return testenv.Eval[string](t, br, `document.getElementById("tip").textContent`)
	}
	if got, want := hover("out"), "out · unknown\noutside the service area since 2024-09-14 12:10:00 ("; !strings.HasPrefix(got, want) {
		t.Errorf("hover text %q, want it to begin %q", got, want)
	}
	if got := hover("in"); strings.Contains(got, "outside") {
		t.Errorf("hover text of the courier inside %q", got)
	}
	if errs := br.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
}

// What a dispatcher reads, in a real headless Chromium: who is stopped
// and since when, who is silent, who is outside the service area (one
// first seen there, one moved out), in the market's time zone on a
// 24-hour clock with the age; a search by id centres the map on the
// courier, labels it and opens its details, the only place with
// coordinates; hovering a courier labels it; dead zones under the
// legend's threshold are hidden until it is lowered; the board's own
// counters wait in a closed footer.
func TestPage_DispatcherInChromium(t *testing.T) {
	madrid, err := time.LoadLocation("Europe/Madrid")
	if err != nil {
		t.Fatal(err)
	}
	area := mustLoadArea(t, squareHole)
	h := newHub(t, func(c *Config) {
		c.Now = time.Now
		c.Markets[0].Area, c.Markets[0].Timezone = area, "Europe/Madrid"
	})
	f := h.Feed("a")
	now := time.Now().UnixMilli()
	const minute = 60_000
	pos := func(id string, ts int64, lat, lon float64) { f.Position([]byte(id), ts, lat, lon) }
	dist := func(id string, start int64, stopped bool) {
		f.Result(&result.Record{Type: result.Distance, Courier: id, Start: start, End: start + minute, DistanceM: 20, Stopped: stopped})
	}
	pos("c-moving", now-5_000, 41.815, 2.785)
	dist("c-moving", now-2*minute, false)
	pos("c-stopped", now-10_000, 41.885, 2.715)
	dist("c-stopped", now-4*minute-30_000, true) // stopped since 4 min 30 s ago
	dist("c-stopped", now-3*minute, true)        // still stopped: since stays
	pos("c-stopped2", now-10_000, 41.815, 2.715)
	dist("c-stopped2", now-2*minute-30_000, true)
	pos("c-silent", now-90_000, 41.885, 2.785)
	f.Result(&result.Record{Type: result.NoSignal, Courier: "c-silent", Start: now - 5*minute, End: now - 90_000, Lat: 41.885, Lon: 2.785})
	pos("c-first-out", now-6*minute, 41.77, 2.74)
	f.Side("c-first-out", now-6*minute, true) // first seen outside: no left_area
	pos("c-left", now-20_000, 41.77, 2.76)
	f.Result(&result.Record{Type: result.LeftArea, Courier: "c-left", TS: now - minute, Lat: 41.79, Lon: 2.76})
	pos("c-old", t0+5*minute, 41.86, 2.79) // 2024-09-14 13:05 UTC: 15:05 in Madrid
	cell := func(lat, lon float64) h3.Cell { return h3.LatLngToCell(h3.LatLng{Lat: lat, Lng: lon}, 8) }
	f.Result(&result.Record{Type: result.DeadZone, Start: t0 - hourMS, End: t0, Cell: cell(41.85, 2.72), Zone: &result.Zone{Warnings: 1, Couriers: 1}})
	f.Result(&result.Record{Type: result.DeadZone, Start: t0 - hourMS, End: t0, Cell: cell(41.81, 2.76), Zone: &result.Zone{Warnings: 5, Couriers: 3, Restored: 5}})

	srv := serve(t, h)
	br := testenv.StartChromium(t, 1280, 800)
	br.Do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/board/a"))
	br.Wait(t, 15*time.Second, `document.getElementById("map").dataset.drawn == 7 && document.querySelectorAll("#stopped tbody tr").length == 2`,
		`document.getElementById("map").dataset.drawn + " drawn, " + document.getElementById("stopped").innerText`)

	clock := func(ms int64) string { return time.UnixMilli(ms).In(madrid).Format("15:04:05") }
	rows := func(table string) [][]string {
		return testenv.Eval[[][]string](t, br, `[...document.querySelectorAll("#`+table+` tbody tr")].map(r => [r.dataset.id || "", ...[...r.cells].map(c => c.textContent)])`)
	}
	// id, courier, since, for
	check := func(table string, want [][]string) {
		t.Helper()
		if got := rows(table); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s list %q, want %q", table, got, want)
		}
	}
	check("stopped", [][]string{
		{"c-stopped", "c-stopped", clock(now - 4*minute - 30_000), "4 min"},
		{"c-stopped2", "c-stopped2", clock(now - 2*minute - 30_000), "2 min"},
	})
	check("outside", [][]string{
		{"c-first-out", "c-first-out", clock(now - 6*minute), "6 min"},
		{"c-left", "c-left", clock(now - minute), "1 min"},
	})
	check("nosignal", [][]string{{"c-silent", "c-silent", clock(now - 90_000), "1 min"}})
	counts := testenv.Eval[[]string](t, br, `["st-count", "out-count", "ns-count", "n-outside", "n-stopped"].map(id => document.getElementById(id).textContent)`)
	if fmt.Sprint(counts) != "[2 2 1 2 2]" {
		t.Errorf("counts stopped, outside, silent, legend outside, legend stopped: %q, want [2 2 1 2 2]", counts)
	}
	if n := testenv.Eval[int](t, br, `window.board.outside()`); n != 2 {
		t.Errorf("%d couriers drawn with the outside ring, want 2 (c-first-out and c-left)", n)
	}
	// No coordinates in the lists.
	if txt := testenv.Eval[string](t, br, `document.querySelector("aside").innerText`); regexp.MustCompile(`\d\.\d{4}`).MatchString(txt) {
		t.Errorf("the side panel shows coordinates with no courier selected:\n%s", txt)
	}

	// Hover: a label that starts with the courier's id.
	hoverAt := func(id string) string {
		t.Helper()
		at := testenv.Eval[[]float64](t, br, `(() => { const p = window.board.pointOf("`+id+`"), m = document.getElementById("map").getBoundingClientRect(); return [m.left + p[0], m.top + p[1]]; })()`)
		br.Do(t, 5*time.Second, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at[0], at[1]))
		br.Wait(t, 5*time.Second, `!document.getElementById("tip").hidden && document.getElementById("tip").textContent.startsWith("`+id+` ")`, `document.getElementById("tip").textContent`)
		return testenv.Eval[string](t, br, `document.getElementById("tip").textContent`)
	}
	if got, want := hoverAt("c-stopped"), "c-stopped · stopped\nstopped since "+clock(now-4*minute-30_000)+" (4 min ago)\n"; !strings.HasPrefix(got, want) {
		t.Errorf("hover text %q, want it to begin %q", got, want)
	}
	if got, want := hoverAt("c-old"), "c-old · unknown\nlast position 2024-09-14 15:05:00 ("; !strings.HasPrefix(got, want) {
		t.Errorf("hover text %q, want it to begin %q (Madrid's clock, 24 hours)", got, want)
	}

	// Search: a part of the id finds it; the map centres on it.
	br.Do(t, 5*time.Second, chromedp.SendKeys(chromedp.ID("search"), "stopped2\r"))
	br.Wait(t, 5*time.Second, `window.board.selected() === "c-stopped2" && !document.getElementById("details").hidden && !document.getElementById("sel-label").hidden`,
		`window.board.selected() + " " + document.getElementById("details").hidden`)
	centre := testenv.Eval[[]float64](t, br, `(() => { const p = window.board.pointOf("c-stopped2"), m = document.getElementById("map"); return [p[0] - m.clientWidth / 2, p[1] - m.clientHeight / 2]; })()`)
	if math.Abs(centre[0]) > 2 || math.Abs(centre[1]) > 2 {
		t.Errorf("c-stopped2 drawn %v px off the map's centre, want it centred", centre)
	}
	if got := testenv.Eval[string](t, br, `document.getElementById("sel-label").textContent`); got != "c-stopped2" {
		t.Errorf("the selected courier's label says %q", got)
	}
	details := testenv.Eval[string](t, br, `document.getElementById("details").innerText`)
	for _, want := range []string{"c-stopped2", "stopped since\n" + clock(now-2*minute-30_000) + " (2 min ago)", "at\n41.81500, 2.71500"} {
		if !strings.Contains(details, want) {
			t.Errorf("details %q lack %q", details, want)
		}
	}
	br.Do(t, 5*time.Second, chromedp.Evaluate[chromedp.Void](`document.getElementById("search").value = ""`), chromedp.SendKeys(chromedp.ID("search"), "nobody\r"))
	br.Wait(t, 5*time.Second, `document.getElementById("search-msg").textContent == "no courier nobody"`, `document.getElementById("search-msg").textContent`)
	if got := testenv.Eval[string](t, br, `window.board.selected()`); got != "c-stopped2" {
		t.Errorf("a search that found nobody changed the selection to %q", got)
	}
	// A list's row selects its courier; Escape closes the details and
	// shows the whole fleet again.
	br.Do(t, 5*time.Second, chromedp.Click(`#outside tr[data-id="c-first-out"]`))
	br.Wait(t, 5*time.Second, `window.board.selected() === "c-first-out" && document.getElementById("details-id").textContent == "c-first-out"`, `window.board.selected()`)
	br.Do(t, 5*time.Second, chromedp.KeyEvent(kb.Escape))
	br.Wait(t, 5*time.Second, `window.board.selected() === null && document.getElementById("details").hidden && document.getElementById("sel-label").hidden && document.getElementById("map").dataset.drawn == 7`,
		`window.board.selected() + " " + document.getElementById("map").dataset.drawn`)

	// Dead zones: the cell of 1 warning hidden under the default
	// threshold of 2, shown at 1, both hidden at 6.
	zones := `document.querySelectorAll("#zones polygon").length + " " + document.getElementById("n-zones").textContent + " of " + document.getElementById("n-zones-all").textContent`
	if got := testenv.Eval[string](t, br, zones); got != "1 1 of 2" {
		t.Errorf("dead zones shown: %q, want 1 polygon, 1 of 2 cells", got)
	}
	if got := testenv.Eval[string](t, br, `document.getElementById("zones-min").value`); got != "2" {
		t.Errorf("the legend's threshold is %q, want 2", got)
	}
	setMin := func(n int) {
		br.Do(t, 5*time.Second, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const i = document.getElementById("zones-min"); i.value = %d; i.dispatchEvent(new Event("input")); })()`, n)))
	}
	setMin(1)
	br.Wait(t, 5*time.Second, zones+` == "2 2 of 2"`, zones)
	setMin(6)
	br.Wait(t, 5*time.Second, zones+` == "0 0 of 2"`, zones)

	// The board's own counters: in a closed footer.
	if !testenv.Eval[bool](t, br, `!document.getElementById("internals").open && !document.getElementById("footer").checkVisibility() && document.getElementById("footer").textContent.includes("updates")`) {
		t.Errorf("the board's counters are not in a closed footer: %q", testenv.Eval[string](t, br, `document.getElementById("internals").outerHTML`))
	}
	if errs := br.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
}

// Yesterday's greatest distances in a real headless Chromium: per market
// with a lake, the table edgeproc daily wrote for the market's previous
// day (Madrid's calendar) as its top 10, km to one decimal, with the
// day's figures; "not computed yet" with no table, "unavailable" with a
// damaged one; nothing at all without a lake. A row selects its courier
// when it is on the map.
func TestPage_YesterdayInChromium(t *testing.T) {
	lakes := map[string]string{"a": t.TempDir(), "b": t.TempDir(), "c": t.TempDir()}
	yesterday := daily.Yesterday(time.Now(), madrid)
	var dists []float64
	for i := range 12 {
		dists = append(dists, float64(i+1)*1000+234.5) // c12 the greatest
	}
	mustWriteDaily(t, lakes["a"], "a", yesterday, time.Now(), dists...)
	damaged := daily.TablePath(lakes["c"], "c", yesterday)
	if err := os.MkdirAll(filepath.Dir(damaged), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(damaged, []byte("PAR1 not a table PAR1"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHub(t, func(c *Config) {
		c.Now = time.Now
		c.Markets = []Market{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}}
		for i := range c.Markets[:3] {
			m := &c.Markets[i]
			m.Lake, m.Location, m.Timezone = lakes[m.Name], madrid, "Europe/Madrid"
		}
	})
	h.Feed("a").Position([]byte("c11"), time.Now().UnixMilli(), 41.98, 2.82)
	srv := serve(t, h)
	br := testenv.StartChromium(t, 1280, 900)
	br.Do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/board/"))
	br.Wait(t, 15*time.Second, `document.querySelectorAll("#daily-list .daily").length == 3 && document.querySelectorAll("#daily-0 tbody tr").length == 10`,
		`document.getElementById("daily-list").innerText`)

	day, err := time.Parse(lake.DateLayout, yesterday)
	if err != nil {
		t.Fatal(err)
	}
	on := day.Weekday().String()[:3] + " " + yesterday
	type block struct {
		Market, State, Summary string
		Table                  bool // shown
	}
	blocks := testenv.Eval[[]block](t, br, `[...document.querySelectorAll("#daily-list .daily")].map(b => ({Market: b.dataset.market, State: b.dataset.state,
		Summary: b.querySelector(".summary").textContent, Table: b.querySelector("table").checkVisibility()}))`)
	want := []block{
		{"a", "ok", "a · " + on + ": 12 couriers, 80.8 km in all; top 10:", true},
		{"b", "missing", "b · " + on + ": not computed yet (edgeproc daily writes it after midnight, at 01:30 by its timer)", false},
		{"c", "unavailable", "c · " + on + ": unavailable: the day's table could not be read (the service's log says why)", false},
	}
	if fmt.Sprint(blocks) != fmt.Sprint(want) {
		t.Errorf("yesterday's blocks\n%+v\nwant\n%+v", blocks, want)
	}
	rows := testenv.Eval[[][]string](t, br, `[...document.querySelectorAll("#daily-0 tbody tr")].map(r => [...r.cells].map(c => c.textContent))`)
	var wantRows [][]string
	for i := 12; i > 2; i-- {
		wantRows = append(wantRows, []string{fmt.Sprintf("c%d", i), fmt.Sprintf("%d.2", i), fmt.Sprint(100 + i - 1)})
	}
	if fmt.Sprint(rows) != fmt.Sprint(wantRows) {
		t.Errorf("yesterday's list %q, want %q", rows, wantRows)
	}
	// A row of a courier on the map selects it.
	br.Do(t, 5*time.Second, chromedp.Click(`#daily-0 tr[data-id="c11"]`))
	br.Wait(t, 5*time.Second, `window.board.selected() === "c11" && !document.getElementById("details").hidden`, `window.board.selected()`)

	// One market's page: no market name before the date.
	br.Do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/board/a"))
	br.Wait(t, 15*time.Second, `document.querySelectorAll("#daily-0 tbody tr").length == 10`, `document.getElementById("daily-list").innerText`)
	if got := testenv.Eval[string](t, br, `document.querySelector("#daily-list .summary").textContent`); got != on+": 12 couriers, 80.8 km in all; top 10:" {
		t.Errorf("market a's page says %q", got)
	}
	// No lake: nothing at all.
	br.Do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/board/d"))
	br.Wait(t, 15*time.Second, `window.board.updates() > 1`, `window.board.updates()`)
	if testenv.Eval[bool](t, br, `document.getElementById("daily-section").checkVisibility() || document.querySelectorAll("#daily-list .daily").length > 0`) {
		t.Errorf("a market without a lake shows yesterday: %q", testenv.Eval[string](t, br, `document.getElementById("daily-section").outerHTML`))
	}
	if errs := br.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
}
