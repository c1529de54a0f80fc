package daily

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"io"
	"strconv"

	"github.com/parquet-go/parquet-go"
)

// AppendJSON appends r as the contract's daily record (§9), one JSON
// object without a newline.
func (r *Record) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"type":"daily","market":`...)
	dst = appendString(dst, r.Market)
	dst = append(dst, `,"courier":`...)
	dst = appendString(dst, r.Courier)
	dst = append(dst, `,"key":`...)
	dst = appendString(dst, r.Key)
	dst = append(dst, `,"date":`...)
	dst = appendString(dst, r.Date)
	dst = append(dst, `,"distance_m":`...)
	dst = strconv.AppendFloat(dst, r.DistanceM, 'f', -1, 64)
	dst = append(dst, `,"positions":`...)
	dst = strconv.AppendInt(dst, r.Positions, 10)
	dst = append(dst, `,"late_positions":`...)
	dst = strconv.AppendInt(dst, r.LatePositions, 10)
	dst = append(dst, `,"first_seen_ms":`...)
	dst = strconv.AppendInt(dst, r.FirstSeenMs, 10)
	dst = append(dst, `,"last_seen_ms":`...)
	dst = strconv.AppendInt(dst, r.LastSeenMs, 10)
	dst = append(dst, `,"emitted_at_ms":`...)
	dst = strconv.AppendInt(dst, r.EmittedAtMs, 10)
	return append(dst, '}')
}

func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}

// WriteJSON writes recs as JSON lines.
func WriteJSON(w io.Writer, recs []Record) error {
	bw := bufio.NewWriter(w)
	var buf []byte
	for i := range recs {
		buf = append(recs[i].AppendJSON(buf[:0]), '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// CSVHeader is the first line of WriteCSV's output: the JSON record's
// fields, in its order.
var CSVHeader = []string{"type", "market", "courier", "key", "date", "distance_m", "positions", "late_positions", "first_seen_ms", "last_seen_ms", "emitted_at_ms"}

// WriteCSV writes recs as CSV with a header line.
func WriteCSV(w io.Writer, recs []Record) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, r := range recs {
		err := cw.Write([]string{"daily", r.Market, r.Courier, r.Key, r.Date,
			strconv.FormatFloat(r.DistanceM, 'f', -1, 64), strconv.FormatInt(r.Positions, 10),
			strconv.FormatInt(r.LatePositions, 10), strconv.FormatInt(r.FirstSeenMs, 10),
			strconv.FormatInt(r.LastSeenMs, 10), strconv.FormatInt(r.EmittedAtMs, 10)})
		if err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// tableRow is a row of the daily table in the lake
// (daily/market=M/date=D/): market and date come from the path.
type tableRow struct {
	Courier       string  `parquet:"courier,zstd"`
	Key           string  `parquet:"key,zstd"`
	DistanceM     float64 `parquet:"distance_m,zstd"`
	Positions     int64   `parquet:"positions,zstd"`
	LatePositions int64   `parquet:"late_positions,zstd"`
	FirstSeenMs   int64   `parquet:"first_seen_ms,zstd"`
	LastSeenMs    int64   `parquet:"last_seen_ms,zstd"`
	EmittedAtMs   int64   `parquet:"emitted_at_ms,zstd"`
}

// fileRow is a row of a daily Parquet file named by --out: market and
// date are columns.
type fileRow struct {
	Market        string  `parquet:"market,zstd"`
	Date          string  `parquet:"date,zstd"`
	Courier       string  `parquet:"courier,zstd"`
	Key           string  `parquet:"key,zstd"`
	DistanceM     float64 `parquet:"distance_m,zstd"`
	Positions     int64   `parquet:"positions,zstd"`
	LatePositions int64   `parquet:"late_positions,zstd"`
	FirstSeenMs   int64   `parquet:"first_seen_ms,zstd"`
	LastSeenMs    int64   `parquet:"last_seen_ms,zstd"`
	EmittedAtMs   int64   `parquet:"emitted_at_ms,zstd"`
}

// WriteParquet writes recs as a Parquet file; partitioned leaves out the
// market and date columns (the lake's path holds them).
func WriteParquet(w io.Writer, recs []Record, partitioned bool) error {
	if partitioned {
		pw := parquet.NewGenericWriter[tableRow](w)
		rows := make([]tableRow, len(recs))
		for i, r := range recs {
			rows[i] = r.table()
		}
		if _, err := pw.Write(rows); err != nil {
			return err
		}
		return pw.Close()
	}
	pw := parquet.NewGenericWriter[fileRow](w)
	rows := make([]fileRow, len(recs))
	for i, r := range recs {
		t := r.table()
		rows[i] = fileRow{Market: r.Market, Date: r.Date, Courier: t.Courier, Key: t.Key, DistanceM: t.DistanceM,
			Positions: t.Positions, LatePositions: t.LatePositions, FirstSeenMs: t.FirstSeenMs, LastSeenMs: t.LastSeenMs,
			EmittedAtMs: t.EmittedAtMs}
	}
	if _, err := pw.Write(rows); err != nil {
		return err
	}
	return pw.Close()
}

func (r Record) table() tableRow {
	return tableRow{Courier: r.Courier, Key: r.Key, DistanceM: r.DistanceM, Positions: r.Positions,
		LatePositions: r.LatePositions, FirstSeenMs: r.FirstSeenMs, LastSeenMs: r.LastSeenMs, EmittedAtMs: r.EmittedAtMs}
}
