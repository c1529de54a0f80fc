package partition

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/result"
)

// withLake adds a lake in dir, shared by the instances, rolling every 2 s
// so that kills land in rolls.
func withLake(dir string) func(string) string {
	return func(y string) string { return y + fmt.Sprintf("lake: {dir: %q, roll_interval: 2s}\n", dir) }
}

func partitionLakeKey(n int, courier string, ts int64, lat, lon, acc float64, hasAcc, lateD, lateS bool) string {
	return fmt.Sprintf("p%d|%s|%d|%v|%v|%v|%v|late=%v/%v", n, courier, ts, lat, lon, hasAcc, acc, lateD, lateS)
}

// lakeReplay is the lake each partition's replay gives (applyStored):
// every accepted position with the engine's late judgement, by
// partitionLakeKey.
func lakeReplay(t testing.TB, url string, cfg config.Config) map[string]int {
	t.Helper()
	want := map[string]int{}
	for n := range cfg.JetStream.Partitions {
		ecfg := EngineConfig(cfg, n)
		ecfg.Shards = 1
		ecfg.OnRows = func(rows []engine.Row) {
			for _, r := range rows {
				want[partitionLakeKey(n, r.Courier, r.TS, r.Lat, r.Lon, max(r.Accuracy, 0), r.Accuracy >= 0, r.LateDistance, r.LateSession)]++
			}
		}
		e := engine.New(ecfg, func([]result.Record) {})
		applyStored(t, url, cfg, n, e)
		e.Stop()
	}
	return want
}

// checkLakeEqualsReplay requires the market's lake in dir, as readers see
// it, to hold each partition's accepted positions exactly once, in that
// partition's file series (contract §7: per partition, the union the
// market's lake), as its replay judged them.
func checkLakeEqualsReplay(t testing.TB, dir, url string, cfg config.Config) {
	t.Helper()
	want := lakeReplay(t, url, cfg)
	files, err := lake.Files(lake.MarketDir(dir, cfg.Market))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	rows := 0
	for _, f := range files {
		var n int
		if _, err := fmt.Sscanf(filepath.Base(f), "p%d-", &n); err != nil {
			t.Errorf("lake file %s: not a partition's series", f)
			continue
		}
		err := lake.ReadFile(f, func(r *lake.Row) error {
			rows++
			got[partitionLakeKey(n, string(r.Courier), r.TimestampMs, r.Lat, r.Lon, r.AccuracyM, r.HasAccuracy, r.LateDistance, r.LateSession)]++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	diffs := testenv.DiffCounts(got, want, "lake row", "the replay")
	t.Logf("lake: %d rows in %d files, %d accepted positions in the replay", rows, len(files), len(want))
	if len(want) == 0 {
		t.Fatal("the replay accepted no position: the lake check checks nothing")
	}
	if len(diffs) > 0 {
		t.Errorf("%d lake differences; first ones:\n  %s", len(diffs), strings.Join(diffs[:min(15, len(diffs))], "\n  "))
	}
}
