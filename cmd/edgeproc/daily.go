package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/daily"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/market"
)

// publishTimeout bounds how long daily waits for NATS to ack its records.
const publishTimeout = 2 * time.Minute

var dailyCommand = &command{
	name:    "daily",
	args:    "--config FILE --date YYYY-MM-DD|yesterday [--out FILE|-] [--no-publish] [--memory MiB]",
	summary: "each courier's day (distance, positions, first and last seen) from the lake",
	help: `Computes each courier's day from the lake's positions (lake.dir, contract
§9; rules in docs/lake.md): distance_m (the same distance filter as the
windows, a courier's rows of earlier dates as predecessors, afresh after
restore_ttl), positions, late_positions, first_seen_ms and last_seen_ms,
one record per courier with a position on the date, couriers in byte
order, key daily|MARKET|COURIER|DATE.

--date is a calendar date in the market's time zone (timezone), or
"yesterday" there. With --out the records go to that file: JSON lines, or
CSV or Parquet by its extension (.csv, .parquet); - is stdout. Without
--out they go to the lake as Parquet (lake.dir/daily/market=M/date=D/
daily.parquet, replaced whole) and are published to NATS
(PREFIX.dashboard.MARKET.daily, Nats-Msg-Id = key) unless --no-publish.
A summary goes to stderr.`,
	example: `edgeproc daily --config girona.yaml --date 2026-12-03 --out - | head
edgeproc daily --config girona.yaml --date yesterday`,
	setup: func(fs *flag.FlagSet) runFunc {
		cfgPath := fs.String("config", "", "market configuration `FILE` (required)")
		date := fs.String("date", "", "the `DATE`, YYYY-MM-DD or yesterday, in the market's time zone (required)")
		outPath := fs.String("out", "", "output `FILE` (.jsonl/.json, .csv, .parquet; - for JSON lines on stdout); default: the lake and NATS")
		noPublish := fs.Bool("no-publish", false, "without --out, write the lake's table but publish nothing")
		memory := fs.Int64("memory", daily.DefaultMemoryBudget>>20, "`MiB` of rows held at once (60 bytes a row; the process peaks at about twice this); a larger lake is read in several passes")
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			if *cfgPath == "" || *date == "" || len(args) > 0 {
				return usageError{"daily takes --config FILE --date YYYY-MM-DD"}
			}
			if *memory <= 0 {
				return usageError{"--memory must be > 0"}
			}
			return runDaily(ctx, *cfgPath, *date, *outPath, !*noPublish, *memory<<20, stdout, stderr)
		}
	},
}

func runDaily(ctx context.Context, cfgPath, date, outPath string, publish bool, memory int64, stdout, stderr io.Writer) error {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	if cfg.Lake.Dir == "" {
		return fmt.Errorf("%s: lake.dir is not set: there is no lake to read", cfgPath)
	}
	loc := cfg.Location()
	now := time.Now()
	if date == "yesterday" {
		date = daily.Yesterday(now, loc)
	}
	if _, _, err := lake.DateBounds(date, loc); err != nil {
		return usageError{err.Error()}
	}
	start := time.Now()
	opts := daily.Options{
		Dir: cfg.Lake.Dir, Market: cfg.Market, Location: loc, Date: date,
		RestoreTTL: cfg.Windows.RestoreTTL, Filter: market.EngineConfig(cfg).Filter, EmittedAt: now.UnixMilli(),
		MemoryBudget: memory,
	}
	recs, sum, err := daily.Compute(opts)
	if errors.Is(err, fs.ErrNotExist) {
		// The service compacted the date while it was read (the files
		// listed were merged and removed): list them again.
		recs, sum, err = daily.Compute(opts)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "daily: market %s, %s: %d couriers from %d rows of %d files (%d passes) in %s\n",
		cfg.Market, date, len(recs), sum.Rows, sum.Files, sum.Passes, time.Since(start).Round(time.Millisecond))
	switch {
	case outPath == "-":
		return daily.WriteJSON(stdout, recs)
	case outPath != "":
		return writeDailyFile(outPath, recs)
	}
	path := daily.TablePath(cfg.Lake.Dir, cfg.Market, date)
	if _, err := lake.WriteFileAtomic(path, func(w io.Writer) error { return daily.WriteParquet(w, recs, true) }); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "daily: wrote %s\n", path)
	if !publish || cfg.NATS.URL == "embedded" {
		return nil
	}
	return publishDaily(ctx, cfg, recs, stderr)
}

// writeDailyFile writes recs to path in the format its extension names.
func writeDailyFile(path string, recs []daily.Record) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".csv":
		err = daily.WriteCSV(f, recs)
	case ".parquet":
		err = daily.WriteParquet(f, recs, false)
	default:
		err = daily.WriteJSON(f, recs)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("output %s: %w", path, err)
	}
	return nil
}

// publishDaily publishes recs to the market's results stream through the
// bridge the service uses (the same stream, subjects and dedup by key),
// and waits for every ack.
func publishDaily(ctx context.Context, cfg config.Config, recs []daily.Record, stderr io.Writer) error {
	opts := []nats.Option{nats.Name("edgeproc daily"), nats.Timeout(10 * time.Second)}
	if creds := cfg.NATS.Creds(); creds != "" {
		opts = append(opts, nats.UserCredentialBytes([]byte(creds)))
	}
	nc, err := nats.Connect(cfg.NATS.URL, opts...)
	if err != nil {
		return fmt.Errorf("connect to nats %s: %w", cfg.NATS.URL, err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	b, err := bridge.Open(ctx, nc, market.BridgeConfig(cfg), nil)
	if err != nil {
		return err
	}
	subject := b.Config().Subject("daily")
	var buf []byte
	for i := range recs {
		buf = recs[i].AppendJSON(buf[:0])
		if err := b.Publish(ctx, subject, recs[i].Key, buf); err != nil {
			return errors.Join(fmt.Errorf("publish %s: %w", recs[i].Key, err), b.Close(ctx))
		}
	}
	if err := b.Close(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "daily: published %d records to %s\n", len(recs), subject)
	return nil
}
