package lake_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/km0/edgeproc/lake"
)

// FuzzReadFile feeds arbitrary bytes to the readers as a .parquet file
// (replay --in and daily read files nobody checked): an error, never a
// panic.
func FuzzReadFile(f *testing.F) {
	dir := f.TempDir()
	w, err := lake.Open(lake.Options{Dir: dir, Market: "m"})
	if err != nil {
		f.Fatal(err)
	}
	for i, rs := range [][]lake.Row{mkRows(1, 3, 1_700_000_000_000, 1000), mkRows(4, 40, 1_700_000_100_000, 10)} {
		for j := range rs {
			w.Append(&rs[j])
		}
		w.Close(context.Background())
		if i == 0 {
			w, _ = lake.Open(lake.Options{Dir: dir, Market: "m"})
		}
	}
	files, _ := lake.Files(dir)
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(bytes.Replace(b, []byte("arrival_ms"), []byte("arrival_xx"), 1))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "x.parquet")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		n := 0
		lake.ReadFile(p, func(*lake.Row) error { n++; return nil })
		lake.ReadArrivalOrder([]string{p}, func(*lake.Row) error { n++; return nil })
	})
}
