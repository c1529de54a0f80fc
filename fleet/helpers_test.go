package fleet

import (
	"cmp"
	"math"
	"slices"
	"testing"
	"time"
)

// mustCollect drains a bounded fleet.
func mustCollect(tb testing.TB, cfg Config) []Event {
	tb.Helper()
	if cfg.Duration <= 0 {
		tb.Fatalf("mustCollect needs a bounded Duration, got %v", cfg.Duration)
	}
	f := New(cfg)
	var out []Event
	for {
		e, ok := f.Next()
		if !ok {
			return out
		}
		out = append(out, e)
	}
}

// positions returns the original positions (no duplicates, no bad
// payloads) grouped by courier, in event-time order.
func positions(evs []Event) map[string][]Event {
	m := make(map[string][]Event)
	for _, e := range evs {
		if e.Raw == nil && !e.Duplicate {
			m[e.Courier] = append(m[e.Courier], e)
		}
	}
	for _, s := range m {
		slices.SortFunc(s, func(a, b Event) int { return cmp.Compare(a.TS, b.TS) })
	}
	return m
}

func haversineM(lat1, lon1, lat2, lon2 float64) float64 {
	const rad = math.Pi / 180
	dLat := (lat2 - lat1) * rad
	dLon := (lon2 - lon1) * rad
	a := math.Sin(dLat/2)*math.Sin(dLat/2) +
		math.Cos(lat1*rad)*math.Cos(lat2*rad)*math.Sin(dLon/2)*math.Sin(dLon/2)
	return 2 * earthRadiusM * math.Asin(math.Sqrt(a))
}

const hour = time.Hour
