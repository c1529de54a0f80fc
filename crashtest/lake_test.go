package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/replay"
	"github.com/km0/edgeproc/result"
)

// lakeKey is what the lake must hold of an accepted position, arrival
// left out (the live run's clock is not the reference's); with flags,
// the engine's late judgement too.
func lakeKey(courier string, ts int64, lat, lon, acc float64, hasAcc, lateD, lateS, flags bool) string {
	k := fmt.Sprintf("%s|%d|%v|%v|%v|%v", courier, ts, lat, lon, hasAcc, acc)
	if flags {
		k += fmt.Sprintf("|late=%v/%v", lateD, lateS)
	}
	return k
}

// expectedLake is the lake of the reference run (expected's): each
// accepted position once, keyed by lakeKey.
func expectedLake(tb testing.TB, cfg config.Config, msgs []testenv.Message, flags bool) map[string]int {
	tb.Helper()
	ecfg := market.EngineConfig(cfg)
	ecfg.Topic = cfg.MQTT.Topic
	want := map[string]int{}
	ecfg.OnRows = func(rows []engine.Row) {
		for _, r := range rows {
			want[lakeKey(r.Courier, r.TS, r.Lat, r.Lon, max(r.Accuracy, 0), r.Accuracy >= 0, r.LateDistance, r.LateSession, flags)]++
		}
	}
	pushAsLive(engine.New(ecfg, func([]result.Record) {}), msgs)
	return want
}

// checkLake requires the market's lake, as readers see it, to hold
// exactly the reference run's rows: each accepted position once, in its
// date's folder, nothing else; and no staging left after a clean stop.
func checkLake(tb testing.TB, cfg config.Config, want map[string]int, flags bool) {
	tb.Helper()
	files, err := lake.Files(lake.MarketDir(cfg.Lake.Dir, cfg.Market))
	if err != nil {
		tb.Fatal(err)
	}
	got := map[string]int{}
	rows, wrongDate := 0, 0
	for _, f := range files {
		date := filepath.Base(filepath.Dir(f))
		err := lake.ReadFile(f, func(r *lake.Row) error {
			rows++
			if "date="+lake.DateOf(r.TimestampMs, cfg.Location()) != date {
				wrongDate++
			}
			got[lakeKey(string(r.Courier), r.TimestampMs, r.Lat, r.Lon, r.AccuracyM, r.HasAccuracy, r.LateDistance, r.LateSession, flags)]++
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	diffs := testenv.DiffCounts(got, want, "lake row", "the reference run")
	tb.Logf("lake: %d rows in %d files, %d distinct positions wanted", rows, len(files), len(want))
	if wrongDate > 0 {
		tb.Errorf("%d lake rows in another date's folder", wrongDate)
	}
	if len(diffs) > 0 {
		tb.Errorf("%d lake differences; first ones:", len(diffs))
		for _, d := range diffs[:min(15, len(diffs))] {
			tb.Errorf("  %s", d)
		}
	}
	if segs, _ := filepath.Glob(filepath.Join(lake.StagingDir(cfg.Lake.Dir, cfg.Market), "*")); len(segs) > 0 {
		tb.Errorf("staging left after a clean stop: %v", segs)
	}
}

// checkReplayOfLake replays the lake (contract §9, replay --in) and
// requires each distance window to have the live run's distance and
// positions (want: the reference run's records, which the live stream
// equals): kappa both ways. The replay runs without the idle rule
// (idle_timeout 0): the lake keeps no record of the live run's deaf
// periods, and this run has one longer than the idle timeout (edgeproc
// killed while the fleet publishes), which a replay with the idle rule
// takes for silence, advancing event time and making positions late that
// were not (docs/lake.md says so).
func checkReplayOfLake(tb testing.TB, cfg config.Config, want map[string]string) {
	tb.Helper()
	files, err := lake.Files(lake.MarketDir(cfg.Lake.Dir, cfg.Market))
	if err != nil {
		tb.Fatal(err)
	}
	var out bytes.Buffer
	ecfg := market.EngineConfig(cfg)
	ecfg.IdleTimeout = 0
	if _, err := replay.RunLake(ecfg, files, &out); err != nil {
		tb.Fatal(err)
	}
	type dist struct {
		Type      string  `json:"type"`
		Key       string  `json:"key"`
		Distance  float64 `json:"distance_m"`
		Positions int     `json:"positions"`
	}
	got := map[string]dist{}
	for _, line := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		var d dist
		if err := json.Unmarshal(line, &d); err != nil {
			tb.Fatalf("replay line %q: %v", line, err)
		}
		if d.Type == "distance" {
			got[d.Key] = d
		}
	}
	var diffs []string
	n := 0
	for k, js := range want {
		var w dist
		if err := json.Unmarshal([]byte(js), &w); err != nil || w.Type != "distance" {
			continue
		}
		n++
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, "distance "+k+": not in the lake's replay")
		case g.Positions != w.Positions || math.Abs(g.Distance-w.Distance) > 1e-6:
			diffs = append(diffs, fmt.Sprintf("distance %s: replay of the lake %v m over %d positions, live %v m over %d", k, g.Distance, g.Positions, w.Distance, w.Positions))
		}
		delete(got, k)
	}
	for k := range got {
		diffs = append(diffs, "distance "+k+": in the lake's replay, not live")
	}
	tb.Logf("replay of the lake: %d distance windows compared with the live run's", n)
	if len(diffs) > 0 {
		tb.Errorf("%d differences; first ones:", len(diffs))
		for _, d := range diffs[:min(15, len(diffs))] {
			tb.Errorf("  %s", d)
		}
	}
}
