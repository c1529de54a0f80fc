package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/replay"
)

// progressMin is the input size from which a terminal gets a progress bar.
const progressMin = 32 << 20

func runReplay(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "market configuration `FILE` (required)")
	inPath := fs.String("in", "-", "input JSONL `FILE`, - for stdin")
	outPath := fs.String("out", "-", "output JSONL `FILE`, - for stdout")
	shards := fs.Int("shards", 0, "shard goroutines (default: number of CPUs); results do not depend on it")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if *cfgPath == "" || fs.NArg() > 0 {
		return usageError{"replay takes --config FILE [--in FILE|-] [--out FILE|-]"}
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	ecfg := engine.ConfigFrom(cfg)
	ecfg.Shards = *shards

	var in io.Reader = os.Stdin
	if *inPath != "-" {
		f, err := os.Open(*inPath)
		if err != nil {
			return fmt.Errorf("open input: %w", err)
		}
		defer f.Close()
		in = f
		if st, err := f.Stat(); err == nil && st.Size() >= progressMin && isTerminal(stderr) {
			bar := progressbar.DefaultBytes(st.Size(), "replay")
			in = io.TeeReader(f, bar)
			defer bar.Finish()
		}
	}
	var out io.Writer = stdout
	var outFile *os.File
	if *outPath != "-" {
		outFile, err = os.Create(*outPath)
		if err != nil {
			return fmt.Errorf("create output: %w", err)
		}
		out = outFile
	}
	sum, err := replay.Run(ecfg, in, out)
	if outFile != nil {
		err = errors.Join(err, outFile.Close())
	}
	fmt.Fprintln(stderr, sum)
	return err
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func runCheckConfig(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) == 0 {
		return usageError{"check-config takes one or more FILEs"}
	}
	var errs []error
	for _, p := range args {
		c, err := config.LoadLive(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(stdout, "%s: ok (market %s)\n", p, c.Market)
	}
	return errors.Join(errs...)
}
