package replay

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/position"
)

// Edge values of a lake row's columns: what another tool could write,
// and what the contract's ranges turn on.
var (
	edgeCouriers = []string{"", strings.Repeat("x", 64), strings.Repeat("x", 65), "bad courier", "é", `a"b`, `a\b`, "\xff", "\x01", "a/b"}
	edgeTS       = []int64{0, -1, 1, position.MaxTimestamp, position.MaxTimestamp + 1, math.MinInt64, math.MaxInt64}
	edgeLat      = []float64{90, -90, math.Nextafter(90, 91), math.Nextafter(-90, -91), math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 1e300, 5e-324, -5e-324, 41.123456789012345}
	edgeLon      = []float64{180, -180, math.Nextafter(180, 181), math.Nextafter(-180, -181), math.NaN(), math.Copysign(0, -1), 2.000000000000001}
	edgeAccuracy = []float64{0, math.Copysign(0, -1), -1, math.NaN(), math.Inf(1), math.Inf(-1), 1e300, 5e-324, 7.123456789, math.MaxFloat64}
)

func pickOf[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

// randomRow is a row of a lake around t0: mostly a plain position, now
// and then with one or more edge values.
func randomRow(r *rand.Rand) lake.Row {
	row := lake.Row{
		Courier: []byte(pickOf(r, []string{"a", "b", "c", "van-3", "x.y:z_1"})), TimestampMs: t0 + r.Int64N(600_000), ArrivalMs: t0 + r.Int64N(600_000),
		Lat: 41 + math.Round(r.Float64()*1e6)/1e6, Lon: 2 + r.Float64(), AccuracyM: float64(r.IntN(50)), HasAccuracy: r.IntN(3) > 0,
	}
	if r.IntN(3) == 0 {
		row.Courier = []byte(pickOf(r, edgeCouriers))
	}
	if r.IntN(3) == 0 {
		row.TimestampMs = pickOf(r, edgeTS)
	}
	if r.IntN(3) == 0 {
		row.Lat = pickOf(r, edgeLat)
	}
	if r.IntN(3) == 0 {
		row.Lon = pickOf(r, edgeLon)
	}
	if r.IntN(3) == 0 {
		row.AccuracyM = pickOf(r, edgeAccuracy)
	}
	if r.IntN(4) == 0 {
		row.Lat, row.Lon = r.NormFloat64()*100, r.NormFloat64()*200 // any float64, in range or not
	}
	return row
}

// TestPlainRow_AgreesWithDecoder: every plainRow, the
// decoder accepts as its line, with positionOf's values bit for bit,
// and the line of every other row it rejects; a row the lake's writer
// writes of a phone's position is one.
func TestPlainRow_AgreesWithDecoder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var d position.Decoder
	taken, refused := 0, 0
	for range 300_000 {
		row := randomRow(r)
		var want, got position.Position
		reason := d.Decode(appendPosition(nil, &row), &want)
		if !plainRow(&row) {
			refused++
			if reason == position.OK {
				t.Fatalf("row %+v refused, but its line %s is a position", row, appendPosition(nil, &row))
			}
			continue
		}
		positionOf(&row, &got)
		taken++
		if reason != position.OK {
			t.Fatalf("row %+v taken as a position, but its line %s is %s", row, appendPosition(nil, &row), reason)
		}
		if !bytes.Equal(got.Courier, want.Courier) || math.Float64bits(got.Lat) != math.Float64bits(want.Lat) ||
			math.Float64bits(got.Lon) != math.Float64bits(want.Lon) || got.TS != want.TS ||
			math.Float64bits(got.Accuracy) != math.Float64bits(want.Accuracy) || got.Arrival != want.Arrival ||
			got.HasArrival != want.HasArrival || got.Missing != want.Missing || got.Type != want.Type {
			t.Fatalf("row %+v: taken as %+v, its line %s decodes to %+v", row, got, appendPosition(nil, &row), want)
		}
	}
	if taken < 10_000 || refused < 10_000 {
		t.Fatalf("%d rows taken, %d refused: the test needs many of both", taken, refused)
	}
	plain := lake.Row{Courier: []byte("c0001"), TimestampMs: t0, ArrivalMs: t0 + 900, Lat: 41.979412, Lon: 2.821401, AccuracyM: 8, HasAccuracy: true}
	if !plainRow(&plain) {
		t.Fatalf("%+v is no plainRow", plain)
	}
}

// parquetRow is a positions file's row as another tool writes it: any
// values, accuracy_m null or not.
type parquetRow struct {
	Courier      string   `parquet:"courier,dict"`
	TimestampMs  int64    `parquet:"timestamp_ms"`
	ArrivalMs    int64    `parquet:"arrival_ms"`
	Lat          float64  `parquet:"lat"`
	Lon          float64  `parquet:"lon"`
	AccuracyM    *float64 `parquet:"accuracy_m,optional"`
	LateDistance bool     `parquet:"late_distance"`
	LateSession  bool     `parquet:"late_session"`
}

func mustWriteParquet(t *testing.T, path string, rows []lake.Row) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[parquetRow](f)
	for _, r := range rows {
		pr := parquetRow{Courier: string(r.Courier), TimestampMs: r.TimestampMs, ArrivalMs: r.ArrivalMs, Lat: r.Lat, Lon: r.Lon}
		if r.HasAccuracy {
			pr.AccuracyM = &r.AccuracyM
		}
		if _, err := w.Write([]parquetRow{pr}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// randomLake is n rows of a few couriers as files of a lake would hold
// them, each tagged with the file it goes to (0 to files-1): arrival_ms
// mostly rising (ties across files; going back now and then, as in
// files another tool wrote), timestamps mostly recent, some late, some
// ahead of the clock, exact duplicates, a courier on the equator and
// the meridian (lat and lon -0, which the lines read as 0), accuracy_m
// null or not, and rows with edge values (randomRow).
func randomLake(r *rand.Rand, n, files int) (rows []lake.Row, file []int) {
	arrival := t0
	couriers := []string{"a", "b", "c", "d", "e", "zero"}
	for range n {
		if r.IntN(30) == 0 {
			arrival += r.Int64N(120_000) // a silence
		} else {
			arrival += r.Int64N(3_000)
		}
		arrival -= arrival % 1000 // ties
		var row lake.Row
		switch k := r.IntN(100); {
		case k < 4 && len(rows) > 0: // an exact duplicate, later
			row = rows[r.IntN(len(rows))]
		case k < 12:
			row = randomRow(r)
		default:
			c := pickOf(r, couriers)
			row = lake.Row{Courier: []byte(c), TimestampMs: arrival - r.Int64N(20_000),
				Lat: 41 + r.Float64()*0.01, Lon: 2 + r.Float64()*0.01, AccuracyM: float64(r.IntN(40)), HasAccuracy: r.IntN(3) > 0}
			if c == "zero" {
				row.Lat, row.Lon = math.Copysign(0, -1), math.Copysign(0, -1)
			}
			if r.IntN(8) == 0 {
				row.TimestampMs -= r.Int64N(200_000) // late
			}
			if r.IntN(30) == 0 {
				row.TimestampMs = arrival + r.Int64N(120_000) // ahead, maybe too far
			}
		}
		row.ArrivalMs = arrival
		if r.IntN(40) == 0 {
			row.ArrivalMs -= r.Int64N(30_000) // the file goes back
		}
		rows = append(rows, row)
		file = append(file, r.IntN(files))
	}
	return rows, file
}

// TestRunLake_DecodedEqualsLines replays random lakes (randomLake; a few
// files per lake, written as another tool would) with RunLake, which
// hands most rows to the engine decoded, and the same rows as a JSONL
// file of their lines (appendPosition, every one decoded by the
// engine), in the order the contract gives the lake's rows, under
// random configurations (full courier tables, allowed lateness, filters,
// dead zones, a service area, future skews): the results must be the
// same, byte for byte.
func TestRunLake_DecodedEqualsLines(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 15
	}
	var decoded, lines, rejected, limit, future, dups, late int64
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		c := randomConfig(r)
		c.MaxFutureSkew = max(c.MaxFutureSkew, 1) // the check applies
		nfiles := 1 + r.IntN(4)
		rows, file := randomLake(r, 200+r.IntN(400), nfiles)
		dir := t.TempDir()
		var paths []string
		for f := range nfiles {
			var fr []lake.Row
			for i, row := range rows {
				if file[i] == f {
					fr = append(fr, row)
				}
			}
			p := filepath.Join(dir, fmt.Sprintf("f%d.parquet", f))
			mustWriteParquet(t, p, fr)
			paths = append(paths, p)
		}
		// The contract's order: arrival_ms, ties by file, then row.
		order := make([]int, len(rows))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int {
			return cmp.Or(cmp.Compare(rows[a].ArrivalMs, rows[b].ArrivalMs), cmp.Compare(file[a], file[b]))
		})
		var jsonl []byte
		for _, i := range order {
			jsonl = append(appendPosition(jsonl, &rows[i]), '\n')
			if plainRow(&rows[i]) {
				decoded++
			} else {
				lines++
			}
		}
		var want, got bytes.Buffer
		wsum, err := Run(c, bytes.NewReader(jsonl), &want)
		if err != nil {
			t.Fatal(err)
		}
		gsum, err := RunLake(c, paths, &got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) || gsum.Stats.Received != wsum.Stats.Received {
			gl, wl := bytes.Split(got.Bytes(), []byte("\n")), bytes.Split(want.Bytes(), []byte("\n"))
			for i := range min(len(gl), len(wl)) {
				if !bytes.Equal(gl[i], wl[i]) {
					t.Fatalf("seed %d, config %+v: result %d differs:\nlake:  %s\njsonl: %s", seed, c, i, gl[i], wl[i])
				}
			}
			t.Fatalf("seed %d: %d results from the lake, %d from JSONL", seed, len(gl), len(wl))
		}
		st := wsum.Stats
		rejected += st.Results["rejected"]
		limit += st.Rejected["courier_limit"]
		future += st.Rejected["future_timestamp"]
		dups += st.Duplicates
		late += st.LateDistance + st.LateSession
	}
	t.Logf("rows decoded %d, as lines %d; rejected %d (courier_limit %d, future_timestamp %d); duplicates %d; late %d", decoded, lines, rejected, limit, future, dups, late)
	if decoded == 0 || lines == 0 || limit == 0 || future == 0 || rejected <= limit+future || dups == 0 || late == 0 {
		t.Fatal("the lakes miss a case the test is for")
	}
}
