package daily_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/km0/edgeproc/daily"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/lake"
)

// duckDBPackage is the npm package the test reads the lake with: DuckDB,
// a reader nobody here wrote, through its Node.js API (not its Go module,
// which is cgo and would be built into the test binary of this package).
const duckDBPackage = "@duckdb/node-api@1.5.6-r.1"

var duckOnce sync.Once

// duckDBDir returns a folder whose node_modules holds duckDBPackage,
// installing it into the repository's .cache/ the first time.
func duckDBDir(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("the DuckDB check needs node and npm (Debian: apt-get install nodejs npm; scripts/test.sh installs them)")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, ".cache", "duckdb")
	var ierr error
	duckOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@duckdb", "node-api")); err == nil {
			return
		}
		os.MkdirAll(dir, 0o755)
		out, err := exec.Command("npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save", duckDBPackage).CombinedOutput()
		if err != nil {
			ierr = fmt.Errorf("npm install %s: %v: %s", duckDBPackage, err, out)
		}
	})
	if ierr != nil {
		t.Fatal(ierr)
	}
	return dir
}

type duckResult struct {
	Counts []struct {
		Market, Date, Courier string
		N                     string
	}
	Duplicates int
	Distance   []struct {
		Courier   string
		Positions string
		DistanceM float64 `json:"distance_m"`
	}
}

// TestDuckDB_ReadsTheLake writes a fleet's positions across Madrid's
// midnight into a lake of two series, with rolls and a compaction, and
// reads it with DuckDB's read_parquet over positions/**/*.parquet with
// Hive partitioning: every position is a row once, in its courier's
// date, and each courier's day computed in SQL (filters off) is daily's.
func TestDuckDB_ReadsTheLake(t *testing.T) {
	nodeDir := duckDBDir(t)
	const ttl = 24 * time.Hour
	start := time.Date(2026, 12, 3, 22, 30, 0, 0, madrid)
	f := fleet.New(fleet.Config{Couriers: 30, Duration: 3 * time.Hour, Seed: 5, Start: start.UnixMilli()})
	dir := t.TempDir()
	var ws [2]*lake.Writer
	for s := range ws {
		w, err := lake.Open(lake.Options{Dir: dir, Market: "girona", Prefix: fmt.Sprintf("p%d-", s), Location: madrid,
			RollInterval: time.Minute, CompactAfter: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		w.Tick(start)
		ws[s] = w
	}
	want := map[string]int{} // "date|courier" -> positions
	var idx [2]uint64
	now := start
	for {
		e, ok := f.Next()
		if !ok {
			break
		}
		if e.Raw != nil || e.Duplicate {
			continue
		}
		s := int(e.Courier[len(e.Courier)-1]) % 2
		idx[s]++
		r := lake.Row{Index: idx[s], Courier: []byte(e.Courier), TimestampMs: e.TS, ArrivalMs: e.Arrival,
			Lat: e.Lat, Lon: e.Lon, AccuracyM: e.Accuracy, HasAccuracy: true}
		if err := ws[s].Append(&r); err != nil {
			t.Fatal(err)
		}
		want[lake.DateOf(e.TS, madrid)+"|"+e.Courier]++
		if t := time.UnixMilli(e.Arrival); t.Sub(now) >= 10*time.Minute {
			now = t
			ws[0].Tick(now)
			ws[1].Tick(now)
		}
	}
	for _, w := range ws {
		// 3 December closed an hour ago: compacted. Ticking on, as the
		// service does: a tick that finds a file still being written
		// leaves the compaction to the next one.
		testenv.WaitFor(t, 2*time.Minute, "compaction", func() bool {
			w.Tick(start.Add(4 * time.Hour))
			return w.Stats().Compactions > 0
		})
		if err := w.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	out, err := runDuckDB(nodeDir, dir, "2026-12-04", ttl)
	if err != nil {
		t.Fatal(err)
	}
	var res duckResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Duplicates != 0 {
		t.Errorf("%d (courier, timestamp_ms) pairs are rows more than once", res.Duplicates)
	}
	got := map[string]int{}
	for _, c := range res.Counts {
		n, _ := strconv.Atoi(c.N)
		if c.Market != "girona" {
			t.Errorf("market %q", c.Market)
		}
		got[c.Date+"|"+c.Courier] = n
	}
	if len(got) != len(want) || len(want) != 60 {
		t.Errorf("%d courier-days in DuckDB, %d written, want 60 (30 couriers, 2 dates)", len(got), len(want))
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d rows in DuckDB, %d written", k, got[k], n)
		}
	}
	recs, _, err := daily.Compute(daily.Options{Dir: dir, Market: "girona", Location: madrid, Date: "2026-12-04", RestoreTTL: ttl, Filter: geo.Filter{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(res.Distance) || len(recs) != 30 {
		t.Fatalf("daily: %d records, DuckDB %d couriers, want 30", len(recs), len(res.Distance))
	}
	for i, r := range recs {
		d := res.Distance[i]
		n, _ := strconv.Atoi(d.Positions)
		if d.Courier != r.Courier || int64(n) != r.Positions || math.Abs(d.DistanceM-r.DistanceM) > 1e-6*max(1, r.DistanceM) {
			t.Errorf("DuckDB %s: %d positions, %.6f m; daily %s: %d, %.6f m", d.Courier, n, d.DistanceM, r.Courier, r.Positions, r.DistanceM)
		}
	}
}

func runDuckDB(nodeDir, lakeDir, date string, ttl time.Duration) ([]byte, error) {
	script, err := filepath.Abs(filepath.Join("testdata", "duckdb.mjs"))
	if err != nil {
		return nil, err
	}
	// Node resolves packages from the script's folder up: run a copy
	// placed beside the installed node_modules.
	dst := filepath.Join(nodeDir, "duckdb.mjs")
	b, err := os.ReadFile(script)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("node", dst, lakeDir, date, strconv.FormatInt(ttl.Milliseconds(), 10))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("node %s: %v: %s", dst, err, stderr.Bytes())
	}
	return out, nil
}
