package testenv

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Main runs a package's tests (call it from TestMain) and, should they
// still run after limit, reports where the code of this module is blocked
// and exits. go test's own -timeout prints every goroutine, the module's
// few among hundreds of the NATS client's and server's, and a CI log that
// keeps only its tail loses them; this report ends with one line per
// goroutine that is in the module's code, the test's own first.
func Main(m *testing.M, limit time.Duration) {
	t := time.AfterFunc(limit, func() {
		fmt.Fprintf(os.Stderr, "\ntestenv: the tests still run after %v; goroutines in edgeproc code:\n%s", limit, Blocked())
		os.Exit(2)
	})
	code := m.Run()
	t.Stop()
	os.Exit(code)
}

// Blocked summarises every goroutine with a frame of this module: its
// state and the module frames of its stack, innermost first, test
// goroutines last so that they end the output.
func Blocked() string {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var tests, others []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		lines := strings.Split(string(g), "\n")
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		var frames []string
		isTest := false
		for i := 1; i+1 < len(lines); i += 2 {
			fn := lines[i]
			if !strings.Contains(fn, "km0/edgeproc/") || strings.Contains(fn, "testenv.Blocked") || strings.Contains(fn, "testenv.Main") || strings.Contains(fn, ".TestMain(") {
				continue
			}
			created := strings.HasPrefix(fn, "created by ")
			if strings.Contains(fn, ".Test") && !created {
				isTest = true
			}
			name := fn[strings.LastIndex(fn, "/")+1:]
			if j := strings.Index(name, "("); j > 0 {
				name = name[:j]
			}
			loc := strings.TrimSpace(lines[i+1])
			if j := strings.LastIndex(loc, " +0x"); j > 0 {
				loc = loc[:j]
			}
			if created {
				name = "created by " + name
			}
			frames = append(frames, name+" "+loc[strings.LastIndex(loc, "/")+1:])
		}
		if len(frames) == 0 {
			continue
		}
		line := strings.TrimSuffix(lines[0], ":") + ": " + strings.Join(frames, " ← ")
		if isTest {
			tests = append(tests, line)
		} else {
			others = append(others, line)
		}
	}
	return strings.Join(append(others, tests...), "\n") + "\n"
}
