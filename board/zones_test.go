package board

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uber/h3-go/v4"

	"github.com/km0/edgeproc/result"
)

const hourMS = int64(time.Hour / time.Millisecond)

// t0 is a window end for the dead-zone tests: 2024-09-14 13:00 UTC.
const t0 = int64(1726318800000)

// zoneCells are four res-8 cells of Girona, named for the tests.
var zoneCells = func() map[string]h3.Cell {
	m := map[string]h3.Cell{}
	for i, name := range []string{"A", "B", "C", "D"} {
		m[name] = h3.LatLngToCell(h3.LatLng{Lat: 41.9794 + 0.02*float64(i), Lng: 2.8214}, 8)
	}
	return m
}()

func cellName(c h3.Cell) string {
	for name, cell := range zoneCells {
		if cell == c {
			return name
		}
	}
	return c.String()
}

// deadZone is the dead_zone result of the named cell over the hour ending
// at end.
func deadZone(cell string, end int64, warnings, couriers, restored int, silence, longest int64) *result.Record {
	return &result.Record{Type: result.DeadZone, Start: end - hourMS, End: end, Cell: zoneCells[cell],
		Zone: &result.Zone{Warnings: warnings, Couriers: couriers, Restored: restored, SilenceMs: silence, LongestMs: longest}}
}

// zoneText is a zone's figures, its window span relative to t0 in hours.
func zoneText(z ZoneUpdate) string {
	return fmt.Sprintf("%s w%d c%d r%d o%d s%d l%d n%d %+d..%+dh", cellName(z.Cell), z.Warnings, z.Couriers, z.Restored, z.Open,
		z.SilenceMS, z.LongestMS, z.Windows, (z.FirstStart-t0)/hourMS, (z.LastEnd-t0)/hourMS)
}

func zoneTexts(zs []ZoneUpdate) string {
	var out []string
	for _, z := range zs {
		out = append(out, zoneText(z))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// The dead-zone layer sums each cell's dead_zone results over the windows
// ending within 24 h of the newest window end, with the cell's outline.
func TestHub_DeadZoneLayer(t *testing.T) {
	tests := []struct {
		name  string
		fed   []*result.Record
		want  string // the snapshot's zones, by cell
		drops uint64
	}{
		{"one window", []*result.Record{deadZone("A", t0, 3, 2, 2, 130_000, 90_000)},
			"A w3 c2 r2 o1 s130000 l90000 n1 -1..+0h", 0},
		{"two windows of a cell summed, longest the longest",
			[]*result.Record{deadZone("A", t0, 3, 2, 2, 130_000, 90_000), deadZone("A", t0+2*hourMS, 2, 2, 1, 200_000, 200_000)},
			"A w5 c4 r3 o2 s330000 l200000 n2 -1..+2h", 0},
		{"cells apart", []*result.Record{deadZone("A", t0, 3, 2, 2, 130_000, 90_000), deadZone("B", t0, 1, 1, 0, 0, 0)},
			"A w3 c2 r2 o1 s130000 l90000 n1 -1..+0h; B w1 c1 r0 o1 s0 l0 n1 -1..+0h", 0},
		{"the same window again counted once",
			[]*result.Record{deadZone("A", t0, 3, 2, 2, 130_000, 90_000), deadZone("A", t0, 3, 2, 2, 130_000, 90_000)},
			"A w3 c2 r2 o1 s130000 l90000 n1 -1..+0h", 0},
		{"a window ending 24 h before the newest is left out",
			[]*result.Record{deadZone("A", t0+24*hourMS, 1, 1, 0, 0, 0), deadZone("B", t0, 1, 1, 0, 0, 0), deadZone("A", t0, 4, 1, 0, 0, 0)},
			"A w1 c1 r0 o1 s0 l0 n1 +23..+24h", 0},
		{"a window ending less than 24 h before the newest is kept",
			[]*result.Record{deadZone("A", t0+24*hourMS-1, 1, 1, 0, 0, 0), deadZone("B", t0, 1, 1, 0, 0, 0)},
			"A w1 c1 r0 o1 s0 l0 n1 +22..+23h; B w1 c1 r0 o1 s0 l0 n1 -1..+0h", 0},
		{"a newer window ages the older ones out",
			[]*result.Record{deadZone("B", t0, 1, 1, 0, 0, 0), deadZone("A", t0, 4, 1, 0, 0, 0), deadZone("A", t0+2*hourMS, 1, 1, 0, 0, 0),
				deadZone("C", t0+25*hourMS, 2, 1, 0, 0, 0)},
			"A w1 c1 r0 o1 s0 l0 n1 +1..+2h; C w2 c1 r0 o2 s0 l0 n1 +24..+25h", 0},
		// MaxDeadZoneCells is 2 below: 2 cells, 16 windows.
		{"over the cell cap the oldest window goes",
			[]*result.Record{deadZone("A", t0, 1, 1, 0, 0, 0), deadZone("B", t0+hourMS, 2, 1, 0, 0, 0), deadZone("A", t0+3*hourMS, 3, 1, 0, 0, 0),
				deadZone("C", t0+2*hourMS, 4, 1, 0, 0, 0)},
			// A's first window goes, then B's: C is in, A keeps its newer one.
			"A w3 c1 r0 o3 s0 l0 n1 +2..+3h; C w4 c1 r0 o4 s0 l0 n1 +1..+2h", 2},
		{"at the cell cap a window older than every kept one is dropped",
			[]*result.Record{deadZone("A", t0+hourMS, 1, 1, 0, 0, 0), deadZone("B", t0+hourMS, 2, 1, 0, 0, 0), deadZone("C", t0, 4, 1, 0, 0, 0)},
			"A w1 c1 r0 o1 s0 l0 n1 +0..+1h; B w2 c1 r0 o2 s0 l0 n1 +0..+1h", 1},
		{"over the window cap the oldest windows go", func() []*result.Record {
			var rs []*result.Record
			for i := range 20 {
				rs = append(rs, deadZone("A", t0+int64(i)*hourMS, 1, 1, 0, 0, 0))
			}
			return rs
		}(), "A w16 c16 r0 o16 s0 l0 n16 +3..+19h", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHub(t, func(c *Config) { c.MaxDeadZoneCells = 2 })
			f := h.Feed("a")
			for _, r := range tt.fed {
				f.Result(r)
			}
			_, u := openStream(t, serve(t, h).URL+"/board/events").next(t)
			if got := zoneTexts(u.Zones); got != tt.want {
				t.Errorf("zones %q, want %q", got, tt.want)
			}
			if u.ZonesDropped != tt.drops || len(u.ZonesGone) != 0 {
				t.Errorf("zones_dropped %d and %d gone, want %d and none", u.ZonesDropped, len(u.ZonesGone), tt.drops)
			}
			st := h.Stats()
			if st.DeadZonesDropped != tt.drops || st.DeadZones != len(u.Zones) || st.Refused != 0 {
				t.Errorf("stats %+v, want %d dropped and %d cells", st, tt.drops, len(u.Zones))
			}
			for _, z := range u.Zones {
				want := h3.CellToBoundary(z.Cell)
				if len(z.Boundary) != 6 || len(want) != 6 {
					t.Fatalf("cell %s: outline %v, want a hexagon", cellName(z.Cell), z.Boundary)
				}
				for i, p := range want {
					if math.Abs(z.Boundary[i].Lat-p.Lat) > 1e-7 || math.Abs(z.Boundary[i].Lng-p.Lng) > 1e-7 {
						t.Errorf("cell %s: outline point %d %v, want %v", cellName(z.Cell), i, z.Boundary[i], p)
					}
				}
			}
		})
	}
}

// A dead zone reaches pages in the next update, and a cell whose windows
// all passed out of the 24 h is sent as gone.
func TestHub_DeadZonesInUpdates(t *testing.T) {
	h := newHub(t, nil)
	f := h.Feed("a")
	s := openStream(t, serve(t, h).URL+"/board/events")
	if _, u := s.next(t); len(u.Zones) != 0 || len(u.ZonesGone) != 0 {
		t.Fatalf("snapshot with zones %+v, gone %+v", u.Zones, u.ZonesGone)
	}
	// next reads until an update carries the zones want (the two results
	// fed together may reach the hub in two drains).
	next := func(want string) Update {
		deadline := time.Now().Add(5 * time.Second)
		var got string
		for time.Now().Before(deadline) {
			_, u := s.next(t)
			if got = zoneTexts(u.Zones); got == want {
				return u
			}
		}
		t.Fatalf("no update with zones %q within 5s; last %q", want, got)
		return Update{}
	}
	f.Result(deadZone("A", t0, 3, 2, 2, 130_000, 90_000))
	f.Result(deadZone("A", t0+hourMS, 1, 1, 0, 0, 0))
	if u := next("A w4 c3 r2 o2 s130000 l90000 n2 -1..+1h"); len(u.ZonesGone) != 0 {
		t.Errorf("update: gone %v, want none", u.ZonesGone)
	}
	f.Result(deadZone("B", t0+25*hourMS, 1, 1, 1, 5000, 5000))
	if u := next("B w1 c1 r1 o0 s5000 l5000 n1 +24..+25h"); len(u.ZonesGone) != 1 || u.ZonesGone[0] != (ZoneKey{Cell: zoneCells["A"], Market: 0}) {
		t.Errorf("update: gone %+v, want A", u.ZonesGone)
	}
	// Sent once: the updates after it carry no zone.
	if _, u := s.next(t); len(u.Zones) != 0 || len(u.ZonesGone) != 0 {
		t.Errorf("the next update repeats zones %+v, gone %+v", u.Zones, u.ZonesGone)
	}
	if st := h.Stats(); st.DeadZones != 1 || st.DeadZonesDropped != 0 {
		t.Errorf("stats %+v, want 1 cell and none dropped", st)
	}
}

// A market's page shows its own dead zones only; a dead zone with no
// valid cell is refused.
func TestHub_DeadZonesByMarket(t *testing.T) {
	h := newHub(t, nil)
	h.Feed("b").Result(deadZone("A", t0, 3, 2, 2, 130_000, 90_000))
	h.Feed("a").Result(deadZone("B", t0, 1, 1, 0, 0, 0))
	bad := deadZone("C", t0, 1, 1, 0, 0, 0)
	bad.Cell = 0
	h.Feed("a").Result(bad)
	h.Feed("a").Result(&result.Record{Type: result.DeadZone, Cell: zoneCells["D"]}) // no figures: ignored
	srv := serve(t, h)
	for market, want := range map[string]string{
		"a": "B w1 c1 r0 o1 s0 l0 n1 -1..+0h",
		"b": "A w3 c2 r2 o1 s130000 l90000 n1 -1..+0h",
	} {
		_, u := openStream(t, srv.URL+"/board/events?market="+market).next(t)
		if got := zoneTexts(u.Zones); got != want || u.Zones[0].Market != 0 {
			t.Errorf("market %s: zones %q (%+v), want %q in market 0", market, got, u.Zones, want)
		}
	}
	_, u := openStream(t, srv.URL+"/board/events").next(t)
	markets := map[string]string{}
	for _, z := range u.Zones {
		markets[cellName(z.Cell)] = u.Markets[z.Market].Name
	}
	if fmt.Sprint(markets) != "map[A:b B:a]" {
		t.Errorf("every market's page: cells by market %v, want A in b and B in a", markets)
	}
	if st := h.Stats(); st.Refused != 1 || st.DeadZones != 2 {
		t.Errorf("stats %+v, want 1 refused and 2 cells", st)
	}
}
