package lake

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// chunkRows is how many rows go to the Parquet writer at a time.
const chunkRows = 4096

func writerOptions(rowGroupRows int) []parquet.WriterOption {
	return []parquet.WriterOption{
		parquet.MaxRowsPerRowGroup(int64(rowGroupRows)),
		parquet.CreatedBy("edgeproc", "", ""),
	}
}

// WriteFileAtomic writes a file at path through fill as the lake writes
// its own: see writeAtomic. `edgeproc daily` writes its tables with it.
func WriteFileAtomic(path string, fill func(w io.Writer) error) (int64, error) {
	if err := mkdirSynced(filepath.Dir(path)); err != nil {
		return 0, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	return writeAtomic(path, fill)
}

// writeAtomic writes a file at path through fill: under a temporary name
// in the same folder, fsynced, renamed over path, the folder fsynced.
// Whatever happens, no partial file is left under path's name; a
// temporary one may be (Open deletes it). It returns the file's size.
func writeAtomic(path string, fill func(w io.Writer) error) (int64, error) {
	dir, name := filepath.Split(path)
	tmp := filepath.Join(dir, "."+name+tmpSuffix)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", tmp, err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	var size int64
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil {
			size = st.Size()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		os.Remove(tmp) // best effort: Open deletes what is left
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	return size, nil
}

// syncDir fsyncs a folder, so that a rename or removal in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// mkdirSynced creates dir and its missing parents, fsyncing each parent
// whose entries changed.
func mkdirSynced(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirSynced(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return syncDir(parent)
}

// writeRows writes rows n..m of d as one Parquet file.
func writeDate(w io.Writer, d *dateBuf, rowGroupRows int) error {
	pw := parquet.NewGenericWriter[fileRow](w, writerOptions(rowGroupRows)...)
	rows := make([]fileRow, chunkRows)
	acc := make([]float64, chunkRows)
	for from := 0; from < d.len(); from += chunkRows {
		n := min(chunkRows, d.len()-from)
		d.fill(rows[:n], acc, from)
		if _, err := pw.Write(rows[:n]); err != nil {
			return err
		}
	}
	return pw.Close()
}

// marker is the file recording a series' durable index.
func markerPath(dir, market, prefix string) string {
	return filepath.Join(dir, durableDir, "market="+market, prefix+"durable")
}

func readMarker(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read %s: not a log index: %q", path, b)
	}
	return v, nil
}

func writeMarker(path string, v uint64) error {
	_, err := writeAtomic(path, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%d\n", v)
		return err
	})
	return err
}
