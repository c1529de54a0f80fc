package lake

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
)

// run is a stretch of a file's rows whose arrival_ms never goes back.
type run struct {
	file       int // index in the paths given
	start, end int64
	first      int64 // arrival_ms of its first row
}

// source is an open run, at its current row.
type source struct {
	run
	f    *File
	rows *Rows
}

func (s *source) less(t *source) bool {
	a, b := s.rows.Row.ArrivalMs, t.rows.Row.ArrivalMs
	if a != b {
		return a < b
	}
	if s.file != t.file {
		return s.file < t.file
	}
	return s.rows.RowNum < t.rows.RowNum
}

type sourceHeap []*source

func (h sourceHeap) Len() int           { return len(h) }
func (h sourceHeap) Less(i, j int) bool { return h[i].less(h[j]) }
func (h sourceHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *sourceHeap) Push(x any)        { *h = append(*h, x.(*source)) }
func (h *sourceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// ReadArrivalOrder calls fn with every row of the files at paths (in log
// order, as Files returns them) in arrival order: by arrival_ms, ties by
// the file's place in paths, then by row (contract §9, replay --in).
//
// A first pass reads only the arrival_ms column, to cut each file into
// runs in which it never goes back (a file the Writer wrote is one run);
// the runs are then merged, each read a chunk at a time and opened only
// when the merge reaches its first row, so memory and open files follow
// the runs that overlap in time, not the input's size. Row.Index is the
// row's number in its file. The Row is valid only during the call.
func ReadArrivalOrder(paths []string, fn func(r *Row) error) error {
	var runs []run
	for i, p := range paths {
		f, err := OpenFile(p)
		if err != nil {
			return err
		}
		var row int64
		var prev int64
		cur := run{file: i}
		err = f.scanArrivals(func(vs []int64) {
			for _, v := range vs {
				if row == 0 {
					cur.first = v
				} else if v < prev {
					cur.end = row
					runs = append(runs, cur)
					cur = run{file: i, start: row, first: v}
				}
				prev = v
				row++
			}
		})
		f.Close()
		if err != nil {
			return err
		}
		if row > 0 {
			cur.end = row
			runs = append(runs, cur)
		}
	}
	slices.SortFunc(runs, func(a, b run) int {
		return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.file, b.file), cmp.Compare(a.start, b.start))
	})
	h := &sourceHeap{}
	defer func() {
		for _, s := range *h {
			s.rows.Close()
			s.f.Close()
		}
	}()
	next := 0
	for {
		// Open every run whose first row comes before the heap's least.
		for next < len(runs) {
			r := runs[next]
			if h.Len() > 0 {
				top := (*h)[0]
				if top.rows.Row.ArrivalMs < r.first || top.rows.Row.ArrivalMs == r.first &&
					(top.file < r.file || top.file == r.file && top.rows.RowNum < r.start) {
					break
				}
			}
			s, err := openRun(paths[r.file], r)
			if err != nil {
				return err
			}
			heap.Push(h, s)
			next++
		}
		if h.Len() == 0 {
			return nil
		}
		s := (*h)[0]
		s.rows.Row.Index = uint64(s.rows.RowNum)
		if err := fn(&s.rows.Row); err != nil {
			return err
		}
		ok, err := s.rows.Next()
		if err != nil {
			return err
		}
		if ok {
			heap.Fix(h, 0)
			continue
		}
		heap.Pop(h)
		s.rows.Close()
		s.f.Close()
	}
}

func openRun(path string, r run) (*source, error) {
	f, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	rows, err := f.Rows(r.start, r.end, 1024)
	if err == nil {
		var ok bool
		if ok, err = rows.Next(); err == nil && !ok {
			err = fmt.Errorf("read %s: run of rows %d-%d is empty", path, r.start, r.end)
		}
		if err == nil {
			return &source{run: r, f: f, rows: rows}, nil
		}
		rows.Close()
	}
	f.Close()
	return nil, err
}
