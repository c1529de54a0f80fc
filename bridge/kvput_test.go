package bridge

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestAppendCourierState_AsEncodingJSON(t *testing.T) {
	states := []CourierState{
		{Courier: "van-3", Lat: 41.9794, Lon: 2.8214, TS: 1726308000000, Cell: "89394460c6fffff", Status: StatusOnline},
		{Courier: "c:1", Lat: -33.45, Lon: -70.666667, TS: 1, Cell: "", Status: StatusNoSignal},
		{Courier: "x", Lat: 0, Lon: math.Copysign(0, -1), TS: -5},
		{Courier: "tiny", Lat: 1e-7, Lon: -9.99e-7, TS: 0},         // exponent
		{Courier: "edge", Lat: 1e-6, Lon: 1e21, TS: math.MaxInt64}, // the switch points
		{Courier: `q"uo\te`, Lat: 1, Lon: 2},                       // escaped
		{Courier: "<b>&", Lat: 1, Lon: 2},                          // HTML-escaped
		{Courier: "ñandú", Lat: 1, Lon: 2},                         // non-ASCII
		{Courier: "ctl\x01", Lat: 1, Lon: 2, Status: "on\nline"},   // control characters
		{Courier: "max", Lat: math.MaxFloat64, Lon: -math.SmallestNonzeroFloat64},
	}
	for _, cs := range states {
		checkCourierState(t, cs)
	}
}

func FuzzAppendCourierState(f *testing.F) {
	f.Add("van-3", 41.9794, 2.8214, int64(1726308000000), "89394460c6fffff", StatusOnline)
	f.Add("q\"\\<", 1e-7, 1e22, int64(-1), "", "\xff")
	f.Fuzz(func(t *testing.T, courier string, lat, lon float64, ts int64, cell, status string) {
		checkCourierState(t, CourierState{Courier: courier, Lat: lat, Lon: lon, TS: ts, Cell: cell, Status: status})
	})
}

func checkCourierState(t *testing.T, cs CourierState) {
	t.Helper()
	want, wantErr := json.Marshal(cs)
	got, err := appendCourierState([]byte("prefix"), &cs)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%+v: error %v, encoding/json's %v", cs, err, wantErr)
	}
	if err == nil && string(got) != "prefix"+string(want) {
		t.Errorf("%+v:\n got %s\nwant prefix%s", cs, got, want)
	}
}

func TestPubAckError(t *testing.T) {
	noResponders := &nats.Msg{Header: nats.Header{"Status": []string{"503"}}}
	cases := []struct {
		name    string
		msg     *nats.Msg
		wantErr bool
		noStrm  bool
	}{
		{"ack", &nats.Msg{Data: []byte(`{"stream":"KV_x","seq":7}`)}, false, false},
		{"duplicate", &nats.Msg{Data: []byte(`{"stream":"KV_x","seq":7,"duplicate":true}`)}, false, false},
		{"stream named error", &nats.Msg{Data: []byte(`{"stream":"KV_\"error\"","seq":7}`)}, false, false},
		{"server error", &nats.Msg{Data: []byte(`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`)}, true, false},
		{"no stream", noResponders, true, true},
		{"empty, other status", &nats.Msg{Header: nats.Header{"Status": []string{"408"}}}, true, false},
	}
	for _, c := range cases {
		err := pubAckError(c.msg)
		if (err != nil) != c.wantErr {
			t.Errorf("%s: got %v, want error %v", c.name, err, c.wantErr)
		}
		if isNoStream(err) != c.noStrm {
			t.Errorf("%s: isNoStream(%v) = %v, want %v", c.name, err, isNoStream(err), c.noStrm)
		}
		if c.name == "server error" && err != nil && !strings.Contains(err.Error(), "maximum messages exceeded") {
			t.Errorf("%s: %v does not say the server's description", c.name, err)
		}
	}
}
