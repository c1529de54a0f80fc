package lake

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// seriesFile is one file of a series in a date folder.
type seriesFile struct {
	name        string
	first, last uint64
	size        int64
}

// listSeries returns the files of series prefix in folder dir, sorted by
// name (log order), and the temporary files it left there.
func listSeries(dir, prefix string) (files []seriesFile, tmps []string, err error) {
	return listRanges(dir, prefix, ".parquet")
}

// listRanges returns the files of folder dir named PREFIXFIRST-LASTSUFFIX
// (parseRange), sorted by name, and the temporary files of such names.
func listRanges(dir, prefix, suffix string) (files []seriesFile, tmps []string, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		n := e.Name()
		if t, ok := strings.CutPrefix(n, "."); ok && strings.HasSuffix(t, tmpSuffix) {
			if _, _, ok := parseRange(prefix, strings.TrimSuffix(t, tmpSuffix), suffix); ok {
				tmps = append(tmps, n)
			}
			continue
		}
		first, last, ok := parseRange(prefix, n, suffix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		var size int64
		if info, err := e.Info(); err == nil {
			size = info.Size()
		}
		files = append(files, seriesFile{name: n, first: first, last: last, size: size})
	}
	slices.SortFunc(files, func(a, b seriesFile) int { return strings.Compare(a.name, b.name) })
	return files, tmps, nil
}

// covered returns the files that lie inside another file's range: a
// compaction copied them into that one. files are sorted by name.
func covered(files []seriesFile) (live, dead []seriesFile) {
	s := slices.Clone(files)
	// By first, then the widest first: a covered file comes after the
	// file covering it.
	slices.SortFunc(s, func(a, b seriesFile) int {
		if a.first != b.first {
			return cmpU(a.first, b.first)
		}
		return cmpU(b.last, a.last)
	})
	var reach uint64
	for i, f := range s {
		if i > 0 && f.last <= reach {
			dead = append(dead, f)
			continue
		}
		live = append(live, f)
		reach = max(reach, f.last)
	}
	return live, dead
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// recover puts the series' date folders in order after a crash: it
// deletes temporary files, files of an interrupted roll (past the
// durable index: their rows come again from the log) and files a merged
// one covers (an interrupted compaction), and counts the rest per date.
func (w *Writer) recover() error {
	ents, err := os.ReadDir(w.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		date, ok := strings.CutPrefix(e.Name(), "date=")
		if !ok || !e.IsDir() {
			continue
		}
		dir := filepath.Join(w.dir, e.Name())
		files, tmps, err := listSeries(dir, w.o.Prefix)
		if err != nil {
			return err
		}
		var rm []string
		rm = append(rm, tmps...)
		var kept []seriesFile
		for _, f := range files {
			if f.first > w.durable {
				rm = append(rm, f.name)
			} else {
				kept = append(kept, f)
			}
		}
		live, dead := covered(kept)
		for _, f := range dead {
			rm = append(rm, f.name)
		}
		for _, n := range rm {
			if err := removeFile(filepath.Join(dir, n)); err != nil {
				return fmt.Errorf("remove %s: %w", filepath.Join(dir, n), err)
			}
		}
		if len(rm) > 0 {
			if err := syncDir(dir); err != nil {
				return fmt.Errorf("sync %s: %w", dir, err)
			}
		}
		if len(live) > 0 {
			w.dates[date] = len(live)
		}
	}
	return nil
}
