package zonemap

import (
	"bytes"
	"strings"
	"testing"
)

const zoneA = `{"type":"dead_zone","window_start_ms":0,"window_end_ms":600000,"cell":"883945cadbfffff","warnings":2,"couriers":2,"restored":1,"open":1,"silence_ms":65000,"longest_silence_ms":65000}`

func TestSet_AddsEachWindowOnce(t *testing.T) {
	zs := NewSet()
	for range 2 {
		if err := zs.Add([]byte(zoneA)); err != nil {
			t.Fatal(err)
		}
	}
	if zs.Cells() != 1 || zs.Windows() != 1 {
		t.Fatalf("%d cells, %d windows; want the window counted once", zs.Cells(), zs.Windows())
	}
	var b bytes.Buffer
	if err := zs.WriteGeoJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"warnings":2,"couriers":2,"restored":1,"open":1,"silence_ms":65000`) || !strings.Contains(b.String(), `"mean_silence_s":65`) {
		t.Errorf("got %s", b.String())
	}
	for _, bad := range []string{`{"type":"no_signal"}`, `{"type":"dead_zone","cell":"zz"}`, `not json`} {
		if err := zs.Add([]byte(bad)); err == nil {
			t.Errorf("Add(%s): accepted", bad)
		}
	}
}

// Lines takes the dead zones of a replay's output, written in pieces,
// and says when the last line has no end.
func TestLines(t *testing.T) {
	zs := NewSet()
	w := &Lines{Set: zs}
	out := `{"type":"distance","courier":"a"}` + "\n" + zoneA + "\n"
	for i := 0; i < len(out); i += 7 {
		if _, err := w.Write([]byte(out[i:min(i+7, len(out))])); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil || zs.Windows() != 1 {
		t.Fatalf("close: %v, %d windows; want nil and 1", err, zs.Windows())
	}
	w.Write([]byte(`{"type":"dead_zone"`))
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "result line 3: no line end") {
		t.Errorf("a cut line: got %v", err)
	}
}
