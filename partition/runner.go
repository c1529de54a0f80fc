// Package partition is the partitioned source of a market (config source:
// jetstream): the scale-out and failover deployment of edgeproc
// (docs/scale-out.md). It is one of the two peers that run in the market
// shell (package market), beside package mqttsource; its Runner is a
// market.Source.
//
// Positions reach the stream one of two ways (jetstream.ingest): by
// default (mqtt) one instance at a time, holding the relay lease, relays
// the market's MQTT broker into the stream, acking a phone only once the
// stream holds its position; with
// gateway, nats-server's MQTT gateway stores them. Either way a subject
// mapping puts each courier in one of N partition subjects.
// Every running instance of the market attaches, per partition, to one
// durable pull consumer with the pinned_client priority policy: the server
// delivers a partition to one instance only (the owner, identified by the
// pin id on its messages) and hands it to another once the owner has sent
// no pull request for the pin TTL. There is no membership protocol of our
// own and no local write-ahead log: the stream is the log.
//
// A partition is a market of its own for event time: its own engine, its
// own watermark and idle rule, fed in stream order with arrival = the
// message's stream timestamp. Its results are therefore a function of the
// partition's stream alone, whoever owns it and however often it moved,
// and a takeover that re-emits publishes identical results under the same
// keys, which the results stream's duplicate window drops.
//
// Checkpoints live in JetStream: per partition, an engine snapshot in an
// object store and, in a key-value bucket, a record of the stream sequence
// it reflects, the owner and an epoch. A checkpoint is recorded only once
// every result before it is acked, and only by compare-and-set on the
// revision its writer last wrote: a new owner first claims the record
// (epoch+1), so a former owner that wakes up can no longer record anything.
// A former owner is also kept from publishing by a lease: it publishes only
// within the pin TTL (less a margin) of its last pull request the server
// accepted under its pin.
package partition

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/ratelog"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/mqtt"
	"github.com/km0/edgeproc/output"
)

const (
	// group is the priority group every instance pulls in.
	group = "owner"
	// opTimeout bounds one checkpoint or claim operation.
	opTimeout = 30 * time.Second
)

// Deps are a Runner's collaborators.
type Deps struct {
	// Log receives the runner's logs. Default: discarded.
	Log *slog.Logger
	// Conn is the NATS connection to cfg.NATS.URL (required; the runner
	// does not close it).
	Conn *nats.Conn
	// MQTTURL is the broker when mqtt.url is "embedded" (jetstream.ingest:
	// mqtt).
	MQTTURL string
	// Shards is the engine shard count per partition. Default
	// max(1, NumCPU / partitions).
	Shards int
	// Hold, when set, is called by a partition's goroutines where a real
	// process may be stopped at any moment: before each pull request and
	// before each batch of results is published; and, with partition
	// RelayAcks, by the relay before it acks a stored position to the
	// broker. Tests block in it to pause an owner past its pin TTL, or a
	// relay between its stores and its acks.
	Hold func(partition int)
}

// env is what a partition needs of its instance, and all it reaches:
// the partitions get it, not the Runner.
type env struct {
	cfg  config.Config
	log  *slog.Logger
	inst string
	// hold is Deps.Hold (nil: none); heard says whether positions can
	// reach the stream now; closed whether the NATS connection is closed
	// for good.
	hold   func(partition int)
	heard  func() bool
	closed func() bool
	shares shares // owned partitions against this instance's share

	// Set once the runner is attached and set up: the JetStream API, the
	// checkpoint store, the market shell and its output.
	js    jetstream.JetStream
	store *store
	mkt   *market.Market
	out   *output.Sink
}

// Runner is one instance of one market on the partitioned stream.
type Runner struct {
	env
	deps  Deps
	start time.Time

	nc *nats.Conn
	br *bridge.Bridge // the market's results bridge, set when Run starts

	// mismatch says why the server's mapping disagrees with
	// jetstream.partitions; nil or "" while it agrees (watchMapping).
	mismatch atomic.Pointer[string]

	parts []*part
	// members holds the instances' heartbeats (balance.go).
	members jetstream.KeyValue
	// lease runs the market's relay from its broker on this instance
	// while it holds the relay lease (jetstream.ingest: mqtt); nil with
	// the gateway.
	lease *relayLease
	// zones is the current reader's merger of the partitions' dead-zone
	// parts (zones.go), for metrics; readersLog limits the warnings of
	// the readers of the results stream (zones.go, board.go).
	zones           atomic.Pointer[zoneMerger]
	zonesIncomplete atomic.Int64 // windows published without every part
	zonesPublished  atomic.Int64 // dead_zone records handed to the bridge
	readersLog      ratelog.Limiter
	ready           chan struct{} // closed once set-up is done
}

// New checks cfg (source jetstream) and returns a Runner; Run starts it.
func New(cfg config.Config, deps Deps) (*Runner, error) {
	if cfg.Source != "jetstream" {
		return nil, fmt.Errorf("partition: market %s: source is %q, not jetstream", cfg.Market, cfg.Source)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("partition: market %s: %w", cfg.Market, err)
	}
	if deps.Conn == nil {
		return nil, fmt.Errorf("partition: market %s: no NATS connection", cfg.Market)
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Shards <= 0 {
		deps.Shards = max(1, runtime.NumCPU()/cfg.JetStream.Partitions)
	}
	inst := cfg.JetStream.Instance
	if inst == "" {
		host, _ := os.Hostname()
		inst = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	r := &Runner{
		env: env{
			cfg: cfg, inst: inst, hold: deps.Hold,
			log:    deps.Log.With("market", cfg.Market, "instance", inst),
			shares: shares{parts: int64(cfg.JetStream.Partitions), maxOwned: int64(cfg.JetStream.MaxOwned)},
		},
		deps: deps, start: time.Now(), ready: make(chan struct{}), readersLog: ratelog.Limiter{Every: time.Minute},
	}
	r.heard = func() bool { return r.lease == nil || r.lease.ready() == "" }
	r.closed = func() bool { return r.nc.IsClosed() }
	if cfg.JetStream.Ingest == "mqtt" {
		if cfg.MQTT.URL == "embedded" {
			r.cfg.MQTT.URL = deps.MQTTURL
		}
		r.lease = newRelayLease(r)
	}
	for n := range cfg.JetStream.Partitions {
		ecfg := EngineConfig(cfg, n)
		ecfg.Shards = deps.Shards
		r.parts = append(r.parts, newPart(&r.env, n, ecfg))
	}
	return r, nil
}

// Instance is the name this runner records as a partition's owner.
func (r *Runner) Instance() string { return r.inst }

// Run sets up the stream, consumers and stores (retrying while NATS is
// unreachable), runs every partition until ctx ends, then shuts down: the
// owned partitions stop pulling, take a final checkpoint once their results
// are acked (within the market's drain), and release their pins so that a
// successor takes over at once. m is the market shell: its sink is open.
// An error that no retry can fix ends it at once.
func (r *Runner) Run(ctx context.Context, m *market.Market) error {
	r.attach(m)
	if ok, _ := market.Retry(ctx, r.log, "set up the positions stream", r.setup, nil); !ok {
		return nil // ctx ended first
	}
	close(r.ready)
	m.Running()
	var parts market.Stopper
	if r.lease != nil { // started first, stopped last: the partitions drain first
		// The relay starts once the lease is this instance's: what no
		// retry can fix is said now.
		if err := mqtt.Check(relayConfig(r.cfg)); err != nil {
			return fmt.Errorf("mqtt ingest: %w", err)
		}
		lctx, stopLease := context.WithCancel(ctx)
		parts.Go(func() { r.lease.run(lctx, m.DrainContext) }, stopLease)
	}
	for _, p := range r.parts {
		pctx, stop := context.WithCancel(ctx)
		parts.Go(func() { p.run(pctx) }, stop)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	parts.Go(func() { r.watchMapping(wctx) }, stopWatch)
	bctx, stopBalance := context.WithCancel(ctx)
	parts.Go(func() { r.balance(bctx) }, stopBalance)
	zctx, stopZones := context.WithCancel(ctx)
	parts.Go(func() { r.combineZones(zctx) }, stopZones)
	if f := m.Sink().Board(); f != nil {
		fctx, stopBoard := context.WithCancel(ctx)
		parts.Go(func() { r.feedBoard(fctx, f) }, stopBoard)
	}
	r.log.Info("partitions running", "stream", r.cfg.JetStream.Stream, "partitions", len(r.parts))
	<-ctx.Done()
	parts.Stop()
	return nil
}

// attach makes m the runner's market: its results go to m's sink.
func (r *Runner) attach(m *market.Market) {
	r.mkt, r.nc = m, r.deps.Conn
	r.br, r.out = m.Sink().Bridge(), m.Sink().Output()
}

// setup creates what is missing: the positions stream (if absent), one
// durable consumer per partition, the checkpoint bucket and object store,
// and the results bridge.
func (r *Runner) setup(ctx context.Context) error {
	js, err := jetstream.New(r.nc)
	if err != nil {
		return fmt.Errorf("partition: jetstream: %w", err)
	}
	r.js = js
	jc := r.cfg.JetStream
	stream, err := js.Stream(ctx, jc.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        jc.Stream,
			Description: "courier positions of market " + r.cfg.Market + ", by partition",
			Subjects:    []string{strings.Replace(jc.Subject, config.PartitionToken, "*", 1)},
			Storage:     jetstream.FileStorage,
			Replicas:    jc.Replicas,
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			// The relay's copies of a position (every instance stores
			// each) are one within it.
			Duplicates: r.cfg.NATS.DuplicateWindow,
			MaxAge:     jc.MaxAge,
			MaxBytes:   cmp.Or(jc.MaxBytes, -1),
			MaxMsgs:    -1,
		})
	} else if err == nil {
		r.checkPositionStream(stream.CachedInfo().Config)
	}
	if err != nil {
		return fmt.Errorf("partition: positions stream %s: %w", jc.Stream, err)
	}
	for _, p := range r.parts {
		c, err := stream.CreateOrUpdateConsumer(ctx, p.consumerConfig())
		if err != nil {
			return fmt.Errorf("partition: consumer %s: %w", p.consumerName, err)
		}
		p.cons = c
	}
	st := &store{inst: r.inst, log: r.log}
	if st.kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      checkpointBucket(r.cfg.Market),
		Description: "edgeproc partition checkpoints of market " + r.cfg.Market,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    jc.Replicas,
	}); err != nil {
		return fmt.Errorf("partition: checkpoint bucket: %w", err)
	}
	if r.members, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      membersBucket(r.cfg.Market),
		Description: "edgeproc instances of market " + r.cfg.Market + ", for balance",
		History:     1,
		TTL:         jc.PinTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    jc.Replicas,
	}); err != nil {
		return fmt.Errorf("partition: members bucket: %w", err)
	}
	if st.obs, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      snapshotBucket(r.cfg.Market),
		Description: "edgeproc partition snapshots of market " + r.cfg.Market,
		Storage:     jetstream.FileStorage,
		Replicas:    jc.Replicas,
	}); err != nil {
		return fmt.Errorf("partition: snapshot store: %w", err)
	}
	r.store = st
	return nil
}

// checkPositionStream warns when a positions stream created beforehand
// may drop what a successor needs: its age bound is shorter than the one
// configuration would give it, or it is a work-queue or interest stream,
// whose messages go once acked and so are not there for a replay.
func (r *Runner) checkPositionStream(sc jetstream.StreamConfig) {
	if sc.Retention != jetstream.LimitsPolicy {
		r.log.Warn("positions stream does not keep acknowledged messages: a new owner cannot replay it from a checkpoint",
			"stream", sc.Name, "retention", sc.Retention.String())
	}
	if want := r.cfg.JetStream.MaxAge; sc.MaxAge > 0 && (want == 0 || sc.MaxAge < want) {
		r.log.Warn("positions stream keeps messages for less than jetstream.max_age", "stream", sc.Name, "max_age", sc.MaxAge, "jetstream.max_age", want)
	}
}

func checkpointBucket(market string) string { return "edgeproc_ckpt_" + market }
func snapshotBucket(market string) string   { return "edgeproc_snap_" + market }
