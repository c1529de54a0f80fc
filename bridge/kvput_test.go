package bridge

import (
	"encoding/json"
	"math"
	"testing"
)

func TestAppendCourierState_AsEncodingJSON(t *testing.T) {
	states := []CourierState{
		{Courier: "van-3", Lat: 41.9794, Lon: 2.8214, TS: 1726308000000, Cell: "89394460c6fffff", Status: StatusOnline},
		{Courier: "c:1", Lat: -33.45, Lon: -70.666667, TS: 1, Cell: "", Status: StatusNoSignal},
		{Courier: "out", Lat: 41.9, Lon: 2.8, TS: 1, Cell: "89394460c6fffff", Status: StatusOnline, Area: AreaOutside},
		{Courier: "in", Lat: 41.9, Lon: 2.8, TS: 1, Status: StatusNoSignal, Area: AreaInside},
		{Courier: "odd", Lat: 1, Lon: 2, Area: "<\"\x01"}, // escaped
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
	f.Add("van-3", 41.9794, 2.8214, int64(1726308000000), "89394460c6fffff", StatusOnline, "")
	f.Add("q\"\\<", 1e-7, 1e22, int64(-1), "", "\xff", AreaOutside)
	f.Fuzz(func(t *testing.T, courier string, lat, lon float64, ts int64, cell, status, area string) {
		checkCourierState(t, CourierState{Courier: courier, Lat: lat, Lon: lon, TS: ts, Cell: cell, Status: status, Area: area})
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
