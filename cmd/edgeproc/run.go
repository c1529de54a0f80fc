package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/service"
)

// configFiles collects a repeated --config flag.
type configFiles []string

func (c *configFiles) String() string     { return strings.Join(*c, ",") }
func (c *configFiles) Set(v string) error { *c = append(*c, v); return nil }

var runCommand = &command{
	name:    "run",
	args:    "--config FILE [--config FILE...] [--log-level LEVEL] [--log-format text|json]",
	summary: "run the live service, one market per configuration file",
	help: `Runs the live service: for each market, one persistent MQTT v5 session,
a write-ahead log, the engine, and results to the market's JetStream stream
and courier key-value bucket (docs/reference.md). Every file is checked,
and the markets against each other, before anything starts. /metrics,
/healthz and /readyz listen on http.listen. SIGINT or SIGTERM stop intake,
drain the engine, wait for JetStream's acks and exit 0.`,
	example: "edgeproc run --config /etc/edgeproc/girona.yaml --config /etc/edgeproc/valencia.yaml --log-format json",
	setup: func(fs *flag.FlagSet) runFunc {
		var files configFiles
		fs.Var(&files, "config", "market configuration `FILE`; repeat for several markets (required)")
		level := fs.String("log-level", "", "lowest level logged: debug, info, warn or error (default: the files' log.level, else info)")
		format := fs.String("log-format", "text", "log format on stderr: text (logfmt) or json (one object a line, for collectors)")
		return func(ctx context.Context, args []string, _, stderr io.Writer) error {
			if len(files) == 0 || len(args) > 0 {
				return usageError{"run takes --config FILE [--config FILE...]"}
			}
			cfgs, warnings, err := loadConfigs(files)
			if err == nil {
				err = checkLakeDirs(files, cfgs)
			}
			if err != nil {
				return err
			}
			if *level == "" {
				*level = config.LogLevel(cfgs)
			}
			log, err := newLogger(stderr, *level, *format)
			if err != nil {
				return err
			}
			for _, w := range warnings {
				log.Warn(w)
			}
			return service.Run(ctx, cfgs, service.Deps{Log: log})
		}
	},
}

// checkLakeDirs refuses a lake.dir that cannot be written (run and
// check-config), naming the file, the path and the reason.
func checkLakeDirs(files []string, cfgs []config.Config) error {
	var errs []error
	for i, c := range cfgs {
		if err := lake.CheckDir(c.Lake.Dir); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", files[i], err))
		}
	}
	return errors.Join(errs...)
}

// loadConfigs loads every file and checks them against each other
// (config.CheckClashes), reporting every problem of every file at once; it
// also returns config.Warnings. `run` and `check-config` share it, so that
// check-config passes exactly what run accepts.
func loadConfigs(files []string) ([]config.Config, []string, error) {
	var cfgs []config.Config
	var errs []error
	for _, p := range files {
		c, err := config.LoadLive(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cfgs = append(cfgs, c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	if err := config.CheckClashes(cfgs); err != nil {
		return nil, nil, err
	}
	if err := service.CheckWebConfig(cfgs); err != nil {
		return nil, nil, err
	}
	return cfgs, config.Warnings(cfgs), nil
}

// newLogger returns a slog logger writing to w at level ("debug", "info",
// "warn", "error") in format ("text" or "json").
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if !slices.Contains(config.LogLevels, level) {
		return nil, usageError{fmt.Sprintf("log level %q: must be one of %s", level, strings.Join(config.LogLevels, ", "))}
	}
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Sprintf("log level %q: %v", level, err)}
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Sprintf("log format %q: must be text or json", format)}
}

// verboseLogger is the logger of the interactive commands (sim, demo):
// warnings only, info with -v.
func verboseLogger(w io.Writer, verbose bool) *slog.Logger {
	level := "warn"
	if verbose {
		level = "info"
	}
	log, _ := newLogger(w, level, "text") // both valid
	return log
}
