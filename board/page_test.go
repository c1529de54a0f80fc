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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/uber/h3-go/v4"

	"github.com/km0/edgeproc/internal/testenv"
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
	if got, want := hover("out"), "out (a)\nunknown\noutside the service area since 2024-09-14 12:10 UTC\nlast position "; !strings.HasPrefix(got, want) {
		t.Errorf("hover text %q, want it to begin %q", got, want)
	}
	if got := hover("in"); strings.Contains(got, "outside") {
		t.Errorf("hover text of the courier inside %q", got)
	}
	if errs := br.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
}
