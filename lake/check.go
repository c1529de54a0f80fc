package lake

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// CheckDir tells whether lake.dir can be written, leaving nothing behind:
// it writes, fsyncs and removes a probe file in dir, or, when dir does
// not exist yet, in its nearest existing parent (where Open would create
// it). Its error names the path and the reason ("permission denied",
// "read-only file system", "no space left on device", "not a
// directory"). The service calls it at start, and `edgeproc
// check-config` and `run` check every market's. An empty dir (no lake)
// passes.
func CheckDir(dir string) error {
	if dir == "" {
		return nil
	}
	fail := func(err error) error {
		if pe, ok := errors.AsType[*os.PathError](err); ok {
			err = pe.Err
		}
		return fmt.Errorf("lake.dir %s cannot be written: %w", dir, err)
	}
	at := dir
	for {
		st, err := os.Stat(at)
		if err == nil {
			if !st.IsDir() {
				return fail(fmt.Errorf("%s is not a directory", at))
			}
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fail(err)
		}
		parent := filepath.Dir(at)
		if parent == at {
			return fail(err)
		}
		at = parent
	}
	f, err := os.CreateTemp(at, ".edgeproc-lake-probe-*")
	if err != nil {
		return fail(err)
	}
	name := f.Name()
	defer os.Remove(name)
	_, err = f.Write(make([]byte, 4096))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	if err := os.Remove(name); err != nil {
		return fail(err)
	}
	return nil
}
