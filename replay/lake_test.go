package replay_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/replay"
)

// lakeEvent is a fleet position as the lake holds it: in a series, at a
// log index.
type lakeEvent struct {
	fleet.Event
	series int
	index  uint64
}

// TestRunLake_EqualsJSONL writes a fleet's positions (across Madrid's
// midnight, late and duplicated deliveries included) to a lake of two
// series with many rolls, replays the lake, and replays a JSONL file of
// the same positions with the same arrival_ms, in the order the contract
// gives the lake's rows (arrival_ms, ties by file name, then row): the
// results must be the same, byte for byte.
func TestRunLake_EqualsJSONL(t *testing.T) {
	madrid, _ := time.LoadLocation("Europe/Madrid")
	start := time.Date(2026, 1, 5, 23, 30, 0, 0, madrid)
	f := fleet.New(fleet.Config{Couriers: 60, Duration: time.Hour, Seed: 7, Start: start.UnixMilli(), DuplicateRate: 0.02, LateRate: 0.05})
	var evs []lakeEvent
	next := []uint64{0, 0}
	for {
		e, ok := f.Next()
		if !ok {
			break
		}
		if e.Raw != nil {
			continue // the lake holds accepted positions only
		}
		s := int(e.Courier[len(e.Courier)-1]) % 2
		next[s]++
		evs = append(evs, lakeEvent{Event: e, series: s, index: next[s]})
	}
	dir := t.TempDir()
	now := start
	for s := range 2 {
		w, err := lake.Open(lake.Options{Dir: dir, Market: "m", Prefix: fmt.Sprintf("p%d-", s), Location: madrid, RollInterval: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.series != s {
				continue
			}
			r := lake.Row{Index: e.index, Courier: []byte(e.Courier), TimestampMs: e.TS, ArrivalMs: e.Arrival,
				Lat: e.Lat, Lon: e.Lon, AccuracyM: e.Accuracy, HasAccuracy: e.index%5 != 0}
			if err := w.Append(&r); err != nil {
				t.Fatal(err)
			}
			if n++; n%997 == 0 { // a roll now and then
				now = now.Add(time.Minute)
				w.Tick(now)
				idx := e.index
				testenv.WaitFor(t, 10*time.Second, "a roll", func() bool { return w.Durable() >= idx })
			}
		}
		if err := w.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// The JSONL file, in the lake's order.
	slices.SortStableFunc(evs, func(a, b lakeEvent) int {
		return cmp.Or(cmp.Compare(a.Arrival, b.Arrival), cmp.Compare(a.series, b.series), cmp.Compare(a.index, b.index))
	})
	var jsonl []byte
	for _, e := range evs {
		if e.index%5 == 0 {
			e.Accuracy = -1 // none: left out below
		}
		line := fleet.AppendJSON(nil, e.Event, true)
		if e.index%5 == 0 {
			line = bytes.Replace(line, []byte(`,"accuracy_m":-1`), nil, 1)
		}
		jsonl = append(append(jsonl, line...), '\n')
	}

	c := config.Default()
	c.Market = "m"
	ecfg := market.EngineConfig(c)
	var want, got bytes.Buffer
	wsum, err := replay.Run(ecfg, bytes.NewReader(jsonl), &want)
	if err != nil {
		t.Fatal(err)
	}
	files, err := lake.Files(filepath.Join(dir, "positions", "market=m", "date=*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("%d files: want several rolls of two series over two dates", len(files))
	}
	gsum, err := replay.RunLake(ecfg, files, &got)
	if err != nil {
		t.Fatal(err)
	}
	if wsum.Stats.Received != int64(len(evs)) || gsum.Stats.Received != wsum.Stats.Received {
		t.Fatalf("received %d from the lake, %d from JSONL, want %d", gsum.Stats.Received, wsum.Stats.Received, len(evs))
	}
	if wsum.Stats.Duplicates == 0 || wsum.Stats.LateDistance == 0 {
		t.Fatalf("the input has no duplicates or late positions: %+v", wsum.Stats)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		gl, wl := bytes.Split(got.Bytes(), []byte("\n")), bytes.Split(want.Bytes(), []byte("\n"))
		for i := range min(len(gl), len(wl)) {
			if !bytes.Equal(gl[i], wl[i]) {
				t.Fatalf("result %d differs:\nlake:  %s\njsonl: %s", i, gl[i], wl[i])
			}
		}
		t.Fatalf("%d results from the lake, %d from JSONL", len(gl), len(wl))
	}
}
