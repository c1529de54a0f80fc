package engine

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/position"
)

// decodedInputs returns ins with every input the decoder accepts given
// as Input.Position (what Decode gave, its courier copied) instead of
// its payload, AppendPayload giving the payload back; the others as
// they are.
func decodedInputs(t *testing.T, ins []Input) (out []Input, decoded int) {
	t.Helper()
	var d position.Decoder
	for _, in := range ins {
		var p position.Position
		if d.Decode(in.Payload, &p) == position.OK {
			p.Courier = bytes.Clone(p.Courier)
			payload := in.Payload
			in.Payload, in.Position = nil, &p
			in.AppendPayload = func(dst []byte) []byte { return append(dst, payload...) }
			decoded++
		}
		out = append(out, in)
	}
	return out, decoded
}

// TestPush_DecodedEqualsPayload: an input given decoded (Input.Position)
// gives the same results as its payload, byte for byte, under each of
// seedConfig's configurations (a full courier table refusing couriers,
// eviction, allowed lateness, dead zones, a service area) and a topic to
// match, with phones whose clocks run too fast (future_timestamp), bad
// payloads, duplicates and tunnels: the checks that need the engine
// apply to a decoded input as to a payload, and its rejected record
// carries the payload.
func TestPush_DecodedEqualsPayload(t *testing.T) {
	for seed := int64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			cfg := seedConfig(t, seed)
			cfg.Topic = "km0/m/positions/+"
			f := fleet.New(fleet.Config{Couriers: 25, Duration: 20 * time.Minute, Seed: seed, DuplicateRate: 0.02, BadRate: 0.01, TunnelFraction: 0.5, TunnelRate: 4})
			var ins []Input
			for e, ok := f.Next(); ok; e, ok = f.Next() {
				switch {
				case e.Raw != nil:
				case e.TS%13 == 0:
					e.TS += 2 * cfg.MaxFutureSkew // too far ahead of the clock
				case e.TS%7 == 0:
					e.TS += cfg.MaxFutureSkew / 2 // ahead, within the skew
				}
				topic := "km0/m/positions/" + e.Courier
				if e.TS%17 == 0 {
					topic = "km0/m/positions/someone-else"
				}
				// Every other input without an arrival of its own, as
				// replay lines without arrival_ms.
				in := Input{Payload: fleet.AppendJSON(nil, e, e.TS%3 == 0), Topic: topic, Arrival: e.Arrival, HasArrival: e.TS%2 == 0, Line: int64(len(ins) + 1)}
				ins = append(ins, in)
			}
			dec, n := decodedInputs(t, ins)
			want, got := runAll(cfg, ins), runAll(cfg, dec)
			if n < len(ins)*9/10 {
				t.Fatalf("%d of %d inputs decoded", n, len(ins))
			}
			for _, r := range []string{"future_timestamp", "courier_mismatch", "malformed_json"} {
				if !bytes.Contains(want, []byte(`"reason":"`+r+`"`)) {
					t.Fatalf("no %s in the results: the test does not test it", r)
				}
			}
			if seed%2 == 1 && !bytes.Contains(want, []byte(`"reason":"courier_limit"`)) {
				t.Fatal("no courier_limit in the results of a full table")
			}
			if !bytes.Equal(got, want) {
				gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
				for i := range min(len(gl), len(wl)) {
					if !bytes.Equal(gl[i], wl[i]) {
						t.Fatalf("result %d differs:\ndecoded: %s\npayload: %s", i, gl[i], wl[i])
					}
				}
				t.Fatalf("%d results decoded, %d from payloads", len(gl), len(wl))
			}
		})
	}
}
