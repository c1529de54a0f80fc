// Package private keeps edgeproc's state files (write-ahead log,
// checkpoints) readable by their owner only: they hold courier ids and
// positions.
package private

import (
	"fmt"
	"os"
	"path/filepath"
)

// Modes for state directories and the files in them.
const (
	DirMode  os.FileMode = 0o700
	FileMode os.FileMode = 0o600
)

// Restrict takes group and other access away from dir and the regular files
// directly in it, for state an older edgeproc created with wider modes
// (0750/0640, 0755/0644). Modes that are already narrower are kept. It
// returns one error per path it could not change (not its owner, say); the
// caller logs them: the state still works, it is only less private.
func Restrict(dir string) []error {
	var errs []error
	chmod := func(path string, mode os.FileMode) {
		fi, err := os.Stat(path)
		if err == nil && fi.Mode().Perm()&^mode == 0 {
			return
		}
		if err == nil {
			err = os.Chmod(path, fi.Mode().Perm()&mode)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("restrict %s to %#o: %w", path, mode, err))
		}
	}
	chmod(dir, DirMode)
	des, err := os.ReadDir(dir)
	if err != nil {
		return append(errs, fmt.Errorf("restrict files in %s: %w", dir, err))
	}
	for _, de := range des {
		if de.Type().IsRegular() {
			chmod(filepath.Join(dir, de.Name()), FileMode)
		}
	}
	return errs
}
