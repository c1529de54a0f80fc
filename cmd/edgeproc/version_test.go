package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/km0/edgeproc/internal/testenv"
)

func TestResolveVersion(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	cases := []struct {
		name    string
		ldflags string
		info    *debug.BuildInfo
		want    string
	}{
		{"ldflags win", "v9.9.9", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: vcs(rev, "false")}, "v9.9.9"},
		{"module version", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: vcs(rev, "true")}, "v1.2.3"},
		{"clean checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "false")}, "0123456789ab"},
		{"dirty checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "true")}, "0123456789ab-dirty"},
		{"no vcs", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"no build info", "", nil, "dev"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := resolveVersion(c.ldflags, c.info); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

// A built binary reports the version -ldflags sets, and without it the
// commit the go command stamped into it (go version -m shows what it
// stamped: nothing when building with -buildvcs=false or from a git
// worktree, whose .git is a file the go command does not follow).
func TestVersion_BuiltBinary(t *testing.T) {
	bin := testenv.BuildEdgeproc(t)
	stamped, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	want := "dev"
	var rev, modified string
	for _, line := range strings.Split(string(stamped), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision=") {
			rev = strings.TrimPrefix(f[1], "vcs.revision=")
		}
		if len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.modified=") {
			modified = strings.TrimPrefix(f[1], "vcs.modified=")
		}
	}
	if rev != "" {
		want = rev[:12]
		if modified == "true" {
			want += "-dirty"
		}
	}
	versionOf := func(bin string) string {
		t.Helper()
		out, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatalf("%s version: %v", bin, err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := versionOf(bin); got != "edgeproc "+want {
		t.Errorf("without ldflags: got %q, want %q (go version -m: rev %q modified %q)", got, "edgeproc "+want, rev, modified)
	}
	set := filepath.Join(t.TempDir(), "edgeproc")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version=v7.7.7", "-o", set, "github.com/km0/edgeproc/cmd/edgeproc").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if got := versionOf(set); got != "edgeproc v7.7.7" {
		t.Errorf("with ldflags: got %q, want %q", got, "edgeproc v7.7.7")
	}
}
