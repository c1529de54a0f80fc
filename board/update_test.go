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
// courier, of a market and of a dead-zone cell (the cell of the courier's
// position at resolution res, its window the hour ending at ts), whatever
// their values.
func FuzzEncodeDecode(f *testing.F) {
	f.Add("van-3", 41.9794, 2.8214, int64(1726308298000), false, true, false, 812.5, "girona", int32(0), uint8(8), 3, 2, 2, int64(130000), int64(90000))
	f.Add(`a"b\c`, -90.0, 180.0, int64(1), true, false, true, 0.0, "m-1", int32(2), uint8(15), 1, 1, 0, int64(0), int64(0))
	f.Fuzz(func(t *testing.T, id string, lat, lon float64, ts int64, noSignal, hasDist, stopped bool, dist float64, market string, rev int32,
		res uint8, warnings, couriers, restored int, silence, longest int64) {
		finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
		if id == "" || market == "" || !utf8.ValidString(id) || !utf8.ValidString(market) ||
			!finite(lat) || !finite(lon) || !finite(dist) || math.Abs(lat) > 1e9 || math.Abs(lon) > 1e9 {
			t.Skip("not a position the engine accepts")
		}
		c := &courier{id: id, place: where.Place{Lat: lat, Lon: lon, TS: ts, Silent: noSignal}, hasDist: hasDist, stopped: stopped, dist: dist, distEnd: ts / 2, distRev: rev}
		st := &state{
			cfg:     Config{Markets: []Market{{Name: market}}, Interval: time.Second, Tiles: "/t/{z}/{x}/{y}"},
			markets: []marketView{{status: Status{MQTT: true, Watermark: ts, HasWatermark: true}}},
			dropped: 3,
			zones:   newZoneLayer(1),
		}
		cell := h3.LatLngToCell(h3.LatLng{Lat: lat, Lng: lon}, int(res%16))
		ze := zoneEvent{cell: cell, start: ts - time.Hour.Milliseconds(), end: ts,
			zone: result.Zone{Warnings: warnings, Couriers: couriers, Restored: restored, SilenceMs: silence, LongestMs: longest}}
		added := st.zones.add(&ze) // false: no valid cell, or the hour wraps around
		now := time.UnixMilli(1_700_000_000_000)
		u, err := DecodeMessage(st.encode(-1, now, []*courier{c}, st.zones.all(), true))
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Couriers) != 1 || len(u.Markets) != 1 {
			t.Fatalf("decoded %+v", u)
		}
		g := u.Couriers[0]
		if g.ID != id || g.TS != ts || g.State != c.state() || g.HasDistance != hasDist || g.WindowEnd != ts/2 || g.Revision != int(rev) ||
			g.Lat != lat || g.Lon != lon {
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

func TestDecodeMessage_Rejects(t *testing.T) {
	for name, msg := range map[string]string{
		"no data":            "retry: 1000\n\n",
		"not JSON":           "data: {\n\n",
		"short courier":      `data: {"c":[["a",0,1]]}` + "\n\n",
		"no revision":        `data: {"c":[["a",0,1,2,3,1,null,0]]}` + "\n\n",
		"long courier":       `data: {"c":[["a",0,1,2,3,1,null,0,0,0]]}` + "\n\n",
		"bad state":          `data: {"c":[["a",0,1,2,3,9,null,0,0]]}` + "\n\n",
		"courier no list":    `data: {"c":[{"id":"a"}]}` + "\n\n",
		"zone no outline":    `data: {"zones":[["883945cadbfffff",0,1,1,1,0,5,5,1,0,1]]}` + "\n\n",
		"zone short outline": `data: {"zones":[["883945cadbfffff",0,1,1,1,0,5,5,1,0,1,[[1,2],[3,4]]]]}` + "\n\n",
		"zone bad cell":      `data: {"zones":[["zz",0,1,1,1,0,5,5,1,0,1,[[1,2],[3,4],[5,6]]]]}` + "\n\n",
		"zone gone short":    `data: {"zones_gone":[["883945cadbfffff"]]}` + "\n\n",
	} {
		if _, err := DecodeMessage([]byte(msg)); err == nil {
			t.Errorf("%s: %q decoded", name, strings.TrimSpace(msg))
		}
	}
}
