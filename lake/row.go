package lake

import (
	"math"

	"github.com/parquet-go/parquet-go"
)

// Row is one accepted position as the lake keeps it.
type Row struct {
	// Index is the row's position in the log (write-ahead log index, or a
	// partition's line): rows are appended in increasing Index order. It is
	// not a column: files are named by it.
	Index uint64
	// Courier is the courier id; Append copies it.
	Courier     []byte
	TimestampMs int64 // event time
	ArrivalMs   int64 // processing time it arrived, as logged
	Lat, Lon    float64
	// AccuracyM is accuracy_m; HasAccuracy false (null in the file) when
	// the input had none usable (contract §2).
	AccuracyM   float64
	HasAccuracy bool
	// LateDistance and LateSession are the engine's judgement (contract §3,
	// Lateness).
	LateDistance, LateSession bool
}

// fileRow is a Parquet row, the columns of contract §7 in their order.
type fileRow struct {
	Courier      string   `parquet:"courier,dict,zstd"`
	TimestampMs  int64    `parquet:"timestamp_ms,zstd"`
	ArrivalMs    int64    `parquet:"arrival_ms,zstd"`
	Lat          float64  `parquet:"lat,zstd"`
	Lon          float64  `parquet:"lon,zstd"`
	AccuracyM    *float64 `parquet:"accuracy_m,optional,zstd"`
	LateDistance bool     `parquet:"late_distance,zstd"`
	LateSession  bool     `parquet:"late_session,zstd"`
}

// Schema is the positions files' Parquet schema (contract §7).
var Schema = parquet.SchemaOf(fileRow{})

// Columns are the positions files' column names, in file order.
var Columns = []string{"courier", "timestamp_ms", "arrival_ms", "lat", "lon", "accuracy_m", "late_distance", "late_session"}

// RowCost is what a buffered row costs in a Writer's batch, in bytes,
// besides its courier id: its index, five 8-byte numbers, the accuracy,
// the flags and the id's end offset. Slices grow by doubling, so the
// memory held is up to twice the batch's bytes; the batch bound
// (Options.MaxBatchBytes) counts RowCost + len(courier) a row.
const RowCost = 8 + 5*8 + 1 + 4

// noAccuracy marks a null accuracy_m in a batch.
var noAccuracy = math.NaN()
