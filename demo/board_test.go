package demo

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/internal/testenv"
)

var boardPNG = flag.String("board.png", "", "also write the demo board's screenshot to this file (../docs/board.png for the README)")

var boardURLRe = regexp.MustCompile(`fleet board: +(http://127\.0\.0\.1:\d+/board/)`)

// `edgeproc demo` prints its fleet board's URL; the page, in a real
// headless Chromium, draws the whole simulated fleet with no console error,
// and shows moving and no-signal couriers once the first windows have fired
// and the fleet's tunnels begin. Most couriers are inside Girona's service
// area and the few outside it are counted by their side now, those first
// seen there included (the demo's first minute has no left_area), each
// with the outside ring and in the outside list; the lists say since when
// on Madrid's 24-hour clock. The screenshot, a stopped courier hovered, is
// the README's.
func TestRun_BoardInChromium(t *testing.T) {
	const couriers = 140
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan Addrs, 1)
	var out testenv.LogBuffer
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
	const ds = `document.getElementById("map").dataset`
	br.Wait(t, 50*time.Second, fmt.Sprintf(`%s.drawn == %d && %s.drawn_no_signal > 0 && %s.drawn_moving > 0 && document.querySelectorAll("#stopped tbody tr").length > 0`, ds, couriers, ds, ds),
		`JSON.stringify(`+ds+`)`)
	if n := testenv.Eval[int](t, br, `window.board.couriers()`); n != couriers {
		t.Errorf("the page tracks %d couriers, want %d", n, couriers)
	}
	// Outside: counted in the legend, ringed and listed alike, a few.
	br.Wait(t, 20*time.Second, `window.board.outside() > 0`, `window.board.outside()`)
	type outside struct {
		Legend, Ringed, Listed int
		Since                  string
	}
	o := testenv.Eval[outside](t, br, `({Legend: +document.getElementById("n-outside").textContent, Ringed: window.board.outside(),
		Listed: +document.getElementById("out-count").textContent, Since: document.querySelector("#outside tbody td:nth-child(2)").textContent})`)
	if o.Legend != o.Ringed || o.Listed != o.Ringed || o.Ringed > couriers/10 {
		t.Errorf("outside the service area: legend %d, ringed %d, listed %d; want the same few (1 to %d)", o.Legend, o.Ringed, o.Listed, couriers/10)
	}
	if !regexp.MustCompile(`^([01]\d|2[0-3]):[0-5]\d:[0-5]\d$`).MatchString(o.Since) {
		t.Errorf("outside since %q, want a 24-hour clock", o.Since)
	}
	if errs := br.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
	// A stopped courier hovered, for the screenshot: its label shows.
	at := testenv.Eval[[]float64](t, br, `(() => { const id = document.querySelector("#stopped tbody tr").dataset.id, p = window.board.pointOf(id), m = document.getElementById("map").getBoundingClientRect(); return [m.left + p[0], m.top + p[1]]; })()`)
	br.Do(t, 5*time.Second, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at[0], at[1]))
	br.Wait(t, 5*time.Second, `!document.getElementById("tip").hidden && document.getElementById("tip").textContent.includes("stopped since")`, `document.getElementById("tip").textContent`)
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
	t.Logf("screenshot %s", p)

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

// BenchmarkBoard2000 measures the fleet board at 2 000 couriers: the demo
// with a 2 000-courier fleet, the page open in headless Chromium, and a
// second, Go reader of the event stream. It runs once whatever b.N:
//
//	go test -run '^$' -bench Board2000 -benchtime 1x ./demo/
//
// and reports the updates per second and bytes per update of the stream,
// the page's main-thread busy time (Chromium's TaskDuration) and its
// frames' time per second, and the CPU of every Chromium process and of
// its renderers alone (from /proc), as a share of one core.
func BenchmarkBoard2000(b *testing.B) {
	const couriers, window = 2000, 20 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan Addrs, 1)
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Options{Couriers: couriers, Ready: func(a Addrs) { ready <- a }})
		done <- err
	}()
	var addrs Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		b.Fatalf("Run: %v", err)
	}
	base := "http://" + addrs.HTTP + "/board/"
	br := testenv.StartChromium(b, 1440, 900)
	br.Do(b, 20*time.Second, chromedp.Navigate(base))
	br.Wait(b, 60*time.Second, fmt.Sprintf(`document.getElementById("map").dataset.drawn >= %d`, couriers*95/100),
		`document.getElementById("map").dataset.drawn`)

	type renders struct{ Count, MS float64 }
	m0, r0, cpu0 := br.Metrics(b), testenv.Eval[renders](b, br, `window.board.renders()`), chromiumCPU(b)
	msgs, bytes, biggest := streamFor(b, base+"events", window)
	m1, r1, cpu1 := br.Metrics(b), testenv.Eval[renders](b, br, `window.board.renders()`), chromiumCPU(b)
	secs := window.Seconds()
	drawn := testenv.Eval[int](b, br, `document.getElementById("map").dataset.drawn|0`)

	b.ReportMetric(float64(drawn), "couriers_drawn")
	b.ReportMetric(float64(msgs)/secs, "updates/s")
	b.ReportMetric(float64(bytes)/float64(max(msgs, 1)), "B/update")
	b.ReportMetric(float64(biggest), "B/largest_update")
	b.ReportMetric(100*(m1["TaskDuration"]-m0["TaskDuration"])/secs, "%page_main_thread")
	b.ReportMetric(100*(m1["ScriptDuration"]-m0["ScriptDuration"])/secs, "%page_script")
	b.ReportMetric((r1.MS-r0.MS)/max(r1.Count-r0.Count, 1), "ms/frame")
	b.ReportMetric(m1["JSHeapUsedSize"]/(1<<20), "MiB_js_heap")
	b.ReportMetric(100*(cpu1.all-cpu0.all).Seconds()/secs, "%cpu_chromium_all")
	b.ReportMetric(100*(cpu1.renderer-cpu0.renderer).Seconds()/secs, "%cpu_chromium_renderer")
	cancel()
	<-done
}

// streamFor reads an event stream for d and returns its messages after
// the first (the snapshot), their bytes and the largest one's size.
func streamFor(tb testing.TB, url string, d time.Duration) (msgs, bytes, biggest int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	st := board.NewStream(resp.Body)
	if _, _, err := st.Next(); err != nil { // the snapshot
		tb.Fatal(err)
	}
	for {
		_, n, err := st.Next()
		if err != nil {
			break // d has passed
		}
		msgs++
		bytes += n
		biggest = max(biggest, n)
	}
	return msgs, bytes, biggest
}

type cpuTimes struct{ all, renderer time.Duration }

// chromiumCPU sums the user and system CPU time of this process's
// descendants (the browser the test started), and of the renderers among
// them.
func chromiumCPU(tb testing.TB) cpuTimes {
	tb.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	type proc struct {
		ppid     int
		cpu      time.Duration
		renderer bool
	}
	procs := map[int]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// Fields after the command, which is in parentheses.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		procs[pid] = proc{ppid, time.Duration(ut+st) * 10 * time.Millisecond, strings.Contains(string(cmd), "--type=renderer")}
	}
	self := os.Getpid()
	var t cpuTimes
	for _, p := range procs {
		for a, hops := p.ppid, 0; a > 1 && hops < 16; a, hops = procs[a].ppid, hops+1 {
			if a == self {
				t.all += p.cpu
				if p.renderer {
					t.renderer += p.cpu
				}
				break
			}
		}
	}
	return t
}
