package reference

import (
	"fmt"
	"strings"
	"testing"
)

// missOne: a file of one line, rejected as missing_field naming field.
func missOne(name, line, field string) boundaryCase {
	c := rejectOne(name, line, "missing_field")
	c.want[0]["field"] = field
	return c
}

// rejectOne: a file of one line, rejected for reason, before any clock.
func rejectOne(name, line, reason string) boundaryCase {
	return boundaryCase{
		name: name, params: baseParams, lines: []string{line},
		types: []string{"rejected", "no_signal"},
		want:  []map[string]any{rejRec(1, reason, line, 0)},
	}
}

// acceptOne: a file of one valid line, whose session shows it was accepted.
func acceptOne(name, line, courier string, ts int64, p [2]float64) boundaryCase {
	return boundaryCase{
		name: name, params: baseParams, lines: []string{line},
		types: []string{"rejected", "no_signal"},
		want:  []map[string]any{noSigRec(courier, ts, ts, p, 0, true)},
	}
}

// padTo makes a valid position line exactly n bytes long (plus an optional
// arrival_ms), padding with an unknown field.
func padTo(n int, arrival string) string {
	prefix := `{"courier":"c","lat":1,"lon":2,"timestamp_ms":600000` + arrival + `,"pad":"`
	return prefix + strings.Repeat("x", n-len(prefix)-2) + `"}`
}

func TestRun_Rejections(t *testing.T) {
	one := [2]float64{1, 2}
	tooLarge := padTo(4097, "")
	tooLargeWithArrival := padTo(4097, `,"arrival_ms":5`)
	long65 := strings.Repeat("x", 65)
	long64 := "AZaz09._:-" + strings.Repeat("y", 54)
	posWith := func(courier, lat, lon, ts string) string {
		return fmt.Sprintf(`{"courier":%s,"lat":%s,"lon":%s,"timestamp_ms":%s}`, courier, lat, lon, ts)
	}

	cases := []boundaryCase{
		// too_large: over 4 KiB; raw cut to 1 KiB; arrival_ms not read.
		{
			name: "over 4 KiB", params: baseParams, lines: []string{tooLarge},
			types: []string{"rejected", "no_signal"},
			want:  []map[string]any{rejRec(1, "too_large", tooLarge[:1024], 0)},
		},
		acceptOne("exactly 4 KiB", padTo(4096, ""), "c", 600000, one),
		{
			name: "arrival_ms of a too large line is not read", params: baseParams,
			lines: []string{tick(7), tooLargeWithArrival},
			types: []string{"rejected"},
			want: []map[string]any{
				missRec(1, "courier", tick(7), 7),
				rejRec(2, "too_large", tooLargeWithArrival[:1024], 7),
			},
		},

		// malformed_json.
		rejectOne("truncated object", `{"courier":`, "malformed_json"),
		rejectOne("array", `[1,2]`, "malformed_json"),
		rejectOne("string", `"van-3"`, "malformed_json"),
		rejectOne("null", `null`, "malformed_json"),
		rejectOne("number", `42`, "malformed_json"),
		rejectOne("NaN", posWith(`"c"`, "NaN", "2", "600000"), "malformed_json"),
		rejectOne("Infinity", posWith(`"c"`, "1", "Infinity", "600000"), "malformed_json"),
		rejectOne("two objects", `{"a":1} {"b":2}`, "malformed_json"),
		rejectOne("trailing brace", posWith(`"c"`, "1", "2", "600000")+"}", "malformed_json"),
		rejectOne("single quotes", `{'courier':'c'}`, "malformed_json"),
		{
			name: "arrival_ms of a malformed line is not read", params: baseParams,
			lines: []string{tick(7), `{"arrival_ms":5,"lat":NaN}`},
			types: []string{"rejected"},
			want: []map[string]any{
				missRec(1, "courier", tick(7), 7),
				rejRec(2, "malformed_json", `{"arrival_ms":5,"lat":NaN}`, 7),
			},
		},

		// missing_field: absent or null; checked before the field's value.
		missOne("empty object", `{}`, "courier"),
		missOne("courier absent", `{"lat":1,"lon":2,"timestamp_ms":600000}`, "courier"),
		missOne("courier null", posWith("null", "1", "2", "600000"), "courier"),
		missOne("lat absent", `{"courier":"c","lon":2,"timestamp_ms":600000}`, "lat"),
		missOne("lon null", posWith(`"c"`, "1", "null", "600000"), "lon"),
		missOne("timestamp absent, courier bad", `{"courier":5,"lat":1,"lon":2}`, "timestamp_ms"),
		missOne("timestamp null", posWith(`"c"`, "1", "2", "null"), "timestamp_ms"),

		// bad_courier.
		rejectOne("courier number", posWith("5", "1", "2", "600000"), "bad_courier"),
		rejectOne("courier empty", posWith(`""`, "1", "2", "600000"), "bad_courier"),
		rejectOne("courier 65 chars", posWith(`"`+long65+`"`, "1", "2", "600000"), "bad_courier"),
		rejectOne("courier with space", posWith(`"van 3"`, "1", "2", "600000"), "bad_courier"),
		rejectOne("courier non-ASCII", posWith(`"vän-3"`, "1", "2", "600000"), "bad_courier"),
		rejectOne("courier with slash", posWith(`"a/b"`, "1", "2", "600000"), "bad_courier"),
		rejectOne("courier with newline escape", posWith(`"a\n"`, "1", "2", "600000"), "bad_courier"),
		rejectOne("courier array", posWith(`["c"]`, "1", "2", "600000"), "bad_courier"),
		rejectOne("courier bad and lat bad", posWith(`"a b"`, "91", "2", "600000"), "bad_courier"),
		acceptOne("courier 64 chars of every class", posWith(`"`+long64+`"`, "1", "2", "600000"), long64, 600000, one),

		// bad_coordinates.
		rejectOne("lat above 90", posWith(`"c"`, "90.5", "2", "600000"), "bad_coordinates"),
		rejectOne("lat below -90", posWith(`"c"`, "-90.0001", "2", "600000"), "bad_coordinates"),
		rejectOne("lon above 180", posWith(`"c"`, "1", "180.1", "600000"), "bad_coordinates"),
		rejectOne("lon below -180", posWith(`"c"`, "1", "-181", "600000"), "bad_coordinates"),
		rejectOne("lat as string", posWith(`"c"`, `"41.9"`, "2", "600000"), "bad_coordinates"),
		rejectOne("lat too large for float64", posWith(`"c"`, "1e400", "2", "600000"), "bad_coordinates"),
		rejectOne("lon bool", posWith(`"c"`, "1", "true", "600000"), "bad_coordinates"),
		rejectOne("lat bad and timestamp bad", posWith(`"c"`, "-91", "2", "1.5"), "bad_coordinates"),
		acceptOne("lat 90 lon -180", posWith(`"c"`, "90", "-180", "600000"), "c", 600000, [2]float64{90, -180}),
		acceptOne("lat -90 lon 180", posWith(`"c"`, "-90", "180", "600000"), "c", 600000, [2]float64{-90, 180}),
		acceptOne("underflow rounds to 0", posWith(`"c"`, "1e-400", "2", "600000"), "c", 600000, [2]float64{0, 2}),

		// bad_timestamp.
		rejectOne("timestamp with fraction", posWith(`"c"`, "1", "2", "600000.5"), "bad_timestamp"),
		rejectOne("timestamp with .0", posWith(`"c"`, "1", "2", "600000.0"), "bad_timestamp"),
		rejectOne("timestamp with exponent", posWith(`"c"`, "1", "2", "6e5"), "bad_timestamp"),
		rejectOne("timestamp with capital exponent", posWith(`"c"`, "1", "2", "6E5"), "bad_timestamp"),
		rejectOne("timestamp as string", posWith(`"c"`, "1", "2", `"600000"`), "bad_timestamp"),
		rejectOne("timestamp zero", posWith(`"c"`, "1", "2", "0"), "bad_timestamp"),
		rejectOne("timestamp minus zero", posWith(`"c"`, "1", "2", "-0"), "bad_timestamp"),
		rejectOne("timestamp negative", posWith(`"c"`, "1", "2", "-5"), "bad_timestamp"),
		rejectOne("timestamp over int64", posWith(`"c"`, "1", "2", "9223372036854775808"), "bad_timestamp"),
		rejectOne("timestamp bool", posWith(`"c"`, "1", "2", "true"), "bad_timestamp"),
		acceptOne("timestamp 1", posWith(`"c"`, "1", "2", "1"), "c", 1, one),
		acceptOne("timestamp 9999-12-31T23:59:59.999Z", posWith(`"c"`, "1", "2", "253402300799999"), "c", 253402300799999, one),
		rejectOne("timestamp 1 ms after 9999", posWith(`"c"`, "1", "2", "253402300800000"), "bad_timestamp"),
		rejectOne("timestamp max int64", posWith(`"c"`, "1", "2", "9223372036854775807"), "bad_timestamp"),

		// Unknown fields are ignored; accuracy_m of any kind never rejects.
		acceptOne("unknown fields and odd accuracy", `{"courier":"c","lat":1,"lon":2,"timestamp_ms":600000,"x":[1,{"y":null}],"accuracy_m":"bad"}`, "c", 600000, one),
	}
	runBoundaryCases(t, cases)
}

func TestRun_LinesAndRaw(t *testing.T) {
	cut := func(s string) string { return s + strings.Repeat("z", 100) }
	a1023, a1022 := strings.Repeat("a", 1023), strings.Repeat("a", 1022)
	runBoundaryCases(t, []boundaryCase{
		{
			name: "blank lines are skipped but counted", params: baseParams,
			lines: []string{"", "   ", "\t\r", "{", "", pos("c", 600000, ptA), "x"},
			types: []string{"rejected", "no_signal"},
			want: []map[string]any{
				rejRec(4, "malformed_json", "{", 0),
				noSigRec("c", 600000, 600000, ptA, 0, true),
				rejRec(7, "malformed_json", "x", 0),
			},
		},
		{
			// é is 2 bytes at 1023..1024: the cut at 1024 falls inside it.
			name: "raw cut before a 2-byte rune across 1 KiB", params: baseParams,
			lines: []string{cut(a1023 + "é")},
			types: []string{"rejected"},
			want:  []map[string]any{rejRec(1, "malformed_json", a1023, 0)},
		},
		{
			// é is 2 bytes at 1022..1023: it fits exactly.
			name: "raw keeps a rune ending at 1 KiB", params: baseParams,
			lines: []string{cut(a1022 + "é")},
			types: []string{"rejected"},
			want:  []map[string]any{rejRec(1, "malformed_json", a1022+"é", 0)},
		},
		{
			// € is 3 bytes at 1022..1024.
			name: "raw cut before a 3-byte rune across 1 KiB", params: baseParams,
			lines: []string{cut(a1022 + "€")},
			types: []string{"rejected"},
			want:  []map[string]any{rejRec(1, "malformed_json", a1022, 0)},
		},
		{
			name: "raw of a line of exactly 1 KiB is whole", params: baseParams,
			lines: []string{strings.Repeat("b", 1024)},
			types: []string{"rejected"},
			want:  []map[string]any{rejRec(1, "malformed_json", strings.Repeat("b", 1024), 0)},
		},
	})
}

func TestRun_EmptyInput(t *testing.T) {
	for _, in := range []string{"", "\n", "  \n\t\n"} {
		if got := Run(baseParams(), []byte(in)); len(got) != 0 {
			t.Errorf("Run(%q): got %d records, want none", in, len(got))
		}
	}
}

func TestRun_InvalidParamsPanics(t *testing.T) {
	p := baseParams()
	p.SlideMs = 0
	defer func() {
		if recover() == nil {
			t.Errorf("Run with SlideMs 0: got no panic, want one")
		}
	}()
	Run(p, nil)
}
