package lake_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/km0/edgeproc/lake"
)

// TestReadArrivalOrder_TiesAndFilesThatGoBack reads two series whose
// arrivals interleave, tie, and (in one file, not written by the
// service) go back: rows come by arrival_ms, then file name, then row.
func TestReadArrivalOrder_TiesAndFilesThatGoBack(t *testing.T) {
	dir := t.TempDir()
	type ref struct {
		arr  int64
		file string
		row  int
		id   string
	}
	var want []ref
	for s, arrivals := range [][]int64{
		{10, 20, 20, 30, 5, 6, 40, 40, 1}, // goes back twice
		{20, 20, 25, 40, 41},
	} {
		prefix := fmt.Sprintf("s%d-", s)
		// Row groups of 2 rows: runs start and end inside and across them.
		w := open(t, lake.Options{Dir: dir, Market: "m", Prefix: prefix, RowGroupRows: 2})
		for i, a := range arrivals {
			id := fmt.Sprintf("%s%d", prefix, i)
			if err := w.Append(&lake.Row{Index: uint64(i + 1), Courier: []byte(id), TimestampMs: 1_000_000, ArrivalMs: a}); err != nil {
				t.Fatal(err)
			}
			want = append(want, ref{a, prefix, i, id})
		}
		if err := w.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortStableFunc(want, func(a, b ref) int {
		return cmp.Or(cmp.Compare(a.arr, b.arr), cmp.Compare(a.file, b.file), cmp.Compare(a.row, b.row))
	})
	files, err := lake.Files(dir)
	if err != nil || len(files) != 2 {
		t.Fatalf("files %v, %v: want the two series' files", files, err)
	}
	var got []string
	err = lake.ReadArrivalOrder(files, func(r *lake.Row) error {
		got = append(got, string(r.Courier))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wantIDs []string
	for _, r := range want {
		wantIDs = append(wantIDs, r.id)
	}
	if !slices.Equal(got, wantIDs) {
		t.Errorf("order\n got %v\nwant %v", got, wantIDs)
	}
}
