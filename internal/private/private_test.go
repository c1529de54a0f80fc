package private

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/km0/edgeproc/internal/testenv"
)

func TestRestrict(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]os.FileMode{"wide": 0o644, "group": 0o640, "narrow": 0o400}
	want := map[string]os.FileMode{"wide": 0o600, "group": 0o600, "narrow": 0o400}
	for name, mode := range files {
		if err := os.WriteFile(filepath.Join(dir, name), nil, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, name), mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if errs := Restrict(dir); len(errs) != 0 {
		t.Fatalf("Restrict: %v", errs)
	}
	testenv.CheckMode(t, dir, 0o700)
	for name, mode := range want {
		testenv.CheckMode(t, filepath.Join(dir, name), mode)
	}
	if errs := Restrict(filepath.Join(dir, "missing")); len(errs) == 0 {
		t.Error("Restrict of a missing dir: no error")
	}
}
