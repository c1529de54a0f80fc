package replay

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzReplay feeds arbitrary files to the replay: it must never fail or
// panic, must write only JSON lines, must account for every line, and must
// agree with the reference implementation.
func FuzzReplay(f *testing.F) {
	f.Add([]byte(pos("a", t0, 0, t0) + "\n" + pos("a", t0+70_000, 0.001, t0+70_000) + "\n"))
	f.Add([]byte("not json\n\n   \n{\"courier\":\"a\",\"lat\":1,\"lon\":1,\"timestamp_ms\":5,\"arrival_ms\":9}\r\n"))
	f.Add([]byte(`{"courier":"a","lat":1,"lon":1,"timestamp_ms":5}` + "\n" + `{"courier":"a","lat":1,"lon":1,"timestamp_ms":5}`))
	f.Add([]byte("{\"arrival_ms\":1}\n{\"courier\":\"b\",\"lat\":1e999,\"lon\":1,\"timestamp_ms\":5}\n\xff\xfe"))
	f.Add([]byte(`{"courier":"a","lat":1,"lon":1,"timestamp_ms":253402300799999,"arrival_ms":9223372036854775807}` + "\n" + `{"courier":"b","lat":1,"lon":1,"timestamp_ms":253402300800000}` + "\n" + `{"courier":"c","lat":1,"lon":1,"timestamp_ms":1,"arrival_ms":1}`))
	f.Add([]byte(pos("a", t0, 0, t0) + "\n" + pos("b", t0+50_000, 0, t0) + "\n" + pos("c", t0+90_000, 0, t0+90_000) + "\n" + pos("d", t0+90_000, 0, t0+90_000) + "\n" + pos("b", t0+50_000, 0, t0+95_000) + "\n"))
	c := cfg()
	c.IdleTimeout = 10_000
	c.MaxCouriers = 2 // a full table: eviction and courier_limit
	f.Fuzz(func(t *testing.T, in []byte) {
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
