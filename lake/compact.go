package lake

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/parquet-go/parquet-go"
)

// compactClosed merges the small files of every closed date of the
// series (see the package doc for when a date is closed).
func (w *Writer) compactClosed(now time.Time) error {
	w.mu.Lock()
	var due []string
	for date, n := range w.dates {
		if n < 2 {
			continue
		}
		if _, end, err := DateBounds(date, w.o.Location); err == nil && now.UnixMilli() >= end+w.o.CompactAfter.Milliseconds() {
			due = append(due, date)
		}
	}
	w.mu.Unlock()
	slices.Sort(due)
	for _, date := range due {
		n, err := w.compactDate(date)
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.dates[date] = n
		w.mu.Unlock()
	}
	return nil
}

// compactDate merges runs of consecutive small files of date into one
// file each, and returns how many files the date has after.
//
// Crash safety: the merged file is written whole under its final name
// (the range of the run) before any file of the run is removed, so at
// any moment each row is either in its small file, or in both (a file
// Open and readers then ignore, as the merged file covers its range).
func (w *Writer) compactDate(date string) (int, error) {
	dir := filepath.Join(w.dir, "date="+date)
	files, _, err := listSeries(dir, w.o.Prefix)
	if err != nil {
		return 0, fmt.Errorf("compact %s: %w", dir, err)
	}
	files, _ = covered(files)
	count := len(files)
	for _, run := range runs(files, w.o.CompactTarget) {
		path := filepath.Join(dir, fileName(w.o.Prefix, run[0].first, run[len(run)-1].last))
		if err := w.o.fence(); err != nil {
			return count, fmt.Errorf("compact: %w", err)
		}
		size, err := writeAtomic(path, func(out io.Writer) error { return w.merge(out, dir, run) })
		if err != nil {
			return count, fmt.Errorf("compact: %w", err)
		}
		if w.crashAt("compact:merged") {
			return count, errCrashed
		}
		for i, f := range run {
			if err := removeFile(filepath.Join(dir, f.name)); err != nil {
				return count, fmt.Errorf("compact: remove %s: %w", filepath.Join(dir, f.name), err)
			}
			if i == 0 && w.crashAt("compact:removing") {
				return count, errCrashed
			}
		}
		if err := syncDir(dir); err != nil {
			return count, fmt.Errorf("compact: sync %s: %w", dir, err)
		}
		count -= len(run) - 1
		w.mu.Lock()
		w.stats.Compactions++
		w.stats.BytesWritten += size
		w.mu.Unlock()
	}
	return count, nil
}

// runs groups consecutive files under target bytes into runs of at least
// two whose sizes add up to about target: a file already that large, or
// the file that takes a run past it, ends the run.
func runs(files []seriesFile, target int64) [][]seriesFile {
	var out [][]seriesFile
	var cur []seriesFile
	var sum int64
	flush := func() {
		if len(cur) >= 2 {
			out = append(out, cur)
		}
		cur, sum = nil, 0
	}
	for _, f := range files {
		if f.size >= target {
			flush()
			continue
		}
		cur = append(cur, f)
		if sum += f.size; sum >= target {
			flush()
		}
	}
	flush()
	return out
}

// merge copies the rows of run's files, in order, to out as one file.
func (w *Writer) merge(out io.Writer, dir string, run []seriesFile) error {
	pw := parquet.NewGenericWriter[fileRow](out, writerOptions(w.o.RowGroupRows)...)
	for _, f := range run {
		if err := copyFile(pw, filepath.Join(dir, f.name)); err != nil {
			return err
		}
	}
	return pw.Close()
}

func copyFile(pw *parquet.GenericWriter[fileRow], path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	for _, rg := range pf.RowGroups() {
		rows := rg.Rows()
		_, err := parquet.CopyRows(pw, rows)
		rows.Close()
		if err != nil {
			return fmt.Errorf("copy %s: %w", path, err)
		}
	}
	return nil
}
