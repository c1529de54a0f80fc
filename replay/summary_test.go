package replay

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/position"
)

func TestSummary_String(t *testing.T) {
	s := Summary{
		Lines: 12,
		Stats: engine.Stats{
			Received: 10, Accepted: 7,
			Rejected:   map[string]int64{position.Reasons[0].String(): 3},
			Duplicates: 1, LateDistance: 2, LateSession: 3, MissedMemberships: 4, Evicted: 5, DeadZoneRefused: 6,
			Results: map[string]int64{"distance": 8, "no_signal": 9, "dead_zone": 1, "rejected": 3},
		},
		Elapsed: 2 * time.Second,
	}
	got := s.String()
	for _, want := range []string{
		"replay: 10 positions, 7 accepted; rejected 3 (" + position.Reasons[0].String() + " 3)",
		"; duplicates 1; late distance 2, session 3; missed window memberships 4; couriers evicted 5; dead-zone warnings refused 6; results ",
		" dead_zone 1",
		"; 2s, 5 positions/s",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}

// A replay whose dead-zone window is full says how many warnings it
// refused: the two couriers 11 km apart go silent in one window of one
// cell.
func TestRun_SummaryCountsRefusedDeadZoneWarnings(t *testing.T) {
	const w = 600_000
	zb := (t0/w + 1) * w
	c := cfg()
	c.DeadZoneWindow, c.DeadZoneResolution, c.DeadZoneCells = w, 8, 1
	in := strings.Join([]string{pos("a", zb+10_000, 0, -1), pos("b", zb+10_000, 0.1, -1), pos("d", zb+1_000_000, 0, -1)}, "\n") + "\n"
	sum, err := Run(c, strings.NewReader(in), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sum.String(), "; dead-zone warnings refused 1; ") || !strings.Contains(sum.String(), " dead_zone 1") {
		t.Errorf("got %q, want one dead zone and one refused warning", sum)
	}
}
