package partition

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/internal/tmath"
)

// The operator's settings of TestProcesses_Kill9AndNodeLossEqualReplay,
// each away from its default so that a key not applied shows: the
// retention of the results stream (nats.max_age, nats.max_bytes) and of
// the positions stream (jetstream.max_age, jetstream.max_bytes), and a
// courier bucket interval short enough to check the bucket in a second.
const (
	opResultsMaxAge     = 90 * time.Minute
	opResultsMaxBytes   = 96 << 20
	opPositionsMaxAge   = 3 * time.Hour
	opPositionsMaxBytes = 48 << 20
	opKVInterval        = 500 * time.Millisecond
)

// operatorYAML sets the op* values in a testYAML configuration.
func operatorYAML(y string) string {
	y = strings.Replace(y, "nats:\n", "nats:\n  max_age: 90m\n  max_bytes: 96MiB\n  kv_interval: 500ms\n", 1)
	return strings.Replace(y, "jetstream:\n", "jetstream:\n  max_age: 3h\n  max_bytes: 48MiB\n", 1)
}

// operatorConfig is testConfig with operatorYAML's settings.
func operatorConfig(t testing.TB, url string, partitions int) config.Config {
	t.Helper()
	c, err := config.Parse(strings.NewReader(operatorYAML(testYAML(url, partitions, "127.0.0.1:0", ""))), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.MaxAge != opResultsMaxAge || c.NATS.MaxBytes != opResultsMaxBytes || c.NATS.KVInterval != opKVInterval ||
		c.JetStream.MaxAge != opPositionsMaxAge || c.JetStream.MaxBytes != opPositionsMaxBytes {
		t.Fatalf("operatorYAML not applied: nats %v %d %v, jetstream %v %d", c.NATS.MaxAge, c.NATS.MaxBytes, c.NATS.KVInterval,
			c.JetStream.MaxAge, c.JetStream.MaxBytes)
	}
	return c
}

// newestPosition is a courier's valid position of greatest timestamp in
// the positions stream: what its courier bucket entry and board dot must
// show (courier.Place: the newest timestamp wins).
type newestPosition struct {
	ts        int64
	lat, lon  float64
	partition int
	stored    time.Time // when the stream stored it (its first copy)
}

// fleetPosition decodes a payload the contract accepts (§2) for the
// courier of topic (km0-style, '/' between levels): the members present
// and typed, the courier that of the topic, coordinates in range, a
// positive timestamp, at most 4 KiB. The fleet's malformed payloads each
// carry the timestamp of a valid one, so a bad one taken as valid would
// not change a courier's newest timestamp.
func fleetPosition(topic string, payload []byte) (courier string, ts int64, lat, lon float64, ok bool) {
	var v struct {
		Courier  *string  `json:"courier"`
		Lat      *float64 `json:"lat"`
		Lon      *float64 `json:"lon"`
		TS       *int64   `json:"timestamp_ms"`
		Accuracy *float64 `json:"accuracy_m"`
	}
	if len(payload) > 4096 || json.Unmarshal(payload, &v) != nil || v.Courier == nil || v.Lat == nil || v.Lon == nil || v.TS == nil {
		return "", 0, 0, 0, false
	}
	courier = topic[strings.LastIndexByte(topic, '/')+1:]
	if *v.Courier != courier || *v.TS <= 0 || *v.Lat < -90 || *v.Lat > 90 || *v.Lon < -180 || *v.Lon > 180 {
		return "", 0, 0, 0, false
	}
	return courier, *v.TS, *v.Lat, *v.Lon, true
}

// checkOperatorView checks, at the end of a run whose survivors are
// settled (every partition owned once, applied and checkpointed to its
// last message), what an operator sees of each live instance against
// what the fleet published: its /metrics against the positions and
// results streams and the per-partition replay, its board page and event
// stream, the courier bucket, and the two streams' retention. killedAt is
// when the instance that is gone was killed, publishStart when the fleet
// started publishing. It returns the replay's results by key (reference),
// for equalsReplayOf once the fleet is done.
func checkOperatorView(t *testing.T, nc *nats.Conn, url string, cfg config.Config, survivors []*proc, couriers int, publishStart, killedAt time.Time) map[string]string {
	t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Nothing the killed process sent is stored later than this (it was
	// sent before the kill; the margin covers what the server had still
	// to read).
	after := killedAt.Add(3 * time.Second)

	// What the fleet published, as the positions stream holds it.
	newest := map[string]newestPosition{}
	byPartition := make([][]string, cfg.JetStream.Partitions)
	positionsAfter := 0
	ticks := make([]uint64, cfg.JetStream.Partitions) // an instance handing a partition over for balance ticks it
	for _, m := range testenv.ReadStored(t, url, cfg.JetStream.Stream) {
		levels := strings.SplitN(m.Subject, ".", 4) // part.MARKET.N.COURIER
		if len(levels) != 4 {
			t.Fatalf("positions stream: message on %s, outside the partitions", m.Subject)
		}
		n, err := strconv.Atoi(levels[2])
		if err != nil || n >= cfg.JetStream.Partitions {
			t.Fatalf("positions stream: message on %s, outside the partitions", m.Subject)
		}
		if kindOf(m.Subject, m.Header) != msgPosition {
			ticks[n]++
			continue
		}
		if m.Time.After(after) {
			positionsAfter++
		}
		c, ts, lat, lon, ok := fleetPosition(natsToMQTT(m.Subject), m.Data)
		if !ok {
			continue
		}
		old, seen := newest[c]
		if !seen {
			byPartition[n] = append(byPartition[n], c)
		} else if old.partition != n {
			t.Errorf("courier %s in partitions %d and %d", c, old.partition, n)
		}
		if !seen || ts > old.ts {
			newest[c] = newestPosition{ts: ts, lat: lat, lon: lon, partition: n, stored: m.Time}
		}
	}
	if len(newest) != couriers {
		t.Fatalf("positions stream: valid positions of %d couriers, the fleet has %d", len(newest), couriers)
	}
	results := testenv.ReadStored(t, url, cfg.NATS.Stream)
	resultsAfter := 0
	for _, m := range results {
		if m.Time.After(after) {
			resultsAfter++
		}
	}
	want, whole := replay(t, url, cfg) // each partition's engine, applied whole
	replayed := time.Now()

	// Each survivor's partitions (/partitions/girona) and /metrics.
	type view struct {
		p        *proc
		parts    []Status
		owned    []int
		m        scrape
		from, to time.Time // the scrape began and ended
	}
	var views []view
	for _, p := range survivors {
		_, parts, err := p.status()
		if err != nil || len(parts) != cfg.JetStream.Partitions {
			t.Fatalf("instance %s: /partitions/girona: %d partitions, %v", p.name, len(parts), err)
		}
		from := time.Now()
		m := scrapeMetrics(t, p.listen)
		views = append(views, view{p: p, parts: parts, m: m, from: from, to: time.Now()})
	}
	owner := make([]*view, cfg.JetStream.Partitions)
	for i := range views {
		for _, s := range views[i].parts {
			if s.Owned {
				if owner[s.Partition] != nil {
					t.Fatalf("partition %d owned by %s and %s", s.Partition, owner[s.Partition].p.name, views[i].p.name)
				}
				owner[s.Partition] = &views[i]
				views[i].owned = append(views[i].owned, s.Partition)
			}
		}
	}
	for n, v := range owner {
		if v == nil {
			t.Fatalf("partition %d owned by no survivor", n)
		}
	}
	// onlyOwner reports whether no survivor but v ever owned partition n.
	onlyOwner := func(v *view, n int) bool {
		for i := range views {
			if &views[i] != v && views[i].parts[n].Takeovers > 0 {
				return false
			}
		}
		return true
	}

	// The checkpoint records: each names its writer and, when its snapshot
	// was written in the record's own epoch, a checkpoint that writer
	// took in its current term.
	kv := jetstreamKV(t, nc, cfg)
	ownCkpts := map[string]int{}
	for n := range cfg.JetStream.Partitions {
		e, err := kv.Get(ctx, "p"+strconv.Itoa(n))
		if err != nil {
			t.Fatalf("checkpoint record p%d: %v", n, err)
		}
		var rec record
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.Fatalf("checkpoint record p%d: %v", n, err)
		}
		if rec.Owner != owner[n].p.name {
			t.Errorf("checkpoint record p%d is %s's; /partitions says %s owns the partition", n, rec.Owner, owner[n].p.name)
		}
		if rec.Object == fmt.Sprintf("p%d-e%d-s%d", n, rec.Epoch, rec.Seq) {
			ownCkpts[rec.Owner]++
		}
	}

	// /metrics of each survivor: the market's metrics (those of the MQTT
	// source, summed over the instance's partitions) against its own
	// partitions and the replay, and added up against the streams.
	var sumReceived, sumAcked, sumStored, sumCouriers float64
	wmOf := map[string]int64{} // each survivor's market watermark, ms
	for i := range views {
		v := &views[i]
		name, m := v.p.name, v.m
		get := func(metric string, labels ...string) float64 {
			t.Helper()
			x, ok := m.get(metric, append([]string{"market", cfg.Market}, labels...)...)
			if !ok {
				t.Errorf("instance %s: /metrics has no %s%v", name, metric, labels)
			}
			return x
		}
		for _, g := range []string{"edgeproc_market_ready", "edgeproc_market_failed", "edgeproc_nats_connected", "edgeproc_stream_ready"} {
			want := 1.0
			if g == "edgeproc_market_failed" {
				want = 0
			}
			if x := get(g); x != want {
				t.Errorf("instance %s: %s %v, want %v", name, g, x, want)
			}
		}
		var applied, dropped, tickTerms uint64
		var takeovers, wholeTerms int
		owned := v.owned
		for _, s := range v.parts {
			applied += s.Applied
			dropped += s.Dropped
			takeovers += int(s.Takeovers)
			tickTerms += s.Takeovers * ticks[s.Partition]
			if x, ok := m.get("edgeproc_partition_owned", "market", cfg.Market, "instance", name, "partition", strconv.Itoa(s.Partition)); !ok || (x == 1) != s.Owned {
				t.Errorf("instance %s partition %d: edgeproc_partition_owned %v (present %v), /partitions says owned %v", name, s.Partition, x, ok, s.Owned)
			}
		}

		// Received: every message applied, in every term (a takeover's
		// replay since the checkpoint counted again, as /partitions does),
		// but the ticks: each term applied each at most once.
		received := get("edgeproc_positions_received_total")
		if received > float64(applied) || received < float64(applied-tickTerms) {
			t.Errorf("instance %s: edgeproc_positions_received_total %v; it applied %d messages in every term (/partitions/girona), at most %d of them ticks",
				name, received, applied, tickTerms)
		}
		sumReceived += received

		// The results bridge: at rest, every result it accepted acked;
		// every one it accepted or dropped was counted by an engine.
		published, acked := get("edgeproc_bridge_published_total"), get("edgeproc_bridge_acked_total")
		dups, pending := get("edgeproc_bridge_duplicates_total"), get("edgeproc_bridge_pending")
		if pending != 0 || acked != published || dups > acked {
			t.Errorf("instance %s at rest: bridge published %v, acked %v (%v duplicates), pending %v; want all acked, none pending", name, published, acked, dups, pending)
		}
		emitted, series := m.sum("edgeproc_results_total", "market", cfg.Market)
		if series == 0 || emitted < published+float64(dropped) {
			t.Errorf("instance %s: edgeproc_results_total sums to %v over %d types, below the %v results its bridge accepted and %d it dropped", name, emitted, series, published, dropped)
		}
		sumAcked += acked
		sumStored += acked - dups

		// Gauges of the partitions it owns now, each applied to its last
		// message: as the replay of those partitions.
		var wantCouriers int64
		wm := int64(tmath.Never)
		for _, n := range owned {
			wantCouriers += whole[n].Couriers
			if w := whole[n].Watermark; w != tmath.Never && (wm == tmath.Never || w < wm) {
				wm = w
			}
		}
		wmOf[name] = wm
		c := get("edgeproc_couriers")
		if c != float64(wantCouriers) {
			t.Errorf("instance %s: edgeproc_couriers %v, want %d: the couriers of partitions %v it owns", name, c, wantCouriers, owned)
		}
		sumCouriers += c
		if x, ok := m.get("edgeproc_watermark_timestamp_seconds", "market", cfg.Market); wm == tmath.Never {
			if ok {
				t.Errorf("instance %s: edgeproc_watermark_timestamp_seconds %v with no position in partitions %v", name, x, owned)
			}
		} else if !ok || x != float64(wm)/1000 {
			t.Errorf("instance %s: edgeproc_watermark_timestamp_seconds %v (present %v), want %v: the lowest of partitions %v after the replay", name, x, ok, float64(wm)/1000, owned)
		} else if lag, ok := m.get("edgeproc_watermark_lag_seconds", "market", cfg.Market); !ok ||
			lag < float64(v.from.UnixMilli()-wm-1)/1000 || lag > float64(v.to.UnixMilli()-wm+1)/1000 {
			t.Errorf("instance %s: edgeproc_watermark_lag_seconds %v (present %v); the clock minus the watermark was %v to %v during the scrape",
				name, lag, ok, v.from.Sub(time.UnixMilli(wm)), v.to.Sub(time.UnixMilli(wm)))
		}

		// Counters: at least those of the partitions it applied whole in
		// one term (the partition's first: epoch 1, from no checkpoint,
		// never lost since); exactly those when it had no other term.
		var lo engine.Stats
		for _, n := range owned {
			if s := v.parts[n]; s.Epoch == 1 && s.Takeovers == 1 {
				lo.Add(whole[n])
				wholeTerms++
			}
		}
		exact := wholeTerms == takeovers
		counter := func(metric string, want int64, labels ...string) {
			t.Helper()
			x := get(metric, labels...)
			if x < float64(want) || exact && x != float64(want) {
				t.Errorf("instance %s: %s%v %v; the replay of the %d partitions it applied whole gives %d (exact: %v)", name, metric, labels, x, wholeTerms, want, exact)
			}
		}
		counter("edgeproc_positions_received_total", lo.Received)
		counter("edgeproc_positions_accepted_total", lo.Accepted)
		counter("edgeproc_positions_duplicate_total", lo.Duplicates)
		counter("edgeproc_positions_late_total", lo.LateDistance, "operator", "distance")
		counter("edgeproc_positions_late_total", lo.LateSession, "operator", "session")
		for reason, want := range lo.Rejected {
			counter("edgeproc_positions_rejected_total", want, "reason", reason)
		}
		for typ, want := range lo.Results {
			counter("edgeproc_results_total", want, "type", typ)
		}

		// Checkpoints: at least one per partition whose record it wrote in
		// its current term.
		if x := get("edgeproc_checkpoints_total"); x < float64(ownCkpts[name]) {
			t.Errorf("instance %s: edgeproc_checkpoints_total %v; the checkpoint records hold %d it wrote", name, x, ownCkpts[name])
		} else if x > 0 {
			if age, ok := m.get("edgeproc_checkpoint_age_seconds", "market", cfg.Market); !ok || age < 0 || age > time.Since(publishStart).Seconds() {
				t.Errorf("instance %s: edgeproc_checkpoint_age_seconds %v (present %v) after %v checkpoints", name, age, ok, x)
			}
		}
		t.Logf("instance %s /metrics: owns %v, received %v, results %v, bridge published %v acked %v (%v duplicates), couriers %v, watermark %v, checkpoints %v; %d of %d terms applied a partition whole",
			name, owned, received, emitted, published, acked, dups, c, time.UnixMilli(wm).UTC().Format(time.TimeOnly), get("edgeproc_checkpoints_total"), wholeTerms, takeovers)
	}
	// Added up over the survivors: every partition owned once, every
	// courier counted once, and the streams' messages since the kill
	// (only survivors could have stored them) applied and acked by them.
	for n := range cfg.JetStream.Partitions {
		var sum float64
		for _, v := range views {
			x, _ := v.m.get("edgeproc_partition_owned", "partition", strconv.Itoa(n))
			sum += x
		}
		if sum != 1 {
			t.Errorf("partition %d: edgeproc_partition_owned sums to %v over the survivors, want 1", n, sum)
		}
	}
	if sumCouriers != float64(couriers) {
		t.Errorf("edgeproc_couriers sums to %v over the survivors; the fleet has %d couriers", sumCouriers, couriers)
	}
	if sumReceived < float64(positionsAfter) {
		t.Errorf("edgeproc_positions_received_total sums to %v over the survivors, below the %d positions stored after the kill", sumReceived, positionsAfter)
	}
	if sumAcked < float64(resultsAfter) || sumStored > float64(len(results)) {
		t.Errorf("survivors' bridges acked %v results (%v stored by them), the results stream holds %d, %d of them stored after the kill",
			sumAcked, sumStored, len(results), resultsAfter)
	}
	t.Logf("survivors: received %v (%d positions stored after the kill), acked %v results, %v of them new (the stream holds %d, %d stored after the kill)",
		sumReceived, positionsAfter, sumAcked, sumStored, len(results), resultsAfter)

	// The courier bucket: an entry per courier, never ahead of its newest
	// position, and exactly that position (newest timestamp wins) for
	// the couriers whose newest position was stored after the kill in a
	// partition no other survivor ever owned: it was applied by the
	// partition's owner, whose writer keeps the newest state of each
	// courier and writes it within 1.25 nats.kv_interval, and nobody
	// wrote the courier since but that owner.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := js.KeyValue(ctx, defaults.CourierBucket(cfg.Market))
	if err != nil {
		t.Fatalf("courier bucket: %v", err)
	}
	exactly := map[string]bool{}
	for c, w := range newest {
		if w.stored.After(after) && onlyOwner(owner[w.partition], w.partition) {
			exactly[c] = true
		}
	}
	if len(exactly) < couriers/4 {
		t.Errorf("only %d of %d couriers to check exactly in the courier bucket", len(exactly), couriers)
	}
	for deadline := time.Now().Add(5*opKVInterval + 5*time.Second); ; {
		var wrong []string
		for c, w := range newest {
			e, err := bucket.Get(ctx, bridge.CourierKey(c))
			if err != nil {
				wrong = append(wrong, fmt.Sprintf("%s: %v", c, err))
				continue
			}
			var cs bridge.CourierState
			if err := json.Unmarshal(e.Value(), &cs); err != nil || cs.Courier != c || cs.TS > w.ts ||
				exactly[c] && (cs.TS != w.ts || cs.Lat != w.lat || cs.Lon != w.lon) {
				wrong = append(wrong, fmt.Sprintf("%s: %s (%v); its newest position %d at %v,%v, stored %v, partition %d (check exactly: %v)",
					c, e.Value(), err, w.ts, w.lat, w.lon, w.stored.Format(time.StampMilli), w.partition, exactly[c]))
			}
		}
		if len(wrong) == 0 {
			t.Logf("courier bucket: an entry for each of %d couriers, %d of them at their newest position (the others not ahead of it)", couriers, len(exactly))
			break
		}
		if time.Now().After(deadline) {
			sort.Strings(wrong)
			t.Errorf("courier bucket %s: %d of %d couriers wrong (%d to check at their newest position), first ones:\n%s",
				bucket.Bucket(), len(wrong), couriers, len(exactly), strings.Join(wrong[:min(10, len(wrong))], "\n"))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, v := range views {
		// Writes since start: each courier it applied a position of after
		// the claim of its current term is one it had never seen before
		// or one that moved on since, written at least once.
		var seen int
		for _, n := range v.owned {
			for _, c := range byPartition[n] {
				if newest[c].stored.After(v.parts[n].AcquiredAt) {
					seen++
				}
			}
		}
		if x, _ := scrapeMetrics(t, v.p.listen).get("edgeproc_kv_writes_total", "market", cfg.Market); x < float64(seen) {
			t.Errorf("instance %s: edgeproc_kv_writes_total %v, below the %d couriers whose newest position it applied", v.p.name, x, seen)
		}
	}

	// The board: the pages, and the event stream's snapshot with the
	// market's watermark, the couriers of the partitions it owns at
	// their newest position (those it applied that position of: stored
	// after its current term began), and every other courier of the
	// market, which it reads from NATS.
	// An instance whose terms began after the last position of its
	// partitions (a takeover late in the run) has nothing to show; the
	// survivors together must have.
	boardChecked := 0
	for _, v := range views {
		owned := map[int]bool{}
		for _, n := range v.owned {
			owned[n] = true
		}
		boardChecked += checkBoard(t, v.p, cfg.Market, wmOf[v.p.name], func(yield func(string, newestPosition) bool) {
			for _, n := range v.owned {
				for _, c := range byPartition[n] {
					if w := newest[c]; w.stored.After(v.parts[n].AcquiredAt) && !yield(c, w) {
						return
					}
				}
			}
		}, func(yield func(string, newestPosition) bool) {
			for n, cs := range byPartition {
				for _, c := range cs {
					if !owned[n] && !yield(c, newest[c]) {
						return
					}
				}
			}
		})
	}
	if boardChecked == 0 {
		t.Errorf("no survivor applied the newest position of a courier of its partitions: the boards were not checked")
	}

	// Retention as configured, on both streams.
	for _, st := range []struct {
		name     string
		maxAge   time.Duration
		maxBytes int64
	}{{cfg.NATS.Stream, opResultsMaxAge, opResultsMaxBytes}, {cfg.JetStream.Stream, opPositionsMaxAge, opPositionsMaxBytes}} {
		s, err := js.Stream(ctx, st.name)
		if err != nil {
			t.Fatalf("stream %s: %v", st.name, err)
		}
		if sc := s.CachedInfo().Config; sc.MaxAge != st.maxAge || sc.MaxBytes != st.maxBytes {
			t.Errorf("stream %s: max_age %v, max_bytes %d; configured %v, %d", st.name, sc.MaxAge, sc.MaxBytes, st.maxAge, st.maxBytes)
		}
	}
	t.Logf("operator's view checked in %v (replay %v)", time.Since(began).Round(time.Millisecond), replayed.Sub(began).Round(time.Millisecond))
	return want
}
