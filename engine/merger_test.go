package engine

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/km0/edgeproc/result"
)

// TestMerger_PiecesAndShardsDoNotChangeTheOutput runs seedConfig's
// configurations (dead zones among them, whose windows fire between two
// records of a chunk) with the merger handing the sink one record, or
// three, at a time, under 1 to 3 shards, and requires the output of one
// shard in one piece a chunk, byte for byte.
func TestMerger_PiecesAndShardsDoNotChangeTheOutput(t *testing.T) {
	defer func(p int) { mergePiece = p }(mergePiece)
	for seed := int64(1); seed <= 8; seed++ {
		ins := smallFleet(seed)
		cfg := seedConfig(t, seed)
		cfg.Shards = 1
		mergePiece = 1 << 30
		var chunks int
		want := runWith(cfg, ins, &chunks)
		if seed > 6 && !bytes.Contains(want, []byte(`"type":"dead_zone"`)) {
			t.Fatalf("seed %d: no dead zone in the output", seed)
		}
		for _, piece := range []int{1, 3} {
			for shards := 1; shards <= 3; shards++ {
				mergePiece, cfg.Shards = piece, shards
				var calls int
				got := runWith(cfg, ins, &calls)
				if calls <= chunks {
					t.Fatalf("seed %d: %d sink calls in pieces of %d, %d in one piece a chunk: no chunk was split", seed, calls, piece, chunks)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("seed %d, pieces of %d, %d shards: output differs from one shard, one piece a chunk\n%s", seed, piece, shards, firstDiff(got, want))
				}
			}
		}
	}
}

// runWith is runAll counting the sink's calls.
func runWith(cfg Config, ins []Input, calls *int) []byte {
	var out []byte
	e := New(cfg, func(rs []result.Record) { *calls++; out = append(out, encode(rs)...) })
	for i := range ins {
		e.Push(&ins[i])
	}
	e.EndOfInput()
	return out
}

func firstDiff(got, want []byte) string {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := range min(len(g), len(w)) {
		if !bytes.Equal(g[i], w[i]) {
			return fmt.Sprintf("line %d:\n got %s\nwant %s", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(g), len(w))
}
