// Package lake keeps every position the engine accepted as Apache Parquet
// files (contract §7, The lake), for `edgeproc daily`, `edgeproc replay
// --in` and any tool that reads Parquet (DuckDB, Spark, pandas):
//
//	DIR/positions/market=MARKET/date=YYYY-MM-DD/[PREFIX]FIRST-LAST.parquet
//
// date is the position's timestamp_ms as a calendar date in the market's
// time zone; FIRST and LAST are the log indexes (write-ahead log, or a
// partition's log lines) of the file's first and last row, 20 digits each,
// so that a date folder's names sort in log order and a rewrite of the
// same rows gets the same name. PREFIX names the file series in the
// partitioned source ("p3-": partition 3); the MQTT source's series has
// none. Columns are Columns; partition columns come from the path.
//
// A Writer writes one series. It buffers rows per date, columnar (RowCost
// bytes a row plus its courier id), and hands a batch to its own goroutine
// every roll interval or at Options.MaxBatchBytes, whichever comes first;
// each date's rows become one file written under a temporary name (not
// ending .parquet), fsynced, renamed and its folder fsynced, then a marker
// (DIR/_durable/market=MARKET/[PREFIX]durable) records the log index up
// to which every row is in a file. Durable is what the log may be
// truncated to; Open finds where the series stands from the marker and
// the files, and deletes what an interrupted roll or compaction left
// behind, so that a replay of the log from Durable()+1 writes each row
// exactly once.
//
// Compaction merges a date's small files once the date is closed: no
// bound in the contract stops a phone that buffered its positions from
// delivering one of a past date (it is accepted, late for both operators,
// and belongs in the lake), so no date is closed for certain. A date is
// taken as closed Options.CompactAfter (restore_ttl, default 24 h) after
// its end by the clock the Writer is ticked with: by then every courier
// that had a position in it has been forgotten by the engine. A position
// that arrives later still lands in its date, in a file of its own beside
// the merged one, and is merged with other such files at a later pass:
// compaction never changes the set of rows, whenever it runs. A merged
// file is named by the log range of the files it replaces, so a file
// whose range lies inside another's of the same series and date is one a
// compaction already copied: Open, and every reader (Files), ignore or
// delete it.
//
// Library: github.com/parquet-go/parquet-go rather than Apache Arrow's Go
// parquet. It is pure Go (the binary already needs cgo for H3, but adds
// no C), writes from plain Go structs through typed generic writers (no
// Arrow record builders in between), and reads a file's rows the same
// way, which both `replay` and `daily` need; Arrow's package is larger
// and brings the Arrow memory model for no gain here.
//
// Columns are zstd-compressed and the courier column dictionary-encoded:
// `make bench`'s fleet (717 038 positions) takes 12.6 MB with zstd against
// 17.1 MB with snappy, and zstd's 0.7 µs a row of writing (snappy's 0.2)
// is spent on the Writer's goroutine, a third of a percent of a core at
// 5 000 positions/s; every reader of note reads both. Row groups hold up
// to Options.RowGroupRows rows (default 1 M, tens of MB uncompressed):
// large enough for a column reader's sequential scan, small enough to
// read one at a time.
package lake
