package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/partition"
	"github.com/km0/edgeproc/service"
)

// configFiles collects a repeated --config flag.
type configFiles []string

func (c *configFiles) String() string     { return strings.Join(*c, ",") }
func (c *configFiles) Set(v string) error { *c = append(*c, v); return nil }

// runService is `edgeproc run`: the live service until SIGINT or SIGTERM
// (ctx), then a graceful shutdown.
func runService(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var files configFiles
	fs.Var(&files, "config", "market configuration `FILE`; repeat for several markets (required)")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if len(files) == 0 || fs.NArg() > 0 {
		return usageError{"run takes --config FILE [--config FILE...]"}
	}
	// Every file is checked before anything starts.
	var cfgs []config.Config
	var errs []error
	for _, p := range files {
		c, err := config.Load(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cfgs = append(cfgs, c)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if slices.ContainsFunc(cfgs, func(c config.Config) bool { return c.Source == "jetstream" }) {
		if len(cfgs) != 1 {
			return usageError{"a market with source: jetstream runs alone in its process: give one --config"}
		}
		r, err := partition.New(cfgs[0], partition.Deps{Log: log})
		if err != nil {
			return err
		}
		return r.Run(ctx)
	}
	return service.Run(ctx, cfgs, service.Deps{Log: log})
}
