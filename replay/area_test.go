package replay

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// areaInput is an input for the service area's rule: couriers whose fixes
// jump between a point inside halfArea, one outside and one in its border
// band (with GPS-sized jitter), out of order, duplicated and late now and
// then, so that moves, cancelled moves, spikes and fixes not taken all
// happen.
func areaInput(r *rand.Rand, n int) []byte {
	const base = int64(1_750_000_000_000)
	points := [][2]float64{{41.012, 2.0}, {40.996, 2.0}, {41.004, 2.0}} // inside, outside, border
	couriers := []string{"a", "b", "c"}[:1+r.IntN(3)]
	var b bytes.Buffer
	ts := map[string]int64{}
	arrival := base
	for range n {
		c := couriers[r.IntN(len(couriers))]
		arrival += int64(r.IntN(8_000))
		ts[c] = max(ts[c], arrival-10_000) + int64(1+r.IntN(6_000))
		t := ts[c]
		switch r.IntN(10) {
		case 0:
			t -= int64(r.IntN(60_000)) // out of order
		case 1:
			t = ts[c] // a copy of the newest
		}
		p := points[min(r.IntN(5), 2)] // inside or outside mostly
		fmt.Fprintf(&b, `{"courier":%q,"lat":%.6f,"lon":%.6f,"timestamp_ms":%d,"arrival_ms":%d}`+"\n",
			c, p[0]+(r.Float64()-0.5)*0.0004, p[1]+(r.Float64()-0.5)*0.0004, t, arrival)
	}
	return b.Bytes()
}

// TestReplay_MatchesReference_Area compares the engine's moves across a
// service area with the reference's over random inputs and
// configurations, under 1-3 shards (compare), and requires that most
// inputs move somebody.
func TestReplay_MatchesReference_Area(t *testing.T) {
	const seeds = 60
	moved, total := 0, 0
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 11))
		c := randomConfig(r)
		c.Area = halfArea()
		n := compareCounts(t, fmt.Sprintf("seed %d", seed), c, areaInput(r, 30+r.IntN(200)))
		if n.moves > 0 {
			moved++
		}
		total += n.moves
	}
	if moved < seeds*3/4 {
		t.Errorf("%d of %d inputs moved a courier across the area; the inputs are meant to", moved, seeds)
	}
	t.Logf("%d of %d inputs moved a courier across the area, %d moves in all", moved, seeds, total)
}
