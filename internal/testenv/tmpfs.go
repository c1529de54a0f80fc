package testenv

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// Tmpfs mounts a tmpfs of size (mount's syntax, e.g. "2m") on a new
// temporary dir, for tests of a full disk, and unmounts it at cleanup. It
// needs root on Linux: without it the test fails, saying so; under -short
// (the fast loop) it is skipped.
func Tmpfs(tb testing.TB, size string) string {
	tb.Helper()
	SkipShort(tb, "a tmpfs (as root)")
	if runtime.GOOS != "linux" {
		tb.Fatalf("a tmpfs needs Linux, this is %s (go test -short skips the tests that need it)", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		tb.Fatal("mounting a tmpfs needs root: run the tests as root (scripts/test.sh in CI does), or go test -short to skip them")
	}
	if _, err := exec.LookPath("mount"); err != nil {
		tb.Fatalf("running as root on Linux but no mount command: %v", err)
	}
	dir := tb.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		tb.Fatalf("mount tmpfs on %s: %v: %s", dir, err, out)
	}
	// Registered after TempDir's, so it runs before the removal.
	// A process that just exited (a test's broker, say) may hold the mount
	// for a moment: retry, then detach it lazily rather than leave it.
	tb.Cleanup(func() {
		var out []byte
		var err error
		for i := 0; i < 20; i++ {
			if out, err = exec.Command("umount", dir).CombinedOutput(); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		tb.Logf("umount %s: %v: %s; detaching it lazily", dir, err, out)
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			tb.Errorf("umount -l %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// ResizeTmpfs changes the size of a tmpfs that Tmpfs mounted.
func ResizeTmpfs(tb testing.TB, dir, size string) {
	tb.Helper()
	if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
		tb.Fatalf("remount %s with size %s: %v: %s", dir, size, err, out)
	}
}
