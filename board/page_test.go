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
