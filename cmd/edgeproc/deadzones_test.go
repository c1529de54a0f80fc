package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/uber/h3-go/v4"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/geo"
)

// geoJSON is the GeoJSON deadzones writes, read back.
type geoJSON struct {
	Type     string `json:"type"`
	Features []struct {
		Type     string `json:"type"`
		ID       string `json:"id"`
		Geometry struct {
			Type        string         `json:"type"`
			Coordinates [][][2]float64 `json:"coordinates"`
		} `json:"geometry"`
		Properties map[string]any `json:"properties"`
	} `json:"features"`
}

// mustParseGeoJSON decodes data and checks what RFC 7946 requires of it:
// the type members, and each polygon's rings closed, of at least four
// positions, each [lon, lat] in range.
func mustParseGeoJSON(tb testing.TB, data []byte) geoJSON {
	tb.Helper()
	var g geoJSON
	if err := json.Unmarshal(data, &g); err != nil {
		tb.Fatalf("not JSON: %v\n%s", err, data)
	}
	if g.Type != "FeatureCollection" {
		tb.Fatalf("type %q, want FeatureCollection", g.Type)
	}
	for _, f := range g.Features {
		if f.Type != "Feature" || f.Geometry.Type != "Polygon" || len(f.Geometry.Coordinates) != 1 {
			tb.Fatalf("feature %s: type %q, geometry %q with %d rings; want a Feature with a Polygon of one ring",
				f.ID, f.Type, f.Geometry.Type, len(f.Geometry.Coordinates))
		}
		ring := f.Geometry.Coordinates[0]
		if len(ring) < 4 || ring[0] != ring[len(ring)-1] {
			tb.Fatalf("feature %s: ring %v is not closed", f.ID, ring)
		}
		area := 0.0
		for i, p := range ring {
			if p[0] < -180 || p[0] > 180 || p[1] < -90 || p[1] > 90 {
				tb.Fatalf("feature %s: position %v out of [lon, lat] range", f.ID, p)
			}
			if i > 0 {
				q := ring[i-1]
				area += q[0]*p[1] - p[0]*q[1]
			}
		}
		if area <= 0 {
			tb.Errorf("feature %s: ring is clockwise (twice its signed area %g), want counter-clockwise", f.ID, area)
		}
	}
	return g
}

func mustWrite(tb testing.TB, dir, name, content string) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// wantProps checks a feature's numeric properties.
func wantProps(t *testing.T, props map[string]any, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if got, ok := props[k].(float64); !ok || got != v {
			t.Errorf("property %s = %v, want %v", k, props[k], v)
		}
	}
}

func TestDeadzones_WorkedExample(t *testing.T) {
	out := filepath.Join(t.TempDir(), "zones.geojson")
	code, stdout, errs := runCLI(t, "deadzones", "--config", "../../testdata/worked.yaml", "--in", "../../testdata/worked.jsonl", "--out", out)
	if code != 0 || stdout != "" || !strings.Contains(errs, "replay: 6 positions") || !strings.Contains(errs, "deadzones: 1 cells, 1 windows") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0, nothing, the replay's summary and the count", code, stdout, errs)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	g := mustParseGeoJSON(t, data)
	if len(g.Features) != 1 {
		t.Fatalf("%d features, want 1:\n%s", len(g.Features), data)
	}
	f := g.Features[0]
	if f.Properties["cell"] != "883945cadbfffff" || f.ID != "883945cadbfffff" {
		t.Errorf("cell %v (id %q), want 883945cadbfffff", f.Properties["cell"], f.ID)
	}
	wantProps(t, f.Properties, map[string]float64{
		"warnings": 1, "couriers": 1, "restored": 1, "open": 0, "silence_ms": 65000, "longest_silence_ms": 65000,
		"windows": 1, "first_window_start_ms": 1726315200000, "last_window_end_ms": 1726318800000, "mean_silence_s": 65,
	})
	// The ring: 6 vertices and the closing one, [lon, lat] round van-3's
	// last position before its silence, which lies in the cell.
	const lat, lon = 41.9804, 2.8214
	if c := h3.LatLngToCell(h3.NewLatLng(lat, lon), 8); c.String() != "883945cadbfffff" {
		t.Fatalf("(%g, %g) is in cell %s, not 883945cadbfffff", lat, lon, c)
	}
	ring := f.Geometry.Coordinates[0]
	if len(ring) != 7 {
		t.Fatalf("ring of %d positions, want 7: %v", len(ring), ring)
	}
	for _, p := range ring {
		// A resolution-8 cell's vertices are within about 0.6 km of any
		// point inside; swapped coordinates would be thousands of km off.
		if d := geo.Haversine(lat, lon, p[1], p[0]); d > 1500 {
			t.Errorf("vertex %v is %.0f m from (%g, %g), want the cell's neighbourhood", p, d, lat, lon)
		}
	}

	// Deterministic, and stdout without --out.
	code, stdout, _ = runCLI(t, "deadzones", "--config", "../../testdata/worked.yaml", "--in", "../../testdata/worked.jsonl")
	if code != 0 || stdout != string(data) {
		t.Errorf("to stdout: exit %d, got\n%s\nwant the file's bytes\n%s", code, stdout, data)
	}
}

// Two silences of one courier in one place an hour apart fall in two
// 10-minute windows of one cell: one feature, the windows summed.
func TestDeadzones_SumsWindowsOfOneCell(t *testing.T) {
	dir := t.TempDir()
	cfg := mustWrite(t, dir, "cfg.yaml", "market: girona\nwindows:\n  size: 1m\n  slide: 1m\n  gap: 60s\n  tolerated_delay: 0s\ndead_zones:\n  window: 10m\n")
	const t0 = 1726315200000 // 12:00:00 UTC, a multiple of 10 minutes
	var in strings.Builder
	// A fix every 30 s for 75 minutes, but none for 90 s after 12:01:00
	// and after 13:01:00.
	for ts := int64(t0); ts <= t0+75*60_000; ts += 30_000 {
		if off := (ts - t0) % 3600_000; off > 60_000 && off < 150_000 {
			continue
		}
		fmt.Fprintf(&in, `{"courier":"van-1","lat":41.98,"lon":2.82,"timestamp_ms":%d,"arrival_ms":%d}`+"\n", ts, ts)
	}
	positions := mustWrite(t, dir, "positions.jsonl", in.String())

	code, stdout, errs := runCLI(t, "deadzones", "--config", cfg, "--in", positions, "--out", "-")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errs)
	}
	g := mustParseGeoJSON(t, []byte(stdout))
	if len(g.Features) != 1 {
		t.Fatalf("%d features, want 1:\n%s", len(g.Features), stdout)
	}
	wantProps(t, g.Features[0].Properties, map[string]float64{
		"windows": 2, "warnings": 2, "couriers": 2, "restored": 2, "open": 0,
		"silence_ms": 180_000, "longest_silence_ms": 90_000, "mean_silence_s": 90,
		"first_window_start_ms": t0, "last_window_end_ms": t0 + 3600_000 + 600_000,
	})
	if c := h3.LatLngToCell(h3.NewLatLng(41.98, 2.82), 8).String(); g.Features[0].ID != c {
		t.Errorf("cell %s, want %s", g.Features[0].ID, c)
	}
}

// runDeadzones runs the command like runCLI, failing the test if it has
// not returned within 20 s (the --since path must stop once caught up).
func runDeadzones(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	type res struct {
		code        int
		out, stderr string
	}
	done := make(chan res, 1)
	go func() {
		code, out, errs := runCLI(t, append([]string{"deadzones"}, args...)...)
		done <- res{code, out, errs}
	}()
	select {
	case r := <-done:
		return r.code, r.out, r.stderr
	case <-time.After(20 * time.Second):
		t.Fatalf("deadzones %v: still running after 20s", args)
		return 0, "", ""
	}
}

func TestDeadzones_SinceReadsTheStreamAsTheReplay(t *testing.T) {
	srv, nc, b, published := workedStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	code, want, errs := runCLI(t, "deadzones", "--config", "../../testdata/worked.yaml", "--in", "../../testdata/worked.jsonl")
	if code != 0 {
		t.Fatalf("deadzones --in: exit %d, stderr %s", code, errs)
	}
	since := func() string {
		t.Helper()
		code, got, errs := runDeadzones(t, "--config", "../../testdata/worked.yaml", "--nats", srv.URL(), "--since", "1h")
		if code != 0 {
			t.Fatalf("deadzones --since: exit %d, stderr %s", code, errs)
		}
		return got
	}
	if got := since(); got != want {
		t.Errorf("deadzones --since 1h:\n%s\nwant what --in gives:\n%s", got, want)
	}

	// The dead zone stored a second time (no Nats-Msg-Id: not deduplicated
	// by the server), then a result of another subject last: the same.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bc := b.Config()
	var zone, other string
	for _, l := range published {
		switch {
		case strings.HasPrefix(l, `{"type":"dead_zone"`):
			zone = l
		case strings.HasPrefix(l, `{"type":"no_signal"`):
			other = l
		}
	}
	if zone == "" || other == "" {
		t.Fatalf("the worked example published no dead_zone or no no_signal:\n%s", strings.Join(published, "\n"))
	}
	for _, m := range []struct{ kind, data string }{{bridge.KindDeadZone, zone}, {bridge.KindNoSignal, other}} {
		if _, err := js.Publish(ctx, bc.Subject(m.kind), []byte(m.data)); err != nil {
			t.Fatal(err)
		}
	}
	if got := since(); got != want {
		t.Errorf("with the dead zone stored twice:\n%s\nwant it counted once:\n%s", got, want)
	}

	// Nothing since: an empty collection.
	time.Sleep(20 * time.Millisecond)
	code, got, errs := runDeadzones(t, "--config", "../../testdata/worked.yaml", "--nats", srv.URL(), "--since", "5ms")
	if code != 0 || got != "{\"type\":\"FeatureCollection\",\"features\":[\n]}\n" {
		t.Errorf("deadzones --since 5ms: exit %d, stdout %q, stderr %s; want an empty collection", code, got, errs)
	}
	mustParseGeoJSON(t, []byte(got))
}

func TestDeadzones_UsageAndErrors(t *testing.T) {
	cases := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"deadzones"}, 2, "edgeproc deadzones: deadzones takes --config FILE and either --in FILE or --since D\nusage: edgeproc deadzones "},
		{[]string{"deadzones", "--config", "../../testdata/worked.yaml"}, 2, "either --in FILE or --since D"},
		{[]string{"deadzones", "--config", "../../testdata/worked.yaml", "--in", "x", "--since", "1h"}, 2, "either --in FILE or --since D"},
		{[]string{"deadzones", "--config", "../../testdata/worked.yaml", "--since", "-1h"}, 2, "--since must be positive"},
		{[]string{"deadzones", "--config", "../../testdata/worked.yaml", "--in", "x", "--nats", "nats://h"}, 2, "--nats goes with --since"},
		{[]string{"deadzones", "--config", "../../testdata/worked.yaml", "--in", "missing.jsonl"}, 1, "edgeproc deadzones: input: open missing.jsonl: no such file or directory"},
		{[]string{"deadzones", "--config", "missing.yaml", "--in", "x"}, 1, "edgeproc deadzones: config missing.yaml: no such file or directory"},
		{[]string{"deadzones", "--config", "../../testdata/worked.yaml", "--since", "1h", "--nats", "nats://127.0.0.1:1"}, 1, "edgeproc deadzones: connect to nats nats://127.0.0.1:1: "},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, c.args...)
			if code != c.code || out != "" || !strings.Contains(errs, c.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, nothing, %q", code, out, errs, c.code, c.stderr)
			}
		})
	}
	code, out, _ := runCLI(t, "help", "deadzones")
	if code != 0 || !strings.Contains(out, "\nexample:\n  edgeproc deadzones --config") {
		t.Errorf("help deadzones: exit %d:\n%s", code, out)
	}
	if _, out, _ = runCLI(t, "help"); !strings.Contains(out, "  deadzones ") {
		t.Errorf("help lists no deadzones:\n%s", out)
	}
}
