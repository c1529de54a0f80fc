package geo

import "testing"

// TestPresence_Hysteresis: a courier moves to the other side of the area
// only after ConfirmFixes fixes in a row there, dated by the first; a
// spike, the border band and fixes out of order move nobody, and a fix in
// the band breaks a row.
func TestPresence_Hysteresis(t *testing.T) {
	a, err := LoadArea("../demo/girona-area.geojson", AreaResolution)
	if err != nil {
		t.Fatal(err)
	}
	in, out := Fix{Lat: 41.9794, Lon: 2.8214}, Fix{Lat: 41.80, Lon: 2.50}
	// A point of the border band, on the line from in to out.
	var border Fix
	for i := 0; i <= 1000; i++ {
		f := float64(i) / 1000
		x := Fix{Lat: in.Lat + f*(out.Lat-in.Lat), Lon: in.Lon + f*(out.Lon-in.Lon)}
		if a.Side(a.Cell(x.Lat, x.Lon)) == Border {
			border = x
			break
		}
	}
	if a.Side(a.Cell(in.Lat, in.Lon)) != Inside || a.Side(a.Cell(out.Lat, out.Lon)) != Outside || border.Lat == 0 {
		t.Fatalf("test points: in %v, out %v, border %v", a.Side(a.Cell(in.Lat, in.Lon)), a.Side(a.Cell(out.Lat, out.Lon)), border)
	}
	at := func(f Fix, ts int64) Fix { f.TS = ts; return f }
	type move struct {
		left Side
		ts   int64
	}
	for _, c := range []struct {
		name  string
		fixes []Fix
		want  []move
	}{
		{"first side is no move", []Fix{at(out, 1), at(out, 2), at(in, 3)}, nil},
		{"driving out: one move, dated by the first fix out", []Fix{at(in, 1), at(in, 2), at(border, 3), at(out, 4), at(out, 5), at(out, 6)}, []move{{Inside, 4}}},
		{"a spike out and back", []Fix{at(in, 1), at(out, 2), at(in, 3), at(out, 4), at(in, 5)}, nil},
		{"the border breaks a row", []Fix{at(in, 1), at(out, 2), at(border, 3), at(out, 4)}, nil},
		{"the border before the row", []Fix{at(in, 1), at(border, 2), at(out, 3), at(out, 4)}, []move{{Inside, 3}}},
		{"parked on the border", []Fix{at(in, 1), at(border, 2), at(border, 3), at(border, 4), at(in, 5), at(border, 6)}, nil},
		{"out and back in", []Fix{at(in, 1), at(out, 2), at(out, 3), at(in, 4), at(in, 5)}, []move{{Inside, 2}, {Outside, 4}}},
		{"a fix out of order is not taken", []Fix{at(in, 1), at(out, 5), at(in, 3), at(out, 6)}, []move{{Inside, 5}}},
		{"a border fix first", []Fix{at(border, 1), at(out, 2), at(in, 3), at(in, 4)}, []move{{Outside, 3}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p Presence
			var got []move
			for _, x := range c.fixes {
				if left, when, ok := p.Step(a, x); ok {
					got = append(got, move{left, when.TS})
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("got moves %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("got moves %v, want %v", got, c.want)
				}
			}
		})
	}
}
