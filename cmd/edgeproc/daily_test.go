package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/lake"
)

// writeTestLake writes n couriers' positions of 3 December 2026 (UTC).
func writeTestLake(t *testing.T, dir string, n int) {
	t.Helper()
	w, err := lake.Open(lake.Options{Dir: dir, Market: "m"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC).UnixMilli()
	for i := range 10 * n {
		r := lake.Row{Index: uint64(i + 1), Courier: []byte(fmt.Sprintf("c%d", i%n)), TimestampMs: start + int64(i)*1000,
			ArrivalMs: start + int64(i)*1000 + 500, Lat: 41 + float64(i)*1e-4, Lon: 2.8}
		if err := w.Append(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Without --out, daily writes the lake's table and publishes each record
// to the market's stream with its key as Nats-Msg-Id: a second run is
// deduplicated by the stream.
func TestDaily_LakeTableAndNATS(t *testing.T) {
	ns := testenv.StartNATS(t)
	dir := t.TempDir()
	writeTestLake(t, dir, 3)
	cfg := filepath.Join(dir, "m.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, "market: m\nnats:\n  url: %s\nlake:\n  dir: %s\n", ns.URL(), dir), 0o644)
	for run := range 2 {
		code, out, errs := runCLI(t, "daily", "--config", cfg, "--date", "2026-12-03")
		if code != 0 || out != "" || !strings.Contains(errs, "published 3 records to delivery.dashboard.m.daily") {
			t.Fatalf("run %d: exit %d\nstdout: %s\nstderr: %s", run, code, out, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "daily", "market=m", "date=2026-12-03", "daily.parquet")); err != nil {
		t.Errorf("the lake's daily table: %v", err)
	}
	// A replay of the lake's root reads its positions, not its tables.
	if code, _, errs := runCLI(t, "replay", "--config", cfg, "--in", dir, "--out", filepath.Join(dir, "r.jsonl")); code != 0 || !strings.Contains(errs, "replay: 30 positions") {
		t.Errorf("replay --in the lake's root: exit %d, %s", code, errs)
	}
	msgs := testenv.ReadStream(t, ns.URL(), "EDGEPROC_M")
	if len(msgs) != 3 {
		t.Fatalf("%d messages in the stream after two runs, want 3", len(msgs))
	}
	for i, m := range msgs {
		var r map[string]any
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("daily|m|c%d|2026-12-03", i)
		if m.Subject != "delivery.dashboard.m.daily" || m.Header.Get("Nats-Msg-Id") != key || r["key"] != key || r["positions"] != 10.0 {
			t.Errorf("message %d: %s %v %s, want key %s and 10 positions", i, m.Subject, m.Header, m.Data, key)
		}
	}
}

func TestDaily_OutFormatsAndMistakes(t *testing.T) {
	dir := t.TempDir()
	writeTestLake(t, dir, 2)
	cfg := filepath.Join(dir, "m.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, "market: m\nlake:\n  dir: %s\n", dir), 0o644)
	noLake := filepath.Join(dir, "nolake.yaml")
	os.WriteFile(noLake, []byte("market: m\n"), 0o644)

	code, out, _ := runCLI(t, "daily", "--config", cfg, "--date", "2026-12-03", "--out", "-")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.HasPrefix(out, `{"type":"daily","market":"m","courier":"c0","key":"daily|m|c0|2026-12-03"`) {
		t.Errorf("--out -: exit %d, %s", code, out)
	}
	csvPath := filepath.Join(dir, "d.csv")
	if code, _, errs := runCLI(t, "daily", "--config", cfg, "--date", "2026-12-03", "--out", csvPath); code != 0 {
		t.Fatalf("--out d.csv: %s", errs)
	}
	if b, _ := os.ReadFile(csvPath); !strings.HasPrefix(string(b), "type,market,courier,key,date,distance_m,") {
		t.Errorf("CSV: %s", b)
	}
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"daily", "--config", cfg}, 2, "daily takes --config FILE --date YYYY-MM-DD"},
		{[]string{"daily", "--config", cfg, "--date", "3/12/2026"}, 2, `date "3/12/2026": want YYYY-MM-DD`},
		{[]string{"daily", "--config", noLake, "--date", "2026-12-03"}, 1, "lake.dir is not set"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.err) {
			t.Errorf("%v: exit %d, %s; want %d and %q", c.args, code, errs, c.code, c.err)
		}
	}
}

// replay --in takes a lake folder, a glob and a file.
func TestReplay_LakeInput(t *testing.T) {
	dir := t.TempDir()
	writeTestLake(t, dir, 2)
	cfg := filepath.Join(dir, "m.yaml")
	os.WriteFile(cfg, []byte("market: m\n"), 0o644)
	dateDir := lake.DateDir(dir, "m", "2026-12-03")
	files, _ := filepath.Glob(filepath.Join(dateDir, "*.parquet"))
	var first string
	for i, in := range []string{dateDir, filepath.Join(dir, "positions", "market=m", "date=*"), files[0]} {
		code, out, errs := runCLI(t, "replay", "--config", cfg, "--in", in)
		if code != 0 || !strings.Contains(errs, "replay: 20 positions, 20 accepted") {
			t.Fatalf("--in %s: exit %d, %s", in, code, errs)
		}
		if i == 0 {
			first = out
		} else if out != first {
			t.Errorf("--in %s gives other results than --in %s", in, dateDir)
		}
	}
	if code, _, errs := runCLI(t, "replay", "--config", cfg, "--in", filepath.Join(dir, "nothing-*")); code != 1 || !strings.Contains(errs, "no file matches") {
		t.Errorf("a glob matching nothing: exit %d, %s", code, errs)
	}
}

// check-config refuses a lake.dir that cannot be written, naming it.
func TestCheckConfig_LakeDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	cfg := filepath.Join(dir, "m.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, "market: m\nlake:\n  dir: %s/lake\n", file), 0o644)
	code, _, errs := runCLI(t, "check-config", cfg)
	if code != 1 || !strings.Contains(errs, "lake.dir "+file+"/lake cannot be written") {
		t.Errorf("exit %d, %s", code, errs)
	}
}
