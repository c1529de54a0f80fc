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

	"github.com/chromedp/chromedp"

	"github.com/km0/edgeproc/internal/testenv"
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
