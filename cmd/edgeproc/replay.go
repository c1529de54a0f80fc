package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/mqttsource"
	"github.com/km0/edgeproc/position"
	"github.com/km0/edgeproc/replay"
)

// ownTracksTopic is the subscription filter a replay in the OwnTracks
// format matches each line's topic against when the config is for another
// format: the app's own topics, owntracks/USER/DEVICE.
const ownTracksTopic = "owntracks/+/+"

// progressMin is the input size from which a terminal gets a progress bar.
const progressMin = 32 << 20

var replayCommand = &command{
	name:    "replay",
	args:    "--config FILE [--in FILE|-] [--out FILE|-] [--shards N] [--format edgeproc|owntracks]",
	summary: "process a JSONL file of positions (or the lake's Parquet files), write JSONL results",
	help: `Runs the engine over a file: each input line is a position (with an
optional arrival_ms, the processing time it arrived at), each output line
a result or a rejected input, exactly as the live service publishes them
(docs/reference.md). At the end everything still open fires. A summary
goes to stderr. --shards changes the parallelism, never the output.

--format (default: the config's mqtt.format) reads the lines as edgeproc
positions or as OwnTracks messages: each line is the OwnTracks JSON object
plus "topic":"owntracks/USER/DEVICE" and the optional arrival_ms, e.g.
{"_type":"location","lat":41.97,"lon":2.82,"tst":1726308298,"acc":8,
"topic":"owntracks/jane/phone","arrival_ms":1726308299000}. The courier is
the topic's level that mqtt.owntracks_courier names, matched against
mqtt.topic when the config's format is owntracks, else against
owntracks/+/+ (docs/semantics.md, Input formats).

--in may also name the lake's Parquet files (docs/lake.md): a folder
(lake/positions/market=M/date=D, or any folder above), a glob (quote it:
'lake/positions/market=M/date=2026-12-*') or .parquet files. Their rows
are replayed in arrival order (arrival_ms; ties by file name, then row),
as a JSONL file of the same positions with the same arrival_ms would be.`,
	example: `edgeproc replay --config testdata/worked.yaml --in testdata/worked.jsonl
edgeproc replay --config girona.yaml --in /var/lib/edgeproc/lake/positions/market=girona/date=2026-12-03`,
	setup: func(fs *flag.FlagSet) runFunc {
		cfgPath := fs.String("config", "", "market configuration `FILE` (required)")
		inPath := fs.String("in", "-", "input JSONL `FILE`, - for stdin; or a lake folder, a glob or a .parquet file")
		outPath := fs.String("out", "-", "output JSONL `FILE`, - for stdout")
		shards := fs.Int("shards", 0, "shard goroutines (default: number of CPUs); results do not depend on it")
		format := fs.String("format", "", "input `FORMAT`: edgeproc or owntracks (default: the config's mqtt.format)")
		return func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			if *cfgPath == "" || len(args) > 0 {
				return usageError{"replay takes --config FILE"}
			}
			if _, ok := position.ParseFormat(*format); *format != "" && !ok {
				return usageError{fmt.Sprintf("--format %q: must be edgeproc or owntracks", *format)}
			}
			return replayFile(*cfgPath, *inPath, *outPath, *format, *shards, stdout, stderr)
		}
	},
}

func replayFile(cfgPath, inPath, outPath, format string, shards int, stdout, stderr io.Writer) error {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	if format != "" && format != cfg.MQTT.Format {
		// The config's topic is for its own format's messages.
		cfg.MQTT.Format, cfg.MQTT.Topic = format, ownTracksTopic
	}
	if isLakeInput(inPath) {
		return replayLake(cfg, inPath, outPath, shards, stdout, stderr)
	}
	in, closeIn, err := openReplayInput(inPath, stderr)
	if err != nil {
		return err
	}
	defer closeIn()
	var out io.Writer = stdout
	var outFile *os.File
	if outPath != "-" {
		outFile, err = os.Create(outPath)
		if err != nil {
			return fmt.Errorf("output: %w", err)
		}
		out = outFile
	}
	err = replayResults(cfg, shards, in, out, stderr)
	if outFile != nil {
		err = errors.Join(err, outFile.Close())
	}
	return err
}

// isLakeInput reports whether a replay's --in names Parquet input: a
// folder, a glob or a .parquet file.
func isLakeInput(path string) bool {
	if path == "-" {
		return false
	}
	if strings.ContainsAny(path, "*?[") || strings.HasSuffix(path, ".parquet") {
		return true
	}
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// replayLake replays the lake's Parquet files named by in.
func replayLake(cfg config.Config, in, outPath string, shards int, stdout, stderr io.Writer) error {
	files, err := lake.Files(in)
	if err != nil {
		return fmt.Errorf("input: %w", err)
	}
	if len(files) == 0 {
		return fmt.Errorf("input: no .parquet file in %s", in)
	}
	var out io.Writer = stdout
	var outFile *os.File
	if outPath != "-" {
		if outFile, err = os.Create(outPath); err != nil {
			return fmt.Errorf("output: %w", err)
		}
		out = outFile
	}
	ecfg := market.EngineConfig(cfg)
	// The lake's rows are positions whatever format their messages came
	// in: they replay as the contract's objects.
	ecfg.Format, ecfg.Shards = position.FormatEdgeproc, shards
	sum, err := replay.RunLake(ecfg, files, out)
	fmt.Fprintln(stderr, sum)
	if outFile != nil {
		err = errors.Join(err, outFile.Close())
	}
	return err
}

// openReplayInput opens a replay's input, - for stdin; a file of at least
// progressMin bytes shows a progress bar on a terminal stderr. close
// closes the file and finishes the bar.
func openReplayInput(path string, stderr io.Writer) (in io.Reader, close func(), err error) {
	if path == "-" {
		return os.Stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("input: %w", err)
	}
	if st, err := f.Stat(); err == nil && st.Size() >= progressMin && isTerminal(stderr) {
		bar := progressbar.DefaultBytes(st.Size(), "replay")
		return io.TeeReader(f, bar), func() { bar.Finish(); f.Close() }, nil
	}
	return f, func() { f.Close() }, nil
}

// replayResults runs the engine configured by cfg over in and writes every
// result as a JSON line to out, then the summary line to stderr: the one
// path of `edgeproc replay` and `edgeproc deadzones --in`.
func replayResults(cfg config.Config, shards int, in io.Reader, out, stderr io.Writer) error {
	ecfg := market.EngineConfig(cfg)
	ecfg.Shards = shards
	ecfg.Log = slog.New(slog.NewTextHandler(stderr, nil))
	if ecfg.Format == position.FormatOwnTracks {
		ecfg.Topic = cfg.MQTT.Topic // each line's "topic" is matched against it
	}
	sum, err := replay.Run(ecfg, in, out)
	fmt.Fprintln(stderr, sum)
	return err
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

var checkConfigCommand = &command{
	name:    "check-config",
	args:    "FILE...",
	summary: "validate market configuration files, alone and together",
	help: `Checks each file as run would, then the files together as one process
would run them (two markets sharing a name, an MQTT session, a stream, a
state directory or an HTTP port are refused). Every problem is reported,
as FILE:LINE: key = "value": reason. Warnings (a market's topic naming
another market) go to stderr and do not fail the check. Every key is
documented in go doc ./config.

With --state (the default) each market's saved state is checked too, as
run would restore it: a state.dir whose newest checkpoint was taken with
another market name, window size, slide, gap, tolerated delay, allowed
lateness, restore TTL or distance filter is refused, as run would refuse
it (docs/runbook.md: changing window settings). Only the checkpoint's
header is read; nothing is started or written.`,
	example: "edgeproc check-config examples/girona.yaml examples/valencia.yaml",
	setup: func(fs *flag.FlagSet) runFunc {
		state := fs.Bool("state", true, "check each market's saved state (state.dir) as run would restore it")
		return func(_ context.Context, files []string, stdout, stderr io.Writer) error {
			if len(files) == 0 {
				return usageError{"check-config takes one or more FILEs"}
			}
			cfgs, warnings, err := loadConfigs(files)
			if err == nil {
				err = checkLakeDirs(files, cfgs)
			}
			if err != nil {
				return err
			}
			for _, w := range warnings {
				fmt.Fprintln(stderr, "warning:", w)
			}
			var errs []error
			checked := make([]string, len(cfgs))
			for i, c := range cfgs {
				if !*state {
					continue
				}
				if checked[i], err = mqttsource.CheckState(c); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", files[i], err))
				}
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
			for i, c := range cfgs {
				fmt.Fprintf(stdout, "%s: ok (market %s)\n", files[i], c.Market)
				if checked[i] != "" {
					fmt.Fprintf(stdout, "%s: %s\n", files[i], checked[i])
				}
			}
			return nil
		}
	},
}
