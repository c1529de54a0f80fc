package partition

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/internal/oracle"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/result"
)

// mapping is the server-side subject mapping of the deployment in
// docs/scale-out.md, for partitions partitions.
func mapping(partitions int) map[string]string {
	return map[string]string{
		"km0.*.positions.*": fmt.Sprintf("part.{{wildcard(1)}}.{{partition(%d,2)}}.{{wildcard(2)}}", partitions),
	}
}

// testYAML is market girona on the partitioned stream at url, serving
// HTTP on listen; jetstream holds more lines of the jetstream section
// (indented two spaces).
func testYAML(url string, partitions int, listen, jetstream string) string {
	if !strings.Contains(jetstream, "ingest:") {
		// The tests publish as the gateway does: into the partitions.
		jetstream += "  ingest: gateway\n"
	}
	return fmt.Sprintf(`market: girona
source: jetstream
jetstream:
  partitions: %d
  pin_ttl: 2s
  replicas: %d
%snats:
  url: %q
state:
  checkpoint_interval: 500ms
http:
  listen: %s
windows:
  idle_timeout: 0s
log:
  level: debug # the processes' trail of checkpoints and results, shown when a test fails
`, partitions, strings.Count(url, ",")+1, jetstream, url, listen)
}

// testConfig is testYAML's market, parsed.
func testConfig(t testing.TB, url string, partitions int) config.Config {
	t.Helper()
	c, err := config.Parse(strings.NewReader(testYAML(url, partitions, "127.0.0.1:0", "")), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// onePartitionFleet is a fleet published straight on partition 0's
// subjects (no mapping), for a market of one partition.
func onePartitionFleet(couriers int, span time.Duration, seed int64) []testenv.Message {
	msgs := testenv.FleetMessages("girona", couriers, span, seed, time.Now())
	for i := range msgs {
		msgs[i].Topic = strings.Replace(msgs[i].Topic, "km0/girona/positions/", "part/girona/0/", 1)
	}
	return msgs
}

// testWriter sends logs to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// setUpRunner is a Runner of testConfig's market on a NATS server of its
// own (ns), set up (streams, consumers, stores, bridge) but not running,
// for tests that drive its partitions by hand; ctx ends with the test.
func setUpRunner(t *testing.T, partitions int) (r *Runner, ns *testenv.NATS, ctx context.Context) {
	t.Helper()
	ns = testenv.StartNATS(t)
	r, err := New(testConfig(t, ns.URL(), partitions), Deps{Conn: ns.Connect(t), Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	m := market.New(r.cfg, r, market.Deps{Conn: r.deps.Conn})
	if ok, err := m.Open(ctx); !ok {
		t.Fatalf("open the results stream: %v", err)
	}
	r.attach(m)
	if err := r.setup(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.br.Close(ctx) })
	return r, ns, ctx
}

// instance is one running Runner with its own connection, which Kill
// closes as a kill -9 would.
type instance struct {
	t      testing.TB
	r      *Runner
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

func startInstance(t testing.TB, cfg config.Config, nc *nats.Conn, name string, hold func(int)) *instance {
	t.Helper()
	cfg.JetStream.Instance = name
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, err := New(cfg, Deps{Conn: nc, Shards: 1, Hold: hold, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{t: t, r: r, nc: nc, cancel: cancel, done: make(chan error, 1)}
	m := market.New(cfg, r, market.Deps{Conn: nc, Log: log})
	go func() { in.done <- m.Run(ctx) }()
	t.Cleanup(in.Stop)
	return in
}

// Kill cuts the instance off NATS at once, then stops its goroutines.
func (in *instance) Kill() {
	in.nc.Close()
	in.Stop()
}

// Stop is a graceful shutdown; stopping twice is harmless. One that takes
// longer than the shutdown's own bounds fails the test with where it is
// stuck.
func (in *instance) Stop() {
	in.cancel()
	if in.done == nil {
		return
	}
	select {
	case <-in.done:
	case <-time.After(time.Minute):
		in.t.Errorf("instance %s still stopping after a minute; goroutines in edgeproc code:\n%s", in.r.Instance(), testenv.Blocked())
	}
	in.done = nil
}

// publishFleet publishes msgs (MQTT topics km0/MARKET/positions/COURIER)
// on the matching NATS subjects, as the MQTT gateway does, so that the
// server's mapping puts them in partitions, and returns once every one is
// stored. A publish that fails (a node died) is sent again under the same
// message id, which the positions stream deduplicates. after, when set, is
// called after each batch with the number published so far.
func publishFleet(t testing.TB, nc *nats.Conn, msgs []testenv.Message, perSecond int, after func(done int)) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const batch = 250
	start := time.Now()
	for i := 0; i < len(msgs); i += batch {
		part := msgs[i:min(i+batch, len(msgs))]
		for _, m := range part {
			if _, err := js.PublishMsgAsync(fleetMsg(m, i)); err != nil {
				t.Fatalf("publish: %v", err)
			}
		}
		waitAcks(t, js, part, i)
		if after != nil {
			after(i + len(part))
		}
		if wait := time.Duration(i+len(part))*time.Second/time.Duration(perSecond) - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
	}
}

func fleetMsg(m testenv.Message, _ int) *nats.Msg {
	// The gateway's mapping: levels joined by '.', a '.' inside one "//".
	var b strings.Builder
	for _, c := range m.Topic {
		switch c {
		case '/':
			b.WriteByte('.')
		case '.':
			b.WriteString("//")
		default:
			b.WriteRune(c)
		}
	}
	subj := b.String()
	return &nats.Msg{Subject: subj, Data: m.Payload, Header: nats.Header{jetstream.MsgIDHeader: []string{msgID(m)}}}
}

func msgID(m testenv.Message) string { return m.Topic + "|" + string(m.Payload) }

// waitAcks waits for the async publishes of part and sends each failed one
// again synchronously until it is stored.
func waitAcks(t testing.TB, js jetstream.JetStream, part []testenv.Message, at int) {
	t.Helper()
	select {
	case <-js.PublishAsyncComplete():
		return
	case <-time.After(5 * time.Second):
	}
	// Some acks are lost with a node: resend the batch, deduplicated by id,
	// within a minute for all of it.
	deadline := time.Now().Add(time.Minute)
	for _, m := range part {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := js.PublishMsg(ctx, fleetMsg(m, at))
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish %s: still failing a minute after the batch: %v", m.Topic, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// lastSeqs returns the stream sequence of each partition's last message.
func lastSeqs(t testing.TB, nc *nats.Conn, cfg config.Config) []uint64 {
	t.Helper()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, cfg.JetStream.Stream)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]uint64, cfg.JetStream.Partitions)
	for n := range out {
		m, err := s.GetLastMsgForSubject(ctx, cfg.JetStream.PartitionSubject(n))
		if err == nil {
			out[n] = m.Sequence
		}
	}
	return out
}

// reference runs one engine per partition over the partition's stream in
// stream order, arrival = stream timestamp, ticks as ticks, and stops it
// without ending the input (a live partition never ends), returning every
// result by key.
func reference(t testing.TB, url string, cfg config.Config) map[string]string {
	t.Helper()
	want, _ := replay(t, url, cfg)
	return want
}

// replay is reference, with each partition's engine counters and gauges
// (received, results by type, couriers, watermark...) once it has applied
// the whole partition, indexed by partition.
func replay(t testing.TB, url string, cfg config.Config) (map[string]string, []engine.Stats) {
	t.Helper()
	// The first record of a key is the one the stream keeps: a late
	// position sent twice (the fleet mixes in QoS 1 redeliveries) gives
	// two late records with one key and different emitted_at, and the
	// stream drops the second as a duplicate.
	x := oracle.NewResults(nil, false)
	stats := make([]engine.Stats, cfg.JetStream.Partitions)
	zones := newZoneMerger(cfg.Market, cfg.DeadZones.Window.Milliseconds(), cfg.JetStream.Partitions, cfg.DeadZones.MaxCells)
	for n := range cfg.JetStream.Partitions {
		ecfg := EngineConfig(cfg, n)
		ecfg.Shards = 1
		e := engine.New(ecfg, zonesApart(x.Sink, zones))
		applyStored(t, url, cfg, n, e)
		e.Stop()
		stats[n] = e.Stats()
	}
	return x.ByKey(t), stats
}

// zonesApart is an engine sink that hands the partition's dead-zone
// parts to zones (partitions one after the other: the dead zones do not
// depend on the order they are read in) and the market's dead zones they
// complete, with every other result, to sink. So a replay of every
// partition gives the results a live run publishes.
func zonesApart(sink func([]result.Record), zones *zoneMerger) func([]result.Record) {
	return func(rs []result.Record) {
		for i := range rs {
			if rs[i].Type == result.ZonePart {
				sink(zones.add(&rs[i]))
				continue
			}
			sink(rs[i : i+1])
		}
	}
}

// applyStored hands partition n's stream, as stored, to e the way its
// owner applies it (eachEntry): its replay.
func applyStored(t testing.TB, url string, cfg config.Config, n int, e *engine.Engine) {
	t.Helper()
	var topic []byte
	for _, m := range testenv.ReadStored(t, url, cfg.JetStream.Stream, cfg.JetStream.PartitionSubject(n)) {
		err := eachEntry(m.Subject, m.Header, m.Data, m.Seq, m.Time.UnixMilli(), &topic, func(line uint64, en entry.Entry) { e.Apply(line, en) })
		if err != nil {
			t.Fatalf("stream message %d: %v", m.Seq, err)
		}
	}
}

// published returns the results stream by key, failing on a key stored
// twice.
func published(t testing.TB, url string, cfg config.Config) map[string]string {
	t.Helper()
	got := map[string]string{}
	parts := market.BridgeConfig(cfg).Subject(bridge.KindZonePart)
	for _, m := range testenv.ReadStream(t, url, cfg.NATS.Stream) {
		if m.Subject == parts {
			continue // the dead zones they make are results
		}
		k := m.Header.Get(jetstream.MsgIDHeader)
		if _, dup := got[k]; dup {
			t.Errorf("key %s stored twice", k)
		}
		got[k] = string(m.Data)
	}
	return got
}

// caughtUp reports whether every partition is owned by exactly one of the
// instances whose statuses are given and its owner applied the
// partition's last message.
func caughtUp(last []uint64, statuses ...[]Status) bool {
	for n, seq := range last {
		owners := 0
		for _, st := range statuses {
			if s := st[n]; s.Owned {
				owners++
				if s.Processed < seq {
					return false
				}
			}
		}
		if owners != 1 {
			return false
		}
	}
	return true
}

// settled is caughtUp with every partition's checkpoint at or past last
// too: every result of it acknowledged by the results stream. Until then
// a term can still be fenced (a publish that outlived its lease) and its
// results dropped for the successor to re-derive, so a test that stops
// the instances once they are only caught up may find results missing.
func settled(last []uint64, statuses ...[]Status) bool {
	if !caughtUp(last, statuses...) {
		return false
	}
	for n, seq := range last {
		for _, st := range statuses {
			if s := st[n]; s.Owned && s.Checkpoint < seq {
				return false
			}
		}
	}
	return true
}

// statuses are the in-process instances' statuses, for caughtUp.
func statuses(ins ...*instance) [][]Status {
	out := make([][]Status, len(ins))
	for i, in := range ins {
		out[i] = in.r.Status()
	}
	return out
}

// equalsReplay checks that the results stream holds, once per key, exactly
// what reference computes from the partitions' streams, and returns the
// number of results; none fails the test, which would check nothing.
func equalsReplay(t testing.TB, url string, cfg config.Config) int {
	t.Helper()
	return equalsReplayOf(t, url, cfg, reference(t, url, cfg))
}

// equalsReplayOf is equalsReplay with the replay's results (reference)
// already computed from the complete positions stream.
func equalsReplayOf(t testing.TB, url string, cfg config.Config, want map[string]string) int {
	t.Helper()
	got := published(t, url, cfg)
	if diffs := testenv.DiffResults(got, want, "the per-partition replay"); len(diffs) > 0 {
		t.Errorf("%d differences, first ones:", len(diffs))
		for _, d := range diffs[:min(len(diffs), 10)] {
			t.Error(d)
		}
	}
	if len(want) == 0 {
		t.Fatal("no results: the test checks nothing")
	}
	return len(want)
}

// jetstreamKV binds the checkpoint bucket of cfg's market.
func jetstreamKV(t testing.TB, nc *nats.Conn, cfg config.Config) jetstream.KeyValue {
	t.Helper()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), checkpointBucket(cfg.Market))
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// storedPosition is a position as the positions stream holds it, alone
// (the gateway) or in one of the relay's batches.
type storedPosition struct {
	subject string // the position's own subject, as the gateway gives it
	payload []byte
	seq     uint64 // the message's
}

// storedPositions reads the positions of stream (a filter subject may
// narrow it), batches expanded, in stream order.
func storedPositions(t testing.TB, url, stream string, filter ...string) []storedPosition {
	t.Helper()
	var out []storedPosition
	for _, m := range testenv.ReadStored(t, url, stream, filter...) {
		switch kindOf(m.Subject, m.Header) {
		case msgPosition:
			out = append(out, storedPosition{subject: m.Subject, payload: m.Data, seq: m.Seq})
		case msgBatch:
			base := strings.TrimSuffix(m.Subject, BatchToken)
			err := eachBatchEntry(m.Data, func(_ int, token, payload []byte) {
				out = append(out, storedPosition{subject: base + string(token), payload: payload, seq: m.Seq})
			})
			if err != nil {
				t.Fatalf("stream message %d: %v", m.Seq, err)
			}
		}
	}
	return out
}

// phones publishes to the MQTT broker at addr as n phones would, an MQTT
// client each: each position kept until the broker acks it, sent again
// on a new connection if that fails.
type phones struct {
	queues []chan string
	sent   sync.WaitGroup
	mu     sync.Mutex
	acked  map[string]int // payload → times the broker acked it
}

// startPhones starts n phones c0 … c(n-1), each taking up to perPhone
// positions without blocking.
func startPhones(addr string, n, perPhone int) *phones {
	ph := &phones{queues: make([]chan string, n), acked: map[string]int{}}
	for c := range ph.queues {
		ph.queues[c] = make(chan string, perPhone)
		topic := fmt.Sprintf("km0/girona/positions/c%d", c)
		ph.sent.Go(func() {
			var pub *testenv.Publisher
			defer func() {
				if pub != nil {
					pub.Close()
				}
			}()
			for p := range ph.queues[c] {
				for {
					if pub == nil {
						var err error
						if pub, err = testenv.DialPublisher(addr, fmt.Sprintf("phone-%d", c)); err != nil {
							time.Sleep(100 * time.Millisecond)
							continue
						}
					}
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					err := pub.Publish(ctx, topic, []byte(p))
					cancel()
					if err == nil {
						break
					}
					pub.Close()
					pub = nil
				}
				ph.mu.Lock()
				ph.acked[p]++
				ph.mu.Unlock()
			}
		})
	}
	return ph
}

// send queues a position of courier cN (topic km0/girona/positions/cN):
// testenv.LiveFleet's send.
func (ph *phones) send(topic string, payload []byte) {
	var c int
	_, _ = fmt.Sscanf(topic, "km0/girona/positions/c%d", &c)
	ph.queues[c] <- string(payload)
}

// stop waits for every queued position to be acked and returns how many
// times each was.
func (ph *phones) stop() map[string]int {
	for _, q := range ph.queues {
		close(q)
	}
	ph.sent.Wait()
	return ph.acked
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// storedOnce waits (2 minutes at most) for every position the broker
// acked to be in the positions stream, then checks each is stored as many
// times as it was acked: once, unless a phone sent it twice. It returns
// the stream's positions and how many times each payload is there.
func storedOnce(t testing.TB, url, stream string, acked map[string]int) ([]storedPosition, map[string]int) {
	t.Helper()
	var stored []storedPosition
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		stored = storedPositions(t, url, stream)
		seen := map[string]bool{}
		for _, p := range stored {
			seen[string(p.payload)] = true
		}
		missing := 0
		for p := range acked {
			if !seen[p] {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d positions the broker acked not in the positions stream 2 minutes after the fleet ended", missing, sumCounts(acked))
		}
	}
	times := map[string]int{}
	for _, p := range stored {
		times[string(p.payload)]++
	}
	for p, n := range times {
		if n != acked[p] {
			t.Errorf("stored %d times, acked %d: %s", n, acked[p], p)
		}
	}
	return stored, times
}

// storedAsSent waits (2 minutes at most) until every payload of sent (a
// broker's positions in the order they were published to it, a resend
// listed again) is in the positions stream, then checks the stream
// against it: nothing stored that was not sent, nothing stored more often
// than sent, and each courier's positions first stored in the order they
// were first sent (the broker's order, which the relay keeps). It
// returns the stream's positions.
func storedAsSent(t testing.TB, url, stream string, sent []string) []storedPosition {
	t.Helper()
	times, firstAt := map[string]int{}, map[string]int{}
	for i, p := range sent {
		if times[p]++; times[p] == 1 {
			firstAt[p] = i
		}
	}
	var stored []storedPosition
	testenv.WaitFor(t, 2*time.Minute, "every sent position in the positions stream", func() bool {
		stored = storedPositions(t, url, stream)
		seen := map[string]bool{}
		for _, m := range stored {
			seen[string(m.payload)] = true
		}
		return len(seen) == len(times)
	})
	got := map[string]int{}
	at := map[string][]uint64{} // the stream sequences of each payload's copies
	lastOf := map[string]int{}  // each subject's (courier's) last first-sent index stored so far
	outOfOrder := 0
	for _, m := range stored {
		p := string(m.payload)
		at[p] = append(at[p], m.seq)
		if got[p]++; got[p] > 1 {
			continue
		}
		if i, ok := firstAt[p]; !ok {
			t.Errorf("stored but never sent: %s", p)
		} else if i < lastOf[m.subject] {
			outOfOrder++
		} else {
			lastOf[m.subject] = i
		}
	}
	for p, n := range got {
		if n > times[p] {
			t.Errorf("stored %d times (stream sequences %v), sent %d: %s", n, at[p], times[p], p)
		}
	}
	if outOfOrder > 0 {
		t.Errorf("%d positions stored after a later one of their courier", outOfOrder)
	}
	return stored
}
