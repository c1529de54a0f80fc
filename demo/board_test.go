package demo

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/km0/edgeproc/internal/testenv"
)

var boardPNG = flag.String("board.png", "", "also write the demo board's screenshot to this file (../docs/board.png for the README)")

var boardURLRe = regexp.MustCompile(`fleet board: +(http://127\.0\.0\.1:\d+/board/)`)

// `edgeproc demo` prints its fleet board's URL; the page, in a real
// headless Chromium, draws the whole simulated fleet with no console error,
// and shows no-signal couriers once the fleet's tunnels begin. The
// screenshot is the README's.
func TestRun_BoardInChromium(t *testing.T) {
	const couriers = 140
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan Addrs, 1)
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Options{Out: &out, Couriers: couriers, Ready: func(a Addrs) { ready <- a }})
		done <- err
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before it was ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("demo not ready within 60s")
	}
	m := boardURLRe.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("banner has no fleet board URL:\n%s", out.String())
	}

	br := testenv.StartChromium(t, 1440, 900)
	br.Do(t, 20*time.Second, chromedp.Navigate(m[1]))
	// Each courier sends every ~5 s, and one that starts in a tunnel
	// (20–40 s) only after it; a no_signal takes the 15 s gap.
	deadline := time.Now().Add(50 * time.Second)
	var drawn, silent int
	for {
		drawn = testenv.Eval[int](t, br, `document.getElementById("map").dataset.drawn|0`)
		silent = testenv.Eval[int](t, br, `document.getElementById("map").dataset.drawn_no_signal|0`)
		if drawn == couriers && silent > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 50s the page drew %d couriers (want %d), %d no_signal (want some)", drawn, couriers, silent)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if n := testenv.Eval[int](t, br, `window.board.couriers()`); n != couriers {
		t.Errorf("the page tracks %d couriers, want %d", n, couriers)
	}
	if errs := br.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
	// One more update so that the lists show what the map shows.
	time.Sleep(time.Second)
	png := br.Screenshot(t)
	p := filepath.Join(t.ArtifactDir(), "board.png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if *boardPNG != "" {
		if err := os.WriteFile(*boardPNG, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("drawn %d couriers, %d no_signal; screenshot %s", drawn, silent, p)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of cancel")
	}
}
