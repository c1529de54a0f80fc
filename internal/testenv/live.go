package testenv

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// LiveFleet is a fleet on the clock, for tests of faults while couriers
// keep publishing: every `every`, for rounds rounds, each of couriers
// couriers c0, c1, … sends one position timestamped now (its phone's
// clock), moving east a little each round, through send (topic
// km0/MARKET/positions/COURIER). at, when set, is called before each
// round with its number: the test's place for its faults. It returns each
// courier's last timestamp.
func LiveFleet(market string, couriers, rounds int, every time.Duration, at func(round int), send func(topic string, payload []byte)) map[string]int64 {
	last := map[string]int64{}
	for round := range rounds {
		if at != nil {
			at(round)
		}
		for c := range couriers {
			courier := fmt.Sprintf("c%d", c)
			ts := time.Now().UnixMilli()
			send("km0/"+market+"/positions/"+courier,
				fmt.Appendf(nil, `{"courier":%q,"lat":41.98,"lon":%.5f,"timestamp_ms":%d}`, courier, 2.82+float64(round)*1e-4, ts))
			last[courier] = ts
		}
		time.Sleep(every)
	}
	return last
}

// silences reads a results stream's no_signal records (last_seen_ms by
// courier) and counts its late records.
func silences(tb testing.TB, url, stream string) (noSignal map[string][]int64, late int) {
	tb.Helper()
	noSignal = map[string][]int64{}
	for _, m := range ReadStream(tb, url, stream) {
		var r struct {
			Type     string `json:"type"`
			Courier  string `json:"courier"`
			LastSeen int64  `json:"last_seen_ms"`
		}
		if json.Unmarshal(m.Data, &r) != nil {
			continue
		}
		switch r.Type {
		case "no_signal":
			noSignal[r.Courier] = append(noSignal[r.Courier], r.LastSeen)
		case "late":
			late++
		}
	}
	return noSignal, late
}

// WaitFinalSilence waits (up to d) until every courier of last has a
// no_signal in the results stream: the fleet's final silence.
func WaitFinalSilence(tb testing.TB, url, stream string, last map[string]int64, d time.Duration) {
	tb.Helper()
	WaitFor(tb, d, "every courier's final no_signal", func() bool {
		n, _ := silences(tb, url, stream)
		return len(n) == len(last)
	})
}

// CheckOnlyFinalSilence requires of the results stream what couriers who
// kept publishing until their last position did: exactly one no_signal
// each, the one after the final silence (last_seen = its last position),
// and no late record.
func CheckOnlyFinalSilence(tb testing.TB, url, stream string, last map[string]int64) {
	tb.Helper()
	noSignal, late := silences(tb, url, stream)
	for courier, seen := range noSignal {
		if len(seen) != 1 || seen[0] != last[courier] {
			tb.Errorf("courier %s: no_signal with last_seen %v, want one, at its last position %d", courier, seen, last[courier])
		}
	}
	if late != 0 {
		tb.Errorf("%d late records, want none: every position was sent on time", late)
	}
}
