package testenv

import "testing"

// SkipShort skips the calling test under `go test -short`, the fast loop
// of unit and property tests (no root, no server, no network). what names
// what the test would have started, so the skip says why. Every helper
// here that starts a real server, process or tool calls it; outside
// -short nothing is ever skipped: a missing dependency fails the test.
func SkipShort(tb testing.TB, what string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("-short: skips integration tests (this one starts %s); run without -short (scripts/test.sh) for them", what)
	}
}
