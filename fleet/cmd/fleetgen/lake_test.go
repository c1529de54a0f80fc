package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/km0/edgeproc/lake"
)

// -lake writes the same positions as the JSONL file (there are no
// duplicates or bad payloads by default), one date folder per day of
// the zone.
func TestRun_WritesLake(t *testing.T) {
	dir := t.TempDir()
	args := []string{"-couriers", "10", "-duration", "2h", "-seed", "3", "-start", "2026-03-01T22:00:00Z"}
	var jsonl, out bytes.Buffer
	if err := run(append(args, "-out", "-"), &jsonl, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if err := run(append(args, "-lake", dir, "-lake-market", "m", "-lake-timezone", "Europe/Madrid"), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	files, err := lake.Files(lake.MarketDir(dir, "m"))
	if err != nil {
		t.Fatal(err)
	}
	dates := map[string]bool{}
	var ts []int64
	for _, f := range files {
		dates[filepath.Base(filepath.Dir(f))] = true
		lake.ReadFile(f, func(r *lake.Row) error { ts = append(ts, r.TimestampMs); return nil })
	}
	lines := strings.Count(jsonl.String(), "\n")
	if len(ts) != lines || len(dates) != 2 || !strings.Contains(out.String(), "positions in") {
		t.Errorf("%d rows in %v, %d JSONL lines; output %q: want the same positions in 2 Madrid dates", len(ts), dates, lines, out.String())
	}
}
