package engine

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/result"
)

// sideArea is a square of about 11 × 8 km round (41.05, 2.05).
var sideArea = sync.OnceValue(func() *geo.Area {
	a, err := geo.ParseArea("square", []byte(`{"type":"Polygon","coordinates":[[[2,41],[2.1,41],[2.1,41.1],[2,41.1],[2,41]]]}`), geo.AreaResolution)
	if err != nil {
		panic(err)
	}
	return a
})

type sideCall struct {
	courier string
	ts      int64
	outside bool
}

type sideLog struct {
	mu    sync.Mutex
	calls []sideCall
}

func (l *sideLog) on(courier string, ts int64, outside bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, sideCall{courier, ts, outside})
}

func (l *sideLog) sorted() []sideCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.calls)
	slices.SortFunc(out, func(a, b sideCall) int {
		if a.courier != b.courier {
			return bytes.Compare([]byte(a.courier), []byte(b.courier))
		}
		return int(a.ts - b.ts)
	})
	return out
}

func fixAt(courier string, ts int64, lat, lon float64) Input {
	return Input{
		Payload: fmt.Appendf(nil, `{"courier":%q,"lat":%v,"lon":%v,"timestamp_ms":%d}`, courier, lat, lon, ts),
		Topic:   "km0/m/positions/" + courier, Arrival: ts + 100, HasArrival: true,
	}
}

// OnSide tells each courier's side once, when it is first known: the
// first fix out of the border band, whichever side, and never for a
// courier whose side the engine first learns by a move (that is the
// left_area or entered_area result). The results are those of an engine
// without it: the first side is still no move.
func TestEngine_OnSideTellsTheFirstSide(t *testing.T) {
	const (
		inLat, inLon     = 41.05, 2.05 // the square's centre
		outLat, outLon   = 40.90, 2.05 // 11 km south
		bandLat, bandLon = 41.0, 2.05  // on the edge: the border band
	)
	ins := []Input{
		fixAt("in", t0, inLat, inLon),
		fixAt("out", t0+1, outLat, outLon),
		fixAt("band", t0+2, bandLat, bandLon),
		fixAt("in", t0+5000, inLat, inLon),
		fixAt("out", t0+5001, outLat, outLon),
		fixAt("band", t0+5002, outLat, outLon), // first out of the band: outside
		fixAt("in", t0+10_000, outLat, outLon), // two fixes outside: left_area
		fixAt("in", t0+15_000, outLat, outLon),
		fixAt("out", t0+10_001, inLat, inLon),
		fixAt("out", t0+15_001, inLat, inLon), // entered_area
	}
	run := func(onSide func(string, int64, bool)) *collector {
		cfg := liveConfig()
		cfg.Area, cfg.OnSide = sideArea(), onSide
		var c collector
		e := New(cfg, c.sink)
		for i := range ins {
			e.Push(&ins[i])
		}
		e.EndOfInput()
		return &c
	}
	var log sideLog
	with, without := run(log.on), run(nil)
	want := []sideCall{{"band", t0 + 5002, true}, {"in", t0, false}, {"out", t0 + 1, true}}
	if got := log.sorted(); !slices.Equal(got, want) {
		t.Errorf("OnSide calls %v, want %v", got, want)
	}
	if a, b := encode(with.recs), encode(without.recs); !bytes.Equal(a, b) {
		t.Errorf("OnSide changed the results:\n%s\nwithout it:\n%s", a, b)
	}
	if n, m := len(with.ofType(result.LeftArea)), len(with.ofType(result.EnteredArea)); n != 1 || m != 1 {
		t.Errorf("%d left_area and %d entered_area, want 1 and 1", n, m)
	}
}

// A restored engine tells each courier's side again at its first fix:
// the live views it feeds start empty after a restart. A courier whose
// first fix after the restore completes a move is told by the result.
func TestEngine_OnSideAfterRestore(t *testing.T) {
	cfg := liveConfig()
	cfg.Area = sideArea()
	before := []Input{
		fixAt("a", t0, 40.90, 2.05),      // outside
		fixAt("b", t0+1, 41.05, 2.05),    // inside
		fixAt("b", t0+5001, 40.90, 2.05), // one fix out: a move pending
	}
	snap := snapshotOf(t, cfg, before)
	var log sideLog
	cfg.OnSide = log.on
	var c collector
	e, _, err := Restore(cfg, c.sink, snap)
	if err != nil {
		t.Fatal(err)
	}
	after := []Input{fixAt("a", t0+10_000, 40.90, 2.05), fixAt("b", t0+10_001, 40.90, 2.05), fixAt("a", t0+15_000, 40.90, 2.05)}
	for i := range after {
		e.Push(&after[i])
	}
	e.EndOfInput()
	if got, want := log.sorted(), []sideCall{{"a", t0 + 10_000, true}}; !slices.Equal(got, want) {
		t.Errorf("OnSide calls after the restore %v, want %v", got, want)
	}
	if left := c.ofType(result.LeftArea); len(left) != 1 || left[0].Courier != "b" || left[0].TS != t0+5001 {
		t.Errorf("left_area results %+v, want b's, dated %d", left, t0+5001)
	}
}
