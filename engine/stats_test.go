package engine

import (
	"reflect"
	"testing"
)

// TestStatsAdd_AddsEveryCounter sets every field of Stats to a distinct
// value and adds it twice: each counter must double, each gauge stay the
// caller's. A counter added to Stats and forgotten in Add fails here.
func TestStatsAdd_AddsEveryCounter(t *testing.T) {
	gauges := map[string]bool{"Couriers": true, "Watermark": true, "InFlight": true, "InFlightMax": true}
	var o Stats
	v := reflect.ValueOf(&o).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Int64, reflect.Int:
			f.SetInt(int64(i + 1))
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]int64{"k": int64(i + 1)}))
		default:
			t.Fatalf("Stats.%s: a field of kind %s; teach this test and Add about it", v.Type().Field(i).Name, f.Kind())
		}
	}
	var s Stats
	s.Add(o)
	s.Add(o)
	got := reflect.ValueOf(s)
	for i := range got.NumField() {
		name := got.Type().Field(i).Name
		want := int64(2 * (i + 1))
		if gauges[name] {
			want = 0
		}
		var g int64
		if f := got.Field(i); f.Kind() == reflect.Map {
			g = f.Interface().(map[string]int64)["k"]
		} else {
			g = f.Int()
		}
		if g != want {
			t.Errorf("Stats.%s after adding %d twice: got %d, want %d", name, i+1, g, want)
		}
	}
}
