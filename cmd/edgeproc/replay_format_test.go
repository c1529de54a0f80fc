package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `edgeproc replay --format owntracks` reads OwnTracks messages, each with
// its topic: the courier is the topic's USER level (owntracks/+/+, as the
// worked config is not an OwnTracks one), other types are ignored.
func TestReplay_FormatOwnTracks(t *testing.T) {
	in := filepath.Join(t.TempDir(), "owntracks.jsonl")
	lines := []string{
		`{"_type":"location","acc":12,"batt":64,"conn":"m","lat":41.9794,"lon":2.8214,"tid":"v3","tst":1726308298,"vel":0,"topic":"owntracks/jane/phone","arrival_ms":1726308299000}`,
		`{"_type":"lwt","tst":1726300000,"topic":"owntracks/jane/phone","arrival_ms":1726308300000}`,
		`{"_type":"location","lon":2.8214,"tst":1726308300,"topic":"owntracks/jane/phone","arrival_ms":1726308301000}`,
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "replay", "--config", "../../testdata/worked.yaml", "--format", "owntracks", "--in", in)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	for _, want := range []string{
		`"type":"no_signal","market":"girona","courier":"jane"`,
		`"last_seen_ms":1726308298000`,
		`"reason":"missing_field","field":"lat"`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %s:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "rejected 1 (missing_field 1); ignored 1 (lwt 1)") {
		t.Errorf("summary %q does not count the rejection and the ignored lwt", stderr)
	}

	// The same lines read in the edgeproc format are all missing courier.
	code, stdout, _ = runCLI(t, "replay", "--config", "../../testdata/worked.yaml", "--format", "edgeproc", "--in", in)
	if code != 0 || strings.Count(stdout, `"field":"courier"`) != 3 {
		t.Errorf("--format edgeproc: exit %d, want 3 rejections naming courier:\n%s", code, stdout)
	}

	if code, _, stderr := runCLI(t, "replay", "--config", "../../testdata/worked.yaml", "--format", "gpx"); code != 2 || !strings.Contains(stderr, `--format "gpx": must be edgeproc or owntracks`) {
		t.Errorf("--format gpx: exit %d, stderr %q; want 2 and the accepted values", code, stderr)
	}
}
