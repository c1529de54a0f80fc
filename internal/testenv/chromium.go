package testenv

import (
	"context"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"
)

// Browser is a real headless Chromium (Debian's chromium package, which
// scripts/test.sh installs) with one tab, driven over the DevTools
// protocol. It records every console error, uncaught exception and error
// entry of the browser log (a failed load, for one) of the pages it shows.
type Browser struct {
	// Ctx is the tab's context, for chromedp.Do and chromedp.Run.
	Ctx context.Context

	mu   sync.Mutex
	errs []string
	done chan struct{}
}

// StartChromium starts a headless Chromium with a window of width × height
// CSS pixels; it is stopped at the end of the test. The test fails (it is
// not skipped) when chromium is not installed.
func StartChromium(tb testing.TB, width, height int) *Browser {
	tb.Helper()
	SkipShort(tb, "a headless Chromium")
	path, err := exec.LookPath("chromium")
	if err != nil {
		tb.Fatalf("chromium not found (scripts/test.sh installs Debian's chromium): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("headless", "new"),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(width, height),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &Browser{Ctx: ctx, done: make(chan struct{})}
	stop := func() {
		cancel()
		cancelAlloc()
	}
	// The first call starts the browser, with no timeout; the performance
	// metrics count from here.
	if _, err := chromedp.Call(ctx, performance.Enable, performance.EnableParams{}); err != nil {
		stop()
		tb.Fatalf("start chromium: %v", err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		defer close(b.done)
		for m, err := range messages {
			if err != nil {
				return // the tab is gone
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errs = append(b.errs, m.String()+" at "+m.URL)
				b.mu.Unlock()
			}
		}
	}()
	tb.Cleanup(func() {
		stop()
		<-b.done
	})
	return b
}

// Do runs actions in the tab, failing the test on an error or after d.
func (b *Browser) Do(tb testing.TB, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.Fatalf("chromium: %v", err)
	}
}

// Eval evaluates a JavaScript expression in the tab.
func Eval[T any](tb testing.TB, b *Browser, expr string) T {
	tb.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.Fatalf("chromium: evaluate %s: %v", expr, err)
	}
	return v
}

// Screenshot returns a PNG of the tab's viewport.
func (b *Browser) Screenshot(tb testing.TB) []byte {
	tb.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		tb.Fatalf("chromium: screenshot: %v", err)
	}
	return png
}

// Errors returns the errors the pages reported so far.
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// Metrics returns Chromium's performance metrics of the tab, by name:
// TaskDuration and ScriptDuration are the main thread's busy and script
// time, in seconds since StartChromium; JSHeapUsedSize is in bytes.
func (b *Browser) Metrics(tb testing.TB) map[string]float64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 10*time.Second)
	defer cancel()
	res, err := chromedp.Call(ctx, performance.GetMetrics, cdp.Empty{})
	if err != nil {
		tb.Fatalf("chromium: performance metrics: %v", err)
	}
	out := map[string]float64{}
	for _, m := range res.Metrics {
		out[m.Name] = m.Value
	}
	return out
}

// Wait polls a JavaScript condition in the tab every 50 ms until it is
// true, failing the test after d with the value of the diagnostic
// expression show (e.g. what the page counted).
func (b *Browser) Wait(tb testing.TB, d time.Duration, cond, show string) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !Eval[bool](tb, b, "Boolean("+cond+")") {
		if time.Now().After(deadline) {
			tb.Fatalf("page: %s not true within %v; %s = %s", cond, d, show, Eval[string](tb, b, "String("+show+")"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
