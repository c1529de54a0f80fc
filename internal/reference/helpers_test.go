package reference

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/uber/h3-go/v4"
)

// Expected values in these tests come from reasoning about the contract; the
// helpers below only build records and compare them.

const market = "m"

// Coordinates around Girona, a few tens of metres apart.
var (
	ptA = [2]float64{41.9794, 2.8214}
	ptB = [2]float64{41.9800, 2.8230}
	ptC = [2]float64{41.9810, 2.8250}
	ptD = [2]float64{41.9830, 2.8260}
	ptE = [2]float64{41.9797, 2.8220}
	ptF = [2]float64{41.9850, 2.8270}
)

// baseParams: 1-minute tumbling-like windows, 1-minute gap, no delay, no idle
// rule, a future skew large enough never to matter, filters off.
func baseParams() Params {
	return Params{
		Market: market, SizeMs: 60000, SlideMs: 60000, GapMs: 60000,
		FutureSkewMs: 1_000_000_000_000, RestoreTTLMs: 3_600_000, MaxCouriers: 1000,
		StoppedBelowM: 50, H3Resolution: 9,
	}
}

// testHaversine is written independently of the package (atan2 form).
func testHaversine(p, q [2]float64) float64 {
	const r = 6371008.8
	toRad := func(d float64) float64 { return d * math.Pi / 180 }
	sinLat := math.Sin(toRad(q[0]-p[0]) / 2)
	sinLon := math.Sin(toRad(q[1]-p[1]) / 2)
	a := sinLat*sinLat + math.Cos(toRad(p[0]))*math.Cos(toRad(q[0]))*sinLon*sinLon
	return r * 2 * math.Atan2(math.Sqrt(a), math.Sqrt(1-a))
}

func cellOf(p [2]float64) string {
	return h3.LatLngToCell(h3.NewLatLng(p[0], p[1]), 9).String()
}

// pos is a position line without arrival_ms.
func pos(courier string, ts int64, p [2]float64) string {
	return fmt.Sprintf(`{"courier":%q,"lat":%v,"lon":%v,"timestamp_ms":%d}`, courier, p[0], p[1], ts)
}

// posAt is a position line with arrival_ms.
func posAt(courier string, ts int64, p [2]float64, arrival int64) string {
	return fmt.Sprintf(`{"courier":%q,"lat":%v,"lon":%v,"timestamp_ms":%d,"arrival_ms":%d}`, courier, p[0], p[1], ts, arrival)
}

// tick is a line that only moves the clock (it is rejected as missing_field).
func tick(arrival int64) string { return fmt.Sprintf(`{"arrival_ms":%d}`, arrival) }

func distRec(courier string, start, end int64, dist float64, n int64, cell [2]float64, at int64) map[string]any {
	return map[string]any{
		"type": "distance", "market": market, "courier": courier,
		"key":             fmt.Sprintf("distance|%s|%s|%d", market, courier, start),
		"emitted_at_ms":   at,
		"window_start_ms": start, "window_end_ms": end,
		"distance_m": dist, "positions": n, "stopped": dist < 50, "cell": cellOf(cell),
	}
}

func noSigRec(courier string, start, last int64, p [2]float64, at int64, endOfInput bool) map[string]any {
	r := map[string]any{
		"type": "no_signal", "market": market, "courier": courier,
		"key":              fmt.Sprintf("no_signal|%s|%s|%d", market, courier, start),
		"emitted_at_ms":    at,
		"session_start_ms": start, "last_seen_ms": last,
		"last_lat": p[0], "last_lon": p[1], "cell": cellOf(p),
	}
	if endOfInput {
		r["end_of_input"] = true
	}
	return r
}

func restoredRec(courier string, from, to, at int64) map[string]any {
	return map[string]any{
		"type": "signal_restored", "market": market, "courier": courier,
		"key":            fmt.Sprintf("signal_restored|%s|%s|%d", market, courier, from),
		"emitted_at_ms":  at,
		"silent_from_ms": from, "restored_at_ms": to, "gap_ms": to - from,
	}
}

func lateRec(courier string, ts int64, op string, wm, at int64) map[string]any {
	return map[string]any{
		"type": "late", "market": market, "courier": courier,
		"key":           fmt.Sprintf("late|%s|%s|%d|%s", market, courier, ts, op),
		"emitted_at_ms": at,
		"operator":      op, "timestamp_ms": ts, "watermark_ms": wm, "lateness_ms": wm - ts,
	}
}

func rejRec(line int64, reason, raw string, at int64) map[string]any {
	return map[string]any{
		"type": "rejected", "market": market,
		"key":           fmt.Sprintf("rejected|%s|%d", market, line),
		"emitted_at_ms": at,
		"reason":        reason, "raw": raw, "line": line,
	}
}

// missRec is a missing_field rejection naming field.
func missRec(line int64, field, raw string, at int64) map[string]any {
	r := rejRec(line, "missing_field", raw, at)
	r["field"] = field
	return r
}

func runLines(p Params, lines ...string) []map[string]any {
	return Run(p, []byte(strings.Join(lines, "\n")+"\n"))
}

func ofTypes(recs []map[string]any, types ...string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		for _, t := range types {
			if r["type"] == t {
				out = append(out, r)
			}
		}
	}
	return out
}

// compareRecords checks that got and want hold the same records, ignoring
// order: same keys, same field names, equal values (floats within 1e-6).
func compareRecords(t *testing.T, got, want []map[string]any) {
	t.Helper()
	index := func(recs []map[string]any, what string) map[string]map[string]any {
		m := map[string]map[string]any{}
		for _, r := range recs {
			k, _ := r["key"].(string)
			if _, dup := m[k]; dup {
				t.Errorf("%s: key %q appears twice", what, k)
			}
			m[k] = r
		}
		return m
	}
	g, w := index(got, "got"), index(want, "want")
	for _, k := range sortedKeys(w) {
		gr, ok := g[k]
		if !ok {
			t.Errorf("missing record %s: want %v", k, w[k])
			continue
		}
		for _, f := range sortedKeys(w[k]) {
			wv := w[k][f]
			gv, ok := gr[f]
			if !ok {
				t.Errorf("%s: field %s missing, want %#v", k, f, wv)
				continue
			}
			if !sameValue(gv, wv) {
				t.Errorf("%s: %s: got %#v, want %#v", k, f, gv, wv)
			}
		}
		for _, f := range sortedKeys(gr) {
			if _, ok := w[k][f]; !ok {
				t.Errorf("%s: unexpected field %s = %#v", k, f, gr[f])
			}
		}
	}
	for _, k := range sortedKeys(g) {
		if _, ok := w[k]; !ok {
			t.Errorf("unexpected record %s: %v", k, g[k])
		}
	}
}

func sameValue(got, want any) bool {
	if wf, ok := want.(float64); ok {
		gf, ok := got.(float64)
		return ok && math.Abs(gf-wf) <= 1e-6
	}
	return got == want
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
