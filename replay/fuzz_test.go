package replay

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/km0/edgeproc/engine"
)

// fuzzLateness is the allowed lateness of FuzzReplay's lateness
// configuration: 1.5 windows of cfg, so that a window stops being retained
// between two firings, not at one.
const fuzzLateness = 90_000

// fuzzConfig is FuzzReplay's market: cfg with an idle advance and a full
// table (two couriers: eviction and courier_limit) and, if lateness,
// allowed_lateness fuzzLateness, so that fired windows are retained and
// revised (contract §3, Allowed lateness). cfg's restore_ttl, 24 h, keeps
// above max(size + allowed_lateness, gap) either way.
func fuzzConfig(lateness bool) engine.Config {
	c := cfg()
	c.IdleTimeout = 10_000
	c.MaxCouriers = 2
	if lateness {
		c.AllowedLateness = fuzzLateness
	}
	return c
}

// revisionSeed revises a fired window under fuzzConfig(true): b moves the
// watermark to t0+110s, past the end of a's window [t0, t0+60s) (fired) but
// short of its end + fuzzLateness, and a's t0+20s then joins it. Under
// fuzzConfig(false) that position is late for distance instead.
var revisionSeed = []byte(pos("a", t0+10_000, 0, t0+10_000) + "\n" + pos("b", t0+140_000, 0, t0+140_000) + "\n" + pos("a", t0+20_000, 0.001, t0+141_000) + "\n")

// FuzzReplay feeds arbitrary files to the replay, with and without allowed
// lateness: it must never fail or panic, must write only JSON lines, must
// account for every line, and must agree with the reference implementation.
func FuzzReplay(f *testing.F) {
	for _, in := range [][]byte{
		[]byte(pos("a", t0, 0, t0) + "\n" + pos("a", t0+70_000, 0.001, t0+70_000) + "\n"),
		[]byte("not json\n\n   \n{\"courier\":\"a\",\"lat\":1,\"lon\":1,\"timestamp_ms\":5,\"arrival_ms\":9}\r\n"),
		[]byte(`{"courier":"a","lat":1,"lon":1,"timestamp_ms":5}` + "\n" + `{"courier":"a","lat":1,"lon":1,"timestamp_ms":5}`),
		[]byte("{\"arrival_ms\":1}\n{\"courier\":\"b\",\"lat\":1e999,\"lon\":1,\"timestamp_ms\":5}\n\xff\xfe"),
		[]byte(`{"courier":"a","lat":1,"lon":1,"timestamp_ms":253402300799999,"arrival_ms":9223372036854775807}` + "\n" + `{"courier":"b","lat":1,"lon":1,"timestamp_ms":253402300800000}` + "\n" + `{"courier":"c","lat":1,"lon":1,"timestamp_ms":1,"arrival_ms":1}`),
		[]byte(pos("a", t0, 0, t0) + "\n" + pos("b", t0+50_000, 0, t0) + "\n" + pos("c", t0+90_000, 0, t0+90_000) + "\n" + pos("d", t0+90_000, 0, t0+90_000) + "\n" + pos("b", t0+50_000, 0, t0+95_000) + "\n"),
		revisionSeed,
	} {
		f.Add(in, false)
		f.Add(in, true)
	}
	configs := [2]engine.Config{fuzzConfig(false), fuzzConfig(true)}
	f.Fuzz(func(t *testing.T, in []byte, lateness bool) {
		c := configs[0]
		if lateness {
			c = configs[1]
		}
		var out bytes.Buffer
		sum, err := Run(c, bytes.NewReader(in), &out)
		if err != nil {
			t.Fatalf("replay failed: %v", err)
		}
		if sum.Stats.Received > sum.Lines {
			t.Fatalf("%d inputs from %d lines", sum.Stats.Received, sum.Lines)
		}
		for _, l := range bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte{'\n'}), []byte{'\n'}) {
			if len(l) > 0 && !json.Valid(l) {
				t.Fatalf("output line is not JSON: %q", l)
			}
		}
		if len(in) < 2000 {
			compare(t, "fuzz", c, in)
		}
	})
}

// TestFuzzReplay_RevisionSeedRevises guards FuzzReplay's cover of allowed
// lateness: revisionSeed must give a revision under fuzzConfig(true), or a
// fuzzed comparison that drops the lateness (in the engine and the reference
// alike, or in fuzzConfig) would go unnoticed.
func TestFuzzReplay_RevisionSeedRevises(t *testing.T) {
	if n := compare(t, "revision seed, allowed lateness", fuzzConfig(true), revisionSeed); n != 1 {
		t.Errorf("allowed lateness %d ms: got %d revisions, want 1", fuzzLateness, n)
	}
	recs, _ := replayRecords(t, fuzzConfig(true), revisionSeed)
	if r := find(recs, "distance", "a", "revision", 1); r == nil || num(t, r, "window_start_ms") != t0 || num(t, r, "positions") != 2 {
		t.Errorf("got %v, want revision 1 of a's window at t0 with 2 positions", r)
	}
	if n := compare(t, "revision seed, no allowed lateness", fuzzConfig(false), revisionSeed); n != 0 {
		t.Errorf("no allowed lateness: got %d revisions, want 0", n)
	}
	recs, _ = replayRecords(t, fuzzConfig(false), revisionSeed)
	wantLate(t, recs, "a", "distance", t0+110_000)
}
