package result

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// randomRecord draws a record of every field its type writes.
func randomRecord(rng *rand.Rand) Record {
	ts := func() int64 { return rng.Int64N(1 << 45) }
	deg := func(r float64) float64 { return (rng.Float64()*2 - 1) * r }
	r := Record{Type: Types[rng.IntN(len(Types))], Market: "girona", Courier: "van-3", EmittedAt: ts(), Cell: 0x89394460cafffff + 1<<rng.IntN(12)}
	switch r.Type {
	case Distance:
		r.Start, r.End, r.DistanceM, r.Positions = ts(), ts(), rng.Float64()*1e4, rng.IntN(200)
		r.Stopped, r.InsufficientEvidence, r.Revision = rng.IntN(2) == 0, rng.IntN(2) == 0, rng.IntN(3)
	case NoSignal:
		r.Start, r.End, r.Lat, r.Lon, r.EndOfInput = ts(), ts(), deg(90), deg(180), rng.IntN(2) == 0
	case SignalRestored:
		r.SilentFrom, r.RestoredAt, r.Cell = ts(), ts(), 0
	case Late:
		r.TS, r.Watermark, r.Operator, r.Cell = ts(), ts(), Operator(rng.IntN(2)), 0
	case LeftArea, EnteredArea:
		r.TS, r.Lat, r.Lon = ts(), deg(90), deg(180)
	case DeadZone:
		r.Courier, r.Start, r.End = "", ts(), ts()
		w := 1 + rng.IntN(20)
		r.Zone = &Zone{Warnings: w, Couriers: 1 + rng.IntN(w), Restored: rng.IntN(w + 1), SilenceMs: ts(), LongestMs: ts()}
	case Rejected:
		r.Courier, r.Cell, r.Reason, r.Field, r.Raw, r.Line = "", 0, "missing_field", "lat", []byte(`{"courier":"van-3","lon":2}`), ts()
	}
	return r
}

// TestParse_ReadsWhatIsWritten: Parse of AppendJSON's record writes the
// same bytes again, for records of every type and field drawn at random.
func TestParse_ReadsWhatIsWritten(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		r := randomRecord(rng)
		want := r.AppendJSON(nil)
		got, err := Parse(want)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if again := got.AppendJSON(nil); !bytes.Equal(again, want) {
			t.Fatalf("read back\n%s\nwritten\n%s", again, want)
		}
	}
}

// FuzzParse: no input makes Parse panic, and what it reads it reads the
// same once written again.
func FuzzParse(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10 {
		r := randomRecord(rng)
		f.Add(r.AppendJSON(nil))
	}
	f.Add([]byte(`{"type":"distance"}`))
	f.Add([]byte(`{"type":"dead_zone_part","partition":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data)
		if err != nil {
			return
		}
		b := r.AppendJSON(nil)
		r2, err := Parse(b)
		if err != nil {
			t.Fatalf("%s: written as %s, which does not read: %v", data, b, err)
		}
		if b2 := r2.AppendJSON(nil); !bytes.Equal(b, b2) {
			t.Fatalf("%s reads as %s, then as %s", data, b, b2)
		}
	})
}
