package lake_test

import (
	"context"
	"os"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/km0/edgeproc/lake"
)

// The files' columns are contract §7's: names, order, Parquet types,
// and only accuracy_m optional.
func TestFile_ColumnsAreTheContracts(t *testing.T) {
	dir := t.TempDir()
	w := open(t, lake.Options{Dir: dir, Market: "m"})
	appendAll(t, w, mkRows(1, 10, 1_767_614_400_000, 1000))
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	files, _ := lake.Files(dir)
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name     string
		kind     parquet.Kind
		utf8     bool
		optional bool
	}{
		{"courier", parquet.ByteArray, true, false},
		{"timestamp_ms", parquet.Int64, false, false},
		{"arrival_ms", parquet.Int64, false, false},
		{"lat", parquet.Double, false, false},
		{"lon", parquet.Double, false, false},
		{"accuracy_m", parquet.Double, false, true},
		{"late_distance", parquet.Boolean, false, false},
		{"late_session", parquet.Boolean, false, false},
	}
	fields := pf.Schema().Fields()
	if len(fields) != len(want) {
		t.Fatalf("%d columns, want %d", len(fields), len(want))
	}
	for i, c := range want {
		fl := fields[i]
		lt := fl.Type().LogicalType()
		isUTF8 := lt != nil && lt.String() == "STRING" // Parquet UTF8, as a logical type
		if fl.Name() != c.name || fl.Type().Kind() != c.kind || isUTF8 != c.utf8 || fl.Optional() != c.optional || fl.Repeated() {
			t.Errorf("column %d: %s %v utf8=%v optional=%v, want %s %v utf8=%v optional=%v",
				i, fl.Name(), fl.Type().Kind(), isUTF8, fl.Optional(), c.name, c.kind, c.utf8, c.optional)
		}
	}
}
