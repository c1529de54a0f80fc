package testenv

import (
	"fmt"
	"sort"
	"strings"
)

// DiffResults compares results by key (key → JSON bytes) and describes
// every difference: a key missing from got, a key only in got, or the same
// key with other bytes. wantName names where want came from in the
// messages ("the replay", "the reference run"). The lines are sorted.
func DiffResults(got, want map[string]string, wantName string) []string {
	var diffs []string
	for k, w := range want {
		switch g, ok := got[k]; {
		case !ok:
			diffs = append(diffs, "missing from the stream: "+w)
		case g != w:
			diffs = append(diffs, fmt.Sprintf("got %s\n    want %s", g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, "not in "+wantName+": "+g)
		}
	}
	sort.Strings(diffs)
	return diffs
}

// DiffCounts compares multisets (item → how many times) and describes
// every item whose count differs, what names the items ("lake row"),
// wantName where want came from. The lines are sorted.
func DiffCounts(got, want map[string]int, what, wantName string) []string {
	var diffs []string
	for k, n := range want {
		if got[k] != n {
			diffs = append(diffs, fmt.Sprintf("%s %s: %d times, want %d", what, k, got[k], n))
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s %s: %d times, not in %s", what, k, n, wantName))
		}
	}
	sort.Strings(diffs)
	return diffs
}

// Revisions counts the distance revisions among results by key (contract
// §3, Allowed lateness: the key distance|MARKET|COURIER|start|n), for a
// test that must see some before it can prove anything about them.
func Revisions(byKey map[string]string) int {
	n := 0
	for k := range byKey {
		if strings.HasPrefix(k, "distance|") && strings.Count(k, "|") == 4 {
			n++
		}
	}
	return n
}
