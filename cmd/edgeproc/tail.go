package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/internal/natsconn"
	"github.com/km0/edgeproc/internal/resultstream"
	"github.com/km0/edgeproc/internal/show"
	"github.com/km0/edgeproc/service"
)

// tailTypes are what tail can follow: the result types and the courier
// states of the key-value bucket.
var tailTypes = []string{bridge.KindDistance, bridge.KindNoSignal, bridge.KindSignalRestored, bridge.KindLate, bridge.KindRejected, bridge.KindDeadZone, bridge.KindLeftArea, bridge.KindEnteredArea, resultstream.Courier}

// stringList collects a repeated or comma-separated flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

var tailCommand = &command{
	name:    "tail",
	args:    "(--market M... | --config FILE...) [--nats URL] [--type T...] [--since D] [--json] [--count N]",
	summary: "follow a running deployment's results and courier statuses from NATS",
	help: `Follows the results of one or more markets from their JetStream streams
(an ordered consumer: nothing is acknowledged, the stream is not changed)
and, with --type courier, their couriers' states from the key-value
bucket (one per position, at most one a second per courier), one line each:
readable on a terminal, or with --json one JSON object a line for scripts
(results exactly as published; courier states with "type":"courier" and
"market" added). --since D starts D ago (results still retained, and the
couriers' current states), else only what arrives from now on. Markets come
from --market (default names: stream EDGEPROC_MARKET, subjects under
delivery.) or from the markets' configuration files (--config). Ctrl-C stops.`,
	example: `edgeproc tail --market girona --since 10m --type no_signal,signal_restored
edgeproc tail --config examples/girona.yaml --json --type courier | jq .`,
	setup: func(fs *flag.FlagSet) runFunc {
		var markets, files, types stringList
		fs.Var(&markets, "market", "market `NAME` to follow; repeat or comma-separate for several")
		fs.Var(&files, "config", "follow the market of this configuration `FILE` (its nats.url, stream and subject prefix); repeatable")
		natsURL := fs.String("nats", "", "NATS `URL` (default: the first file's nats.url, else "+defaults.NATSURL+")")
		prefix := fs.String("subject-prefix", defaults.SubjectPrefix, "subject `PREFIX` of --market markets")
		fs.Var(&types, "type", "`TYPES` to show, comma-separated: "+strings.Join(tailTypes, ", ")+" (default: every result type; courier adds each courier state written)")
		since := fs.Duration("since", 0, "start this long ago (e.g. 10m); 0 = only what arrives from now")
		asJSON := fs.Bool("json", false, "one JSON object a line instead of text")
		count := fs.Int("count", 0, "exit after this many lines; 0 = until Ctrl-C")
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			if len(args) > 0 || (len(markets) == 0) == (len(files) == 0) {
				return usageError{"tail takes --market M... or --config FILE..., not both"}
			}
			for _, t := range types {
				if !slices.Contains(tailTypes, t) {
					return usageError{fmt.Sprintf("--type %q: must be among %s", t, strings.Join(tailTypes, ", "))}
				}
			}
			if len(types) == 0 {
				// Courier states change with every position: only on request.
				types = tailTypes[:len(tailTypes)-1]
			}
			if *since < 0 || *count < 0 {
				return usageError{"--since and --count must not be negative"}
			}
			cfgs, err := tailConfigs(markets, files, *prefix)
			if err != nil {
				return err
			}
			var fromFile *config.Config
			if len(files) > 0 {
				fromFile = &cfgs[0]
			}
			nc, js, err := connectJetStream(resultsNATS(*natsURL, fromFile), "edgeproc-tail", stderr)
			if err != nil {
				return err
			}
			defer nc.Close()
			markets := make([]bridge.Config, len(cfgs))
			for i, c := range cfgs {
				markets[i] = bridge.Config{Market: c.Market, SubjectPrefix: c.NATS.SubjectPrefix, Stream: c.NATS.Stream}.Resolved()
			}
			t := &resultstream.Tail{Out: stdout, JSON: *asJSON, Max: *count, Printer: show.Printer{Color: isTerminal(stdout), ShowMarket: len(cfgs) > 1}}
			return t.Run(ctx, js, markets, types, *since)
		}
	},
}

// tailConfigs returns the markets to follow: from their files, or named
// with every other setting at its default.
func tailConfigs(markets, files []string, prefix string) ([]config.Config, error) {
	if len(files) > 0 {
		cfgs, _, err := loadConfigs(files)
		return cfgs, err
	}
	var cfgs []config.Config
	var errs []error
	for _, m := range markets {
		src := "market: " + strconv.Quote(m) + "\nnats:\n  subject_prefix: " + strconv.Quote(prefix) + "\n"
		c, err := config.Parse(strings.NewReader(src), "--market "+m)
		if err != nil {
			errs = append(errs, usageError{err.Error()})
			continue
		}
		cfgs = append(cfgs, c)
	}
	return cfgs, errors.Join(errs...)
}

// resultsNATS is the NATS connection results are read with: cfg's nats
// section (its URL, credentials and TLS; cfg nil: the defaults), the URL
// replaced by url when set, or by defaults.NATSURL when cfg's is
// embedded.
func resultsNATS(url string, cfg *config.Config) config.NATS {
	n := config.NATS{URL: defaults.NATSURL}
	if cfg != nil && cfg.NATS.URL != service.Embedded {
		n = cfg.NATS
	}
	if url != "" {
		n.URL = url
	}
	return n
}

// connectJetStream connects with n's options as run does (credentials,
// TLS), as client name, failing at once with the cause when no server
// answers; trouble after that is logged to stderr.
func connectJetStream(n config.NATS, name string, stderr io.Writer) (*nats.Conn, jetstream.JetStream, error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := natsconn.Dial(n, name, log)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream on %s: %w", n.URL, err)
	}
	return nc, js, nil
}
