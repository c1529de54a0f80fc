package board

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	where "github.com/km0/edgeproc/courier"
)

// What the hub encodes, DecodeMessage reads back: every field of a
// courier and of a market, whatever their values.
func FuzzEncodeDecode(f *testing.F) {
	f.Add("van-3", 41.9794, 2.8214, int64(1726308298000), false, true, false, 812.5, "girona", int32(0))
	f.Add(`a"b\c`, -90.0, 180.0, int64(1), true, false, true, 0.0, "m-1", int32(2))
	f.Fuzz(func(t *testing.T, id string, lat, lon float64, ts int64, noSignal, hasDist, stopped bool, dist float64, market string, rev int32) {
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
		}
		now := time.UnixMilli(1_700_000_000_000)
		u, err := DecodeMessage(st.encode(-1, now, []*courier{c}, true))
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
	})
}

func TestDecodeMessage_Rejects(t *testing.T) {
	for name, msg := range map[string]string{
		"no data":         "retry: 1000\n\n",
		"not JSON":        "data: {\n\n",
		"short courier":   `data: {"c":[["a",0,1]]}` + "\n\n",
		"no revision":     `data: {"c":[["a",0,1,2,3,1,null,0]]}` + "\n\n",
		"long courier":    `data: {"c":[["a",0,1,2,3,1,null,0,0,0]]}` + "\n\n",
		"bad state":       `data: {"c":[["a",0,1,2,3,9,null,0,0]]}` + "\n\n",
		"courier no list": `data: {"c":[{"id":"a"}]}` + "\n\n",
	} {
		if _, err := DecodeMessage([]byte(msg)); err == nil {
			t.Errorf("%s: %q decoded", name, strings.TrimSpace(msg))
		}
	}
}
