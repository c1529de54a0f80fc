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
// left out, and a lake root's daily/ tables), a glob, or a file. Files a merged one covers (the leftovers
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
				if d.IsDir() && d.Name() == DailyDir && isDir(filepath.Join(filepath.Dir(p), positionsDir)) {
					return filepath.SkipDir // a lake's root: daily tables are no positions
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

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
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

// columnKinds are the physical types Rows reads Columns as; the courier
// and accuracy_m are read as values (dictionary, nulls).
var columnKinds = [8]parquet.Kind{-1, parquet.Int64, parquet.Int64, parquet.Double, parquet.Double, -1, parquet.Boolean, parquet.Boolean}

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
		// The reads use neither the page index nor bloom filters; a
		// damaged page index made parquet-go's OpenFile panic (slice
		// bounds, FuzzReadFile), so neither is read.
		if pf, err = parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true)); err == nil {
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
			err = scanPage(p, buf, fn, &total)
			parquet.Release(p)
			if err != nil {
				pages.Close()
				return fmt.Errorf("read %s: %w", f.Path, err)
			}
		}
		pages.Close()
	}
	if total != f.pf.NumRows() {
		return fmt.Errorf("read %s: %d arrival_ms values for %d rows", f.Path, total, f.pf.NumRows())
	}
	return nil
}

// scanPage calls fn with an arrival_ms page's values, buf's length at a
// time, and adds their count to total.
func scanPage(p parquet.Page, buf []int64, fn func(vs []int64), total *int64) error {
	if p.NumNulls() > 0 {
		return errors.New("null arrival_ms")
	}
	r, ok := p.Values().(parquet.Int64Reader)
	if !ok {
		return errors.New("arrival_ms is not INT64")
	}
	for {
		n, err := r.ReadInt64s(buf)
		fn(buf[:n])
		*total += int64(n)
		if errors.Is(err, io.EOF) || n == 0 && err == nil {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Rows reads rows [from, to) of a file in order, column by column (page
// values, no reflection: several times faster than decoding rows into
// structs).
type Rows struct {
	f      *File
	cols   [8]column // in the order of Columns
	rg     int       // the row group the columns read
	rgEnd  int64     // the first row after it
	left   int64
	name   []byte
	Row    Row   // the current row, valid until the next call of Next
	RowNum int64 // its row number in the file
}

// column reads one column chunk's values, a page at a time: through
// the page's typed reader when it has one (plain INT64, DOUBLE and
// BOOLEAN pages), else as parquet.Values (dictionary pages, nulls).
// A page read to its end is released (parquet.Release), so that its
// buffers serve the next pages instead of being garbage.
type column struct {
	pages parquet.Pages
	page  parquet.Page // the page vals reads; nil: none
	vals  parquet.ValueReader
	kind  parquet.Kind
	typed bool // the page is read into i64, f64 or bl
	buf   []parquet.Value
	i64   []int64
	f64   []float64
	bl    []bool
	i, n  int
}

// fill reads the next values into the column's buffers.
func (c *column) fill() error {
	for {
		if c.vals != nil {
			var n int
			var err error
			switch {
			case !c.typed:
				n, err = c.vals.ReadValues(c.buf)
			case c.kind == parquet.Int64:
				n, err = c.vals.(parquet.Int64Reader).ReadInt64s(c.i64)
			case c.kind == parquet.Double:
				n, err = c.vals.(parquet.DoubleReader).ReadDoubles(c.f64)
			default:
				n, err = c.vals.(parquet.BooleanReader).ReadBooleans(c.bl)
			}
			c.i, c.n = 0, n
			if n > 0 {
				return nil
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
		}
		c.release() // every value read of it is used: a value column's are copied (Rows.Next)
		p, err := c.pages.ReadPage()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		c.page, c.vals = p, p.Values()
		c.typed = false
		if p.NumNulls() == 0 {
			switch c.kind {
			case parquet.Int64:
				_, c.typed = c.vals.(parquet.Int64Reader)
			case parquet.Double:
				_, c.typed = c.vals.(parquet.DoubleReader)
			case parquet.Boolean:
				_, c.typed = c.vals.(parquet.BooleanReader)
			}
		}
	}
}

// release gives the column's page back, if it holds one.
func (c *column) release() {
	if c.page != nil {
		parquet.Release(c.page)
		c.page, c.vals = nil, nil
	}
}

func (c *column) int64() (int64, error) {
	if c.i == c.n {
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	c.i++
	if c.typed {
		return c.i64[c.i-1], nil
	}
	return c.buf[c.i-1].Int64(), nil
}

func (c *column) double() (float64, error) {
	if c.i == c.n {
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	c.i++
	if c.typed {
		return c.f64[c.i-1], nil
	}
	return c.buf[c.i-1].Double(), nil
}

func (c *column) boolean() (bool, error) {
	if c.i == c.n {
		if err := c.fill(); err != nil {
			return false, err
		}
	}
	c.i++
	if c.typed {
		return c.bl[c.i-1], nil
	}
	return c.buf[c.i-1].Boolean(), nil
}

// value returns the next value as a parquet.Value (a dictionary or
// optional column's).
func (c *column) value() (parquet.Value, error) {
	if c.i == c.n || c.typed {
		if c.typed { // a column read as values is never typed
			return parquet.Value{}, errors.New("internal: typed read of a value column")
		}
		if err := c.fill(); err != nil {
			return parquet.Value{}, err
		}
	}
	c.i++
	return c.buf[c.i-1], nil
}

// Rows returns a reader of rows [from, to); chunk is how many values of
// a column it holds at a time.
func (f *File) Rows(from, to int64, chunk int) (*Rows, error) {
	rs := &Rows{f: f, rg: -1, left: to - from, RowNum: from - 1}
	for i, k := range columnKinds {
		c := &rs.cols[i]
		c.kind = k
		c.buf = make([]parquet.Value, chunk)
		switch k {
		case parquet.Int64:
			c.i64 = make([]int64, chunk)
		case parquet.Double:
			c.f64 = make([]float64, chunk)
		case parquet.Boolean:
			c.bl = make([]bool, chunk)
		}
	}
	if err := rs.seek(from); err != nil {
		rs.Close()
		return nil, fmt.Errorf("read %s: %w", f.Path, err)
	}
	return rs, nil
}

// seek opens the columns of the row group holding row, at row.
func (rs *Rows) seek(row int64) error {
	var start int64
	for g, rg := range rs.f.pf.RowGroups() {
		n := rg.NumRows()
		if row >= start+n {
			start += n
			continue
		}
		rs.closeCols()
		rs.rg, rs.rgEnd = g, start+n
		for i, name := range Columns {
			leaf, _ := rs.f.pf.Schema().Lookup(name)
			c := &rs.cols[i]
			c.pages, c.i, c.n = rg.ColumnChunks()[leaf.ColumnIndex].Pages(), 0, 0
			if row > start {
				if err := c.pages.SeekToRow(row - start); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if rs.left > 0 {
		return fmt.Errorf("row %d: the file has %d rows", row, start)
	}
	return nil
}

func (rs *Rows) closeCols() {
	for i := range rs.cols {
		rs.cols[i].release()
		if rs.cols[i].pages != nil {
			rs.cols[i].pages.Close()
			rs.cols[i].pages = nil
		}
	}
}

// Next moves to the next row; false at the end.
func (rs *Rows) Next() (bool, error) {
	if rs.left <= 0 {
		return false, nil
	}
	rs.RowNum++
	if rs.RowNum >= rs.rgEnd {
		if err := rs.seek(rs.RowNum); err != nil {
			return false, fmt.Errorf("read %s: %w", rs.f.Path, err)
		}
	}
	rs.left--
	r, c := &rs.Row, &rs.cols
	name, err := c[0].value()
	if err == nil {
		rs.name = append(rs.name[:0], name.ByteArray()...)
		r.Courier = rs.name
		r.TimestampMs, err = c[1].int64()
	}
	if err == nil {
		r.ArrivalMs, err = c[2].int64()
	}
	if err == nil {
		r.Lat, err = c[3].double()
	}
	if err == nil {
		r.Lon, err = c[4].double()
	}
	if err == nil {
		var acc parquet.Value
		acc, err = c[5].value()
		r.HasAccuracy, r.AccuracyM = !acc.IsNull(), 0
		if r.HasAccuracy {
			r.AccuracyM = acc.Double()
		}
	}
	if err == nil {
		r.LateDistance, err = c[6].boolean()
	}
	if err == nil {
		r.LateSession, err = c[7].boolean()
	}
	if err != nil {
		return false, fmt.Errorf("read %s: row %d: %w", rs.f.Path, rs.RowNum, err)
	}
	return true, nil
}

// Close releases the reader.
func (rs *Rows) Close() error {
	rs.closeCols()
	return nil
}

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
