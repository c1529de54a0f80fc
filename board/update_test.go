package board

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/uber/h3-go/v4"

	where "github.com/km0/edgeproc/courier"
	"github.com/km0/edgeproc/result"
)

// What the hub encodes, DecodeMessage reads back: every field of a
// courier (outside the service area since ts/3 or not), of a market, of a
// dead-zone cell (the cell of the courier's position at resolution res,
// its window the hour ending at ts) and of a service area (that cell
// alone), whatever their values.
func FuzzEncodeDecode(f *testing.F) {
	f.Add("van-3", 41.9794, 2.8214, int64(1726308298000), false, true, false, 812.5, "girona", int32(0), uint8(8), 3, 2, 2, int64(130000), int64(90000), true)
	f.Add(`a"b\c`, -90.0, 180.0, int64(1), true, false, true, 0.0, "m-1", int32(2), uint8(15), 1, 1, 0, int64(0), int64(0), false)
	f.Add("pent", 64.70000012793487, 10.53619907546767, int64(1726308298000), false, false, false, 0.0, "m", int32(0), uint8(9), 1, 1, 0, int64(0), int64(0), true)
	f.Fuzz(func(t *testing.T, id string, lat, lon float64, ts int64, noSignal, hasDist, stopped bool, dist float64, market string, rev int32,
		res uint8, warnings, couriers, restored int, silence, longest int64, outside bool) {
		finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
		if id == "" || market == "" || !utf8.ValidString(id) || !utf8.ValidString(market) ||
			!finite(lat) || !finite(lon) || !finite(dist) || math.Abs(lat) > 1e9 || math.Abs(lon) > 1e9 {
			t.Skip("not a position the engine accepts")
		}
		if warnings < 0 || couriers < 0 || restored < 0 || silence < 0 || longest < 0 {
			t.Skip("not a dead zone the engine emits: its figures are counts and durations")
		}
		c := &courier{id: id, place: where.Place{Lat: lat, Lon: lon, TS: ts, Silent: noSignal}, hasDist: hasDist, stopped: stopped, dist: dist, distEnd: ts / 2, distRev: rev,
			hasMove: true, outside: outside, moveTS: ts / 3, stoppedSince: ts / 5}
		st := &state{
			cfg:      Config{Markets: []Market{{Name: market}}, Interval: time.Second, Tiles: "/t/{z}/{x}/{y}"},
			markets:  []marketView{{status: Status{MQTT: true, Watermark: ts, HasWatermark: true}}},
			dropped:  3,
			zones:    newZoneLayer(1),
			daily:    []*dailyView{{date: "2026-12-03", state: dailyOK, couriers: 1, distance: dist, top: []dailyTop{{id, dist, ts}}}},
			hasDaily: true,
		}
		cell := h3.LatLngToCell(h3.LatLng{Lat: lat, Lng: lon}, int(res%16))
		ze := zoneEvent{cell: cell, start: ts - time.Hour.Milliseconds(), end: ts,
			zone: result.Zone{Warnings: warnings, Couriers: couriers, Restored: restored, SilenceMs: silence, LongestMs: longest}}
		added := st.zones.add(&ze) // false: no valid cell, or the hour wraps around
		if cell.IsValid() {
			st.areas = []*outline{outlineOf([]h3.Cell{cell}, func(c h3.Cell) bool { return c == cell }, DefaultMaxAreaEdges)}
		}
		now := time.UnixMilli(1_700_000_000_000)
		u, err := DecodeMessage(st.encode(-1, now, []*courier{c}, st.zones.all(), true))
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Couriers) != 1 || len(u.Markets) != 1 {
			t.Fatalf("decoded %+v", u)
		}
		g := u.Couriers[0]
		if want := int64(0); c.state() == Stopped && g.StoppedSince != ts/5 || c.state() != Stopped && g.StoppedSince != want {
			t.Errorf("stopped since %d in state %v, want %d while stopped, else 0", g.StoppedSince, c.state(), ts/5)
		}
		if g.ID != id || g.TS != ts || g.State != c.state() || g.HasDistance != hasDist || g.WindowEnd != ts/2 || g.Revision != int(rev) ||
			g.Lat != lat || g.Lon != lon || g.Outside != outside || outside && g.OutsideSince != ts/3 || !outside && g.OutsideSince != 0 {
			t.Errorf("courier %+v, want %+v", g, c)
		}
		if hasDist && math.Abs(g.DistanceM-dist) > 0.05+1e-12*math.Abs(dist) {
			t.Errorf("distance %v, want %v", g.DistanceM, dist)
		}
		m := u.Markets[0]
		if m.Name != market || !m.MQTT || m.NATS || m.LagMS == nil || *m.LagMS != now.UnixMilli()-ts ||
			!u.Full || u.IntervalMS != 1000 || u.Tiles != "/t/{z}/{x}/{y}" || u.Dropped != 3 {
			t.Errorf("message %+v, market %+v", u, m)
		}
		checkArea(t, u.Areas, cell)
		if len(u.Daily) != 1 || len(u.Daily[0].Top) != 1 {
			t.Fatalf("daily %+v, want one market with one courier", u.Daily)
		}
		if d, top := u.Daily[0], u.Daily[0].Top[0]; d.Market != 0 || d.Date != "2026-12-03" || d.State != "ok" || d.Couriers != 1 ||
			top.Courier != id || top.Positions != ts || math.Abs(d.DistanceM-dist) > 0.05+1e-12*math.Abs(dist) || top.DistanceM != d.DistanceM {
			t.Errorf("daily %+v, want %s %v %d", d, id, dist, ts)
		}
		if !added {
			if len(u.Zones) != 0 || len(u.ZonesGone) != 0 {
				t.Errorf("zones %+v of a dead zone refused", u.Zones)
			}
			return
		}
		if len(u.Zones) != 1 || len(u.ZonesGone) != 0 || u.ZonesDropped != 0 {
			t.Fatalf("zones %+v, gone %+v, dropped %d; want one zone", u.Zones, u.ZonesGone, u.ZonesDropped)
		}
		z := u.Zones[0]
		if z.Cell != cell || z.Market != 0 || z.Warnings != warnings || z.Couriers != couriers || z.Restored != restored ||
			z.Open != warnings-restored || z.SilenceMS != silence || z.LongestMS != longest || z.Windows != 1 ||
			z.FirstStart != ze.start || z.LastEnd != ts {
			t.Errorf("zone %+v, want %+v", z, ze)
		}
		want := h3.CellToBoundary(cell)
		if len(z.Boundary) != len(want) {
			t.Fatalf("outline of %d points, want %d", len(z.Boundary), len(want))
		}
		for i, p := range want {
			if math.Abs(z.Boundary[i].Lat-p.Lat) > 1e-7 || math.Abs(z.Boundary[i].Lng-p.Lng) > 1e-7 {
				t.Errorf("outline point %d %v, want %v", i, z.Boundary[i], p)
			}
		}
	})
}

// checkArea requires areas to be the outline of cell alone (none when it
// is not a valid cell): one closed ring through the cell's vertices.
func checkArea(t *testing.T, areas []AreaUpdate, cell h3.Cell) {
	t.Helper()
	if !cell.IsValid() {
		if len(areas) != 0 {
			t.Errorf("areas %+v without an area", areas)
		}
		return
	}
	if len(areas) != 1 {
		t.Fatalf("areas %+v, want one", areas)
	}
	a, b := areas[0], h3.CellToBoundary(cell)
	if a.Market != 0 || a.Truncated || a.Edges != len(cell.DirectedEdges()) || len(a.Outline) != 1 {
		t.Fatalf("area %+v, want one ring of the %d edges of %s", a, len(cell.DirectedEdges()), cell)
	}
	ring := a.Outline[0]
	if len(ring) != len(b)+1 || ring[0] != ring[len(ring)-1] {
		t.Fatalf("ring %v, want a closed ring through the %d vertices %v", ring, len(b), b)
	}
	for _, p := range ring {
		near := false
		for _, q := range b {
			near = near || math.Abs(p.Lat-q.Lat) <= 1e-7 && math.Abs(p.Lng-q.Lng) <= 1e-7
		}
		if !near {
			t.Errorf("ring point %v is no vertex of %v", p, b)
		}
	}
}

func TestDecodeMessage_Rejects(t *testing.T) {
	for name, msg := range map[string]string{
		"no data":            "retry: 1000\n\n",
		"not JSON":           "data: {\n\n",
		"short courier":      `data: {"c":[["a",0,1]]}` + "\n\n",
		"no revision":        `data: {"c":[["a",0,1,2,3,1,null,0]]}` + "\n\n",
		"no outside":         `data: {"c":[["a",0,1,2,3,1,null,0,0]]}` + "\n\n",
		"long courier":       `data: {"c":[["a",0,1,2,3,1,null,0,0,null,0,0]]}` + "\n\n",
		"bad state":          `data: {"c":[["a",0,1,2,3,9,null,0,0,null]]}` + "\n\n",
		"bad outside":        `data: {"c":[["a",0,1,2,3,1,null,0,0,"x"]]}` + "\n\n",
		"courier no list":    `data: {"c":[{"id":"a"}]}` + "\n\n",
		"zone no outline":    `data: {"zones":[["883945cadbfffff",0,1,1,1,0,5,5,1,0,1]]}` + "\n\n",
		"zone short outline": `data: {"zones":[["883945cadbfffff",0,1,1,1,0,5,5,1,0,1,[[1,2],[3,4]]]]}` + "\n\n",
		"zone bad cell":      `data: {"zones":[["zz",0,1,1,1,0,5,5,1,0,1,[[1,2],[3,4],[5,6]]]]}` + "\n\n",
		"zone gone short":    `data: {"zones_gone":[["883945cadbfffff"]]}` + "\n\n",
		"area no market":     `data: {"areas":[{"edges":1,"outline":[[[1,2],[3,4]]]}]}` + "\n\n",
		"area one point":     `data: {"areas":[{"market":0,"edges":1,"outline":[[[1,2]]]}]}` + "\n\n",
		"area not a list":    `data: {"areas":[{"market":0,"edges":1,"outline":[1,2]}]}` + "\n\n",
	} {
		if _, err := DecodeMessage([]byte(msg)); err == nil {
			t.Errorf("%s: %q decoded", name, strings.TrimSpace(msg))
		}
	}
}
