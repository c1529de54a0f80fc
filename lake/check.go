package lake

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// CheckDir makes sure lake.dir can be written: it creates the folder if
// needed and writes, fsyncs and removes a probe file there. Its error
// names the path and the reason ("permission denied", "read-only file
// system", "no space left on device"). The service calls it at start and
// `edgeproc check-config` too.
func CheckDir(dir string) error {
	if dir == "" {
		return nil
	}
	fail := func(err error) error {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("lake.dir %s cannot be written: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
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
	if err == nil {
		err = syncDir(filepath.Dir(name))
	}
	if err != nil {
		return fail(err)
	}
	return os.Remove(name)
}
