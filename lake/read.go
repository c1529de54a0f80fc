package lake

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// Files expands what a user names as lake input (`replay --in`, tests):
// a folder (every *.parquet beneath it, hidden and _-prefixed entries
// left out), a glob, or a file. Files a merged one covers (the leftovers
// of an interrupted compaction) are left out, so every row is read once.
// The result is in log order: by file name, then path.
func Files(inputs ...string) ([]string, error) {
	var paths []string
	for _, in := range inputs {
		matches := []string{in}
		if strings.ContainsAny(in, "*?[") {
			var err error
			if matches, err = filepath.Glob(in); err != nil {
				return nil, fmt.Errorf("%s: %w", in, err)
			}
			if len(matches) == 0 {
				return nil, fmt.Errorf("%s: no file matches", in)
			}
		}
		for _, m := range matches {
			st, err := os.Stat(m)
			if err != nil {
				return nil, err
			}
			if !st.IsDir() {
				paths = append(paths, m)
				continue
			}
			err = filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if n := d.Name(); p != m && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
					if d.IsDir() {
						return filepath.SkipDir
					}
					return nil
				}
				if !d.IsDir() && strings.HasSuffix(d.Name(), ".parquet") {
					paths = append(paths, p)
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)
	paths = dropCovered(paths)
	slices.SortStableFunc(paths, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	return paths, nil
}

// dropCovered leaves out the files of this package's naming that another
// file of the same folder and series covers.
func dropCovered(paths []string) []string {
	type key struct{ dir, prefix string }
	groups := map[key][]seriesFile{}
	for _, p := range paths {
		if prefix, first, last, ok := splitName(filepath.Base(p)); ok {
			k := key{filepath.Dir(p), prefix}
			groups[k] = append(groups[k], seriesFile{name: p, first: first, last: last})
		}
	}
	dead := map[string]bool{}
	for _, fs := range groups {
		_, d := covered(fs)
		for _, f := range d {
			dead[f.name] = true
		}
	}
	return slices.DeleteFunc(paths, func(p string) bool { return dead[p] })
}

// File is an open positions file.
type File struct {
	Path string
	f    *os.File
	pf   *parquet.File
}

// OpenFile opens a Parquet file of positions: it must have the columns
// of contract §7 (others are ignored).
func OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil {
		var pf *parquet.File
		if pf, err = parquet.OpenFile(f, st.Size()); err == nil {
			for _, c := range Columns {
				if _, ok := pf.Schema().Lookup(c); !ok {
					err = fmt.Errorf("no column %s", c)
					break
				}
			}
			if err == nil {
				return &File{Path: path, f: f, pf: pf}, nil
			}
		}
	}
	f.Close()
	return nil, fmt.Errorf("read %s: %w", path, err)
}

// NumRows is the file's row count.
func (f *File) NumRows() int64 { return f.pf.NumRows() }

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// scanArrivals calls fn with the file's arrival_ms column, a page's
// values at a time, in row order.
func (f *File) scanArrivals(fn func(vs []int64)) error {
	leaf, _ := f.pf.Schema().Lookup("arrival_ms")
	var total int64
	buf := make([]int64, 4096)
	for _, rg := range f.pf.RowGroups() {
		pages := rg.ColumnChunks()[leaf.ColumnIndex].Pages()
		for {
			p, err := pages.ReadPage()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				pages.Close()
				return fmt.Errorf("read %s: %w", f.Path, err)
			}
			if p.NumNulls() > 0 {
				pages.Close()
				return fmt.Errorf("read %s: null arrival_ms", f.Path)
			}
			r, ok := p.Values().(parquet.Int64Reader)
			if !ok {
				pages.Close()
				return fmt.Errorf("read %s: arrival_ms is not INT64", f.Path)
			}
			for {
				n, err := r.ReadInt64s(buf)
				fn(buf[:n])
				total += int64(n)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					pages.Close()
					return fmt.Errorf("read %s: %w", f.Path, err)
				}
			}
		}
		pages.Close()
	}
	if total != f.pf.NumRows() {
		return fmt.Errorf("read %s: %d arrival_ms values for %d rows", f.Path, total, f.pf.NumRows())
	}
	return nil
}

// Rows reads rows [from, to) of the file in order, a chunk at a time.
type Rows struct {
	f      *File
	r      *parquet.GenericReader[fileRow]
	buf    []fileRow
	i, n   int
	left   int64
	Row    Row   // the current row, valid until the next call of Next
	RowNum int64 // its row number in the file
}

// Rows returns a reader of rows [from, to); chunk is how many rows it
// holds at a time.
func (f *File) Rows(from, to int64, chunk int) (*Rows, error) {
	r := parquet.NewGenericReader[fileRow](f.pf)
	if from > 0 {
		if err := r.SeekToRow(from); err != nil {
			r.Close()
			return nil, fmt.Errorf("read %s: %w", f.Path, err)
		}
	}
	return &Rows{f: f, r: r, buf: make([]fileRow, chunk), left: to - from, RowNum: from - 1}, nil
}

// Next moves to the next row; false at the end or on error (see Err).
func (rs *Rows) Next() (bool, error) {
	if rs.i == rs.n {
		if rs.left <= 0 {
			return false, nil
		}
		clear(rs.buf)
		n, err := rs.r.Read(rs.buf[:min(int64(len(rs.buf)), rs.left)])
		if n == 0 {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return false, fmt.Errorf("read %s: %w", rs.f.Path, err)
		}
		rs.i, rs.n = 0, n
		rs.left -= int64(n)
	}
	toRow(&rs.buf[rs.i], &rs.Row)
	rs.i++
	rs.RowNum++
	return true, nil
}

// Close releases the reader.
func (rs *Rows) Close() error { return rs.r.Close() }

// ReadFile calls fn with every row of the file at path, in order. The
// Row is valid only during the call.
func ReadFile(path string, fn func(r *Row) error) error {
	f, err := OpenFile(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rs, err := f.Rows(0, f.NumRows(), 4096)
	if err != nil {
		return err
	}
	defer rs.Close()
	for {
		ok, err := rs.Next()
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err := fn(&rs.Row); err != nil {
			return err
		}
	}
}
