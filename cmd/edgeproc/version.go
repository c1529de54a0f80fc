package main

import (
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=..."; left
// empty, the version comes from the build info (see resolveVersion).
var version = ""

// resolveVersion is the version the binary reports: ldflags' when set;
// else the module version the go command recorded (`go install
// github.com/km0/edgeproc/cmd/edgeproc@v1.2.3` records v1.2.3); else,
// for a build from a git checkout, the commit (vcs.revision, shortened to
// 12 hex digits) with "-dirty" when the work tree had uncommitted changes
// (vcs.modified); else "dev". info is debug.ReadBuildInfo's (nil when the
// binary has none).
func resolveVersion(ldflags string, info *debug.BuildInfo) string {
	if ldflags != "" {
		return ldflags
	}
	if info == nil {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// binaryVersion is this binary's version, by resolveVersion.
func binaryVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return resolveVersion(version, info)
}
