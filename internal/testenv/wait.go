package testenv

import (
	"bytes"
	"os"
	"sync"
	"testing"
	"time"
)

// LogBuffer is a log destination that a test reads while the code under
// test writes to it from its own goroutines.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// WaitFor polls cond every 10 ms until it holds, and fails the test if it
// does not within d.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CheckMode reports a test error unless path's permission bits are want.
func CheckMode(tb testing.TB, path string, want os.FileMode) {
	tb.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		tb.Errorf("%s: mode %#o, want %#o", path, got, want)
	}
}
