package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/internal/show"
	"github.com/km0/edgeproc/service"
)

// tailTypes are what tail can follow: the result types and the courier
// states of the key-value bucket.
var tailTypes = []string{bridge.KindDistance, bridge.KindNoSignal, bridge.KindSignalRestored, bridge.KindLate, bridge.KindRejected, bridge.KindDeadZone, bridge.KindLeftArea, bridge.KindEnteredArea, "courier"}

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
		return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
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
			url := resultsURL(*natsURL, fromFile)
			t := &tailer{out: stdout, json: *asJSON, max: *count, p: show.Printer{Color: isTerminal(stdout), ShowMarket: len(cfgs) > 1}}
			return t.run(ctx, url, cfgs, types, *since)
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

// resultsURL is the NATS URL results are read from: url if set, else
// cfg's nats.url (cfg nil: none) unless it is embedded, else
// defaults.NATSURL.
func resultsURL(url string, cfg *config.Config) string {
	switch {
	case url != "":
		return url
	case cfg != nil && cfg.NATS.URL != service.Embedded:
		return cfg.NATS.URL
	}
	return defaults.NATSURL
}

// connectJetStream connects to the NATS server at url as client name
// (reconnecting for as long as it runs) and returns its JetStream API.
func connectJetStream(url, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to nats %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream on %s: %w", url, err)
	}
	return nc, js, nil
}

// tailer prints what it follows, one line at a time, from several
// goroutines (one consumer and one watcher per market).
type tailer struct {
	out  io.Writer
	json bool
	p    show.Printer
	max  int

	wg sync.WaitGroup // the watchers' goroutines

	mu      sync.Mutex
	n       int
	stopped bool          // run has returned: late callbacks print nothing
	done    chan struct{} // closed when max lines are printed
	close   sync.Once
}

func (t *tailer) run(ctx context.Context, url string, cfgs []config.Config, types []string, since time.Duration) error {
	nc, js, err := connectJetStream(url, "edgeproc-tail")
	if err != nil {
		return err
	}
	defer nc.Close()
	t.done = make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var start time.Time
	if since > 0 {
		start = time.Now().Add(-since)
	}
	var stops []func()
	defer func() {
		cancel()
		for _, stop := range stops {
			stop()
		}
		t.wg.Wait()
		t.mu.Lock()
		t.stopped = true
		t.mu.Unlock()
	}()
	for _, c := range cfgs {
		bc := bridge.Config{Market: c.Market, SubjectPrefix: c.NATS.SubjectPrefix, Stream: c.NATS.Stream}.Resolved()
		var subjects []string
		for _, typ := range types {
			if typ != "courier" {
				subjects = append(subjects, bc.Subject(typ))
			}
		}
		if len(subjects) > 0 {
			stop, err := t.follow(ctx, js, bc, subjects, start)
			if err != nil {
				return err
			}
			stops = append(stops, stop)
		}
		if slices.Contains(types, "courier") {
			stop, err := t.watch(ctx, js, bc, start)
			if err != nil {
				return err
			}
			stops = append(stops, stop)
		}
	}
	select {
	case <-ctx.Done():
	case <-t.done:
	}
	return nil
}

// follow prints the market's results on subjects, from start (zero: from
// now), with an ordered consumer: ephemeral, flow-controlled, restarted by
// the library at the right sequence after a disconnection.
func (t *tailer) follow(ctx context.Context, js jetstream.JetStream, bc bridge.Config, subjects []string, start time.Time) (func(), error) {
	s, err := resultStream(ctx, js, bc)
	if err != nil {
		return nil, err
	}
	cons, err := orderedResults(ctx, s, bc, subjects, start)
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if !slices.Contains(subjects, m.Subject()) {
			return // the server-side filter was wider (see serverFilter)
		}
		if t.json {
			t.print(string(m.Data()))
			return
		}
		r, err := show.Decode(m.Data())
		if err != nil {
			t.print(fmt.Sprintf("%s: %v: %q", m.Subject(), err, m.Data()))
			return
		}
		t.print(t.p.Line(r))
	})
	if err != nil {
		return nil, fmt.Errorf("market %s: consume %s: %w", bc.Market, bc.Stream, err)
	}
	return cc.Stop, nil
}

// resultStream returns the market's results stream.
func resultStream(ctx context.Context, js jetstream.JetStream, bc bridge.Config) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, bc.Stream)
	if err != nil {
		return nil, fmt.Errorf("market %s: stream %s: %w (is edgeproc run up for this market?)", bc.Market, bc.Stream, err)
	}
	return s, nil
}

// orderedResults returns an ordered consumer of the market's stream s
// from start (zero: from now) over at least subjects (see serverFilter:
// the caller drops the other subjects).
func orderedResults(ctx context.Context, s jetstream.Stream, bc bridge.Config, subjects []string, start time.Time) (jetstream.Consumer, error) {
	occ := jetstream.OrderedConsumerConfig{FilterSubjects: serverFilter(bc, subjects), DeliverPolicy: jetstream.DeliverNewPolicy}
	if !start.IsZero() {
		occ.DeliverPolicy, occ.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	cons, err := s.OrderedConsumer(ctx, occ)
	if err != nil {
		return nil, fmt.Errorf("market %s: consumer on %s: %w", bc.Market, bc.Stream, err)
	}
	return cons, nil
}

// serverFilter is the consumer filter for subjects that every NATS server
// with JetStream accepts: one subject at most (several came with 2.10; Debian
// ships 2.9). All of a market's subjects need none, the three dashboard
// types are one wildcard, other sets are read whole and filtered here.
func serverFilter(bc bridge.Config, subjects []string) []string {
	dashboard := []string{bc.Subject(bridge.KindDistance), bc.Subject(bridge.KindNoSignal), bc.Subject(bridge.KindSignalRestored)}
	switch {
	case len(subjects) == 1:
		return subjects
	case len(subjects) == len(dashboard) && !slices.ContainsFunc(subjects, func(s string) bool { return !slices.Contains(dashboard, s) }):
		return []string{bc.SubjectPrefix + ".dashboard." + bc.Market + ".>"}
	}
	return nil
}

// watch prints the market's courier states: with a start time, first
// the current state of every courier updated since then.
func (t *tailer) watch(ctx context.Context, js jetstream.JetStream, bc bridge.Config, start time.Time) (func(), error) {
	kv, err := js.KeyValue(ctx, bc.KVBucket)
	if err != nil {
		return nil, fmt.Errorf("market %s: courier bucket %s: %w (is edgeproc run up for this market?)", bc.Market, bc.KVBucket, err)
	}
	var opts []jetstream.WatchOpt
	if start.IsZero() {
		opts = append(opts, jetstream.UpdatesOnly())
	}
	w, err := kv.WatchAll(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("market %s: watch %s: %w", bc.Market, bc.KVBucket, err)
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
				return
			case e, ok = <-w.Updates():
				if !ok {
					return
				}
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut || (!start.IsZero() && e.Created().Before(start)) {
				continue // nil: the current values are all delivered
			}
			var c bridge.CourierState
			if err := json.Unmarshal(e.Value(), &c); err != nil {
				t.print(fmt.Sprintf("%s: %s: %v", bc.KVBucket, e.Key(), err))
				continue
			}
			if t.json {
				line, _ := json.Marshal(struct {
					Type   string `json:"type"`
					Market string `json:"market"`
					bridge.CourierState
				}{"courier", bc.Market, c})
				t.print(string(line))
				continue
			}
			t.print(t.p.CourierLine(bc.Market, c))
		}
	}()
	return func() { _ = w.Stop() }, nil
}

func (t *tailer) print(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || (t.max > 0 && t.n >= t.max) {
		return
	}
	fmt.Fprintln(t.out, line)
	t.n++
	if t.max > 0 && t.n == t.max {
		t.close.Do(func() { close(t.done) })
	}
}
