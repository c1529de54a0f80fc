package reference

import (
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestRun_WorkedExample is the seed's example: size = slide = 1 min, delay
// 2 min, gap 60 s, filters off; the 12:00:30 position arrives at 12:02:30.
func TestRun_WorkedExample(t *testing.T) {
	t0 := time.Date(2024, 9, 14, 12, 0, 0, 0, time.UTC).UnixMilli()
	at := func(sec int64) int64 { return t0 + sec*1000 }
	p := baseParams()
	p.DelayMs = 120_000
	p.FutureSkewMs = 60_000

	lines := []string{
		posAt("van-3", at(10), ptA, at(10)),
		posAt("van-3", at(55), ptB, at(55)),
		posAt("van-3", at(65), ptC, at(65)),
		posAt("van-3", at(130), ptD, at(130)),
		posAt("van-3", at(30), ptE, at(150)),
		posAt("van-3", at(160), ptF, at(160)),
	}
	got := runLines(p, lines...)

	// The watermark reaches at most 12:02:40 - 2 min = 12:00:40, below every
	// window end (12:01) and session end (12:02:05), so nothing is late and
	// everything fires at the end of input, at the last clock 12:02:40.
	// 12:00 window: 10s, 30s (late arrival, not late: wm was 12:00:10), 55s.
	// 10s is the courier's first position; 30s carries A->E, 55s carries E->B.
	// 12:01 window: 65s carries B->C. 12:02 window: 130s C->D, 160s D->F.
	// Sessions: 10,30,55,65 (each within 60 s of the last); 130 is 65 s after
	// 65, a new session, which 160 joins.
	end := at(160)
	want := []map[string]any{
		distRec("van-3", at(0), at(60), testHaversine(ptA, ptE)+testHaversine(ptE, ptB), 3, ptB, end),
		distRec("van-3", at(60), at(120), testHaversine(ptB, ptC), 1, ptC, end),
		distRec("van-3", at(120), at(180), testHaversine(ptC, ptD)+testHaversine(ptD, ptF), 2, ptF, end),
		noSigRec("van-3", at(10), at(65), ptC, end, false),
		restoredRec("van-3", at(65), at(130), end),
		noSigRec("van-3", at(130), at(160), ptF, end, true),
	}
	compareRecords(t, got, want)
}

// TestRun_RandomFleetInvariants runs a 20 x 1,000 fleet with shuffled
// arrivals: it must finish quickly, be deterministic, and with size = slide
// every position is either in exactly one fired window or late for distance.
func TestRun_RandomFleetInvariants(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	p := baseParams()
	p.DelayMs = 20_000
	p.GapMs = 30_000
	p.IdleTimeoutMs = 10_000
	p.MinMoveM = 5
	p.MaxSpeedKmh = 150

	type ev struct {
		line    string
		arrival int64
	}
	var evs []ev
	const couriers, perCourier = 20, 1000
	for c := 0; c < couriers; c++ {
		ts := int64(1_726_000_000_000)
		lat, lon := 41.98, 2.82
		for i := 0; i < perCourier; i++ {
			ts += 1 + rng.Int63n(20_000)
			if rng.Intn(50) == 0 {
				ts += 60_000 // a silence that splits a session
			}
			lat += (rng.Float64() - 0.5) * 0.001
			lon += (rng.Float64() - 0.5) * 0.001
			arrival := ts + rng.Int63n(40_000) // up to 40 s in transit
			evs = append(evs, ev{posAt(fmt.Sprintf("c%02d", c), ts, [2]float64{lat, lon}, arrival), arrival})
		}
	}
	// File order is arrival order.
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].arrival < evs[j].arrival })
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e.line)
		b.WriteByte('\n')
	}
	input := []byte(b.String())

	start := time.Now()
	got := Run(p, input)
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("Run took %v, want a few seconds", d)
	}

	var inWindows, lateDistance int64
	for _, r := range got {
		switch r["type"] {
		case "distance":
			inWindows += r["positions"].(int64)
		case "late":
			if r["operator"] == "distance" {
				lateDistance++
			}
		case "rejected":
			t.Errorf("unexpected rejection: %v", r)
		}
	}
	if inWindows+lateDistance != couriers*perCourier {
		t.Errorf("positions in windows %d + late for distance %d = %d, want %d",
			inWindows, lateDistance, inWindows+lateDistance, couriers*perCourier)
	}
	if lateDistance == 0 {
		t.Errorf("got no late position; the input is meant to contain some")
	}
	if again := Run(p, input); !reflect.DeepEqual(got, again) {
		t.Errorf("two runs over the same input differ")
	}
}
