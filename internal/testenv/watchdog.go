package testenv

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
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
// goroutine that is in the module's code, the test's own last.
func Main(m *testing.M, limit time.Duration) {
	t := time.AfterFunc(limit, func() {
		fmt.Fprintf(os.Stderr, "\ntestenv: the tests still run after %v; goroutines in edgeproc code:\n%s", limit, Blocked())
		os.Exit(2)
	})
	code := m.Run()
	t.Stop()
	os.Exit(code)
}

const module = "km0/edgeproc/"

var createdIn = regexp.MustCompile(` in goroutine (\d+)$`)

// Blocked summarises, one line each, every goroutine with a frame of this
// module (its state and those frames, innermost first), then every other
// goroutine one of them started (a library's worker: its three innermost
// frames), test goroutines last so that they end the output.
func Blocked() string {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	type gor struct {
		id, state string
		frames    []frame
		creator   string // goroutine id of the creator
	}
	var all []gor
	ours := map[string]bool{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		lines := strings.Split(string(g), "\n")
		if len(lines) < 1 || !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		head := strings.TrimSuffix(lines[0], ":")
		id := strings.Fields(head)[1]
		gr := gor{id: id, state: head}
		for i := 1; i+1 < len(lines); i += 2 {
			f := parseFrame(lines[i], lines[i+1])
			if f.created {
				if m := createdIn.FindStringSubmatch(lines[i]); m != nil {
					gr.creator = m[1]
				}
			}
			gr.frames = append(gr.frames, f)
			if f.ours && !strings.Contains(f.fn, "testenv.") && !strings.Contains(f.fn, ".TestMain") {
				ours[id] = true
			}
		}
		all = append(all, gr)
	}
	var tests, others, libs []string
	for _, g := range all {
		var parts []string
		isTest := false
		switch {
		case ours[g.id]:
			for _, f := range g.frames {
				if f.ours && !strings.Contains(f.fn, "testenv.Blocked") && !strings.Contains(f.fn, "testenv.Main") {
					parts = append(parts, f.String())
					isTest = isTest || (!f.created && strings.Contains(f.fn, ".Test"))
				}
			}
		case ours[g.creator]:
			for i, f := range g.frames {
				if i < 3 || f.created {
					parts = append(parts, f.String())
				}
			}
		default:
			continue
		}
		line := g.state + ": " + strings.Join(parts, " ← ")
		switch {
		case isTest:
			tests = append(tests, line)
		case ours[g.id]:
			others = append(others, line)
		default:
			libs = append(libs, line)
		}
	}
	return strings.Join(append(append(libs, others...), tests...), "\n") + "\n"
}

// frame is one entry of a goroutine's stack.
type frame struct {
	fn, loc       string
	ours, created bool
}

func parseFrame(fnLine, locLine string) frame {
	f := frame{created: strings.HasPrefix(fnLine, "created by ")}
	fn := strings.TrimPrefix(fnLine, "created by ")
	if i := strings.Index(fn, " in goroutine "); i > 0 {
		fn = fn[:i]
	}
	f.ours = strings.Contains(fn, module)
	fn = fn[strings.LastIndex(fn, "/")+1:]
	if strings.HasSuffix(fn, ")") { // the arguments
		if i := strings.LastIndex(fn, "("); i > 0 {
			fn = fn[:i]
		}
	}
	f.fn = fn
	loc := strings.TrimSpace(locLine)
	if i := strings.LastIndex(loc, " +0x"); i > 0 {
		loc = loc[:i]
	}
	f.loc = loc[strings.LastIndex(loc, "/")+1:]
	return f
}

func (f frame) String() string {
	if f.created {
		return "created by " + f.fn + " " + f.loc
	}
	return f.fn + " " + f.loc
}
