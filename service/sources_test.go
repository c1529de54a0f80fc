package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/partition"
	"github.com/km0/edgeproc/service"
)

// sourceYAML is a market of the given source whose every nats and limits
// key is set to a non-default value; extra holds more top-level lines.
func sourceYAML(market, source, mqttURL, natsURL, dir, extra string) string {
	return fmt.Sprintf(`market: %s
source: %s
mqtt: {url: %q}
nats:
  url: %q
  subject_prefix: acme.dlv
  stream: RESULTS_%s
  duplicate_window: 3m
  kv_interval: 1h
  max_age: 168h
  max_bytes: 100MiB
windows: {idle_timeout: 0s}
state: {dir: %q}
http: {listen: "127.0.0.1:0"}
limits: {max_couriers: 3}
%s`, market, source, mqttURL, natsURL, strings.ToUpper(market), dir, extra)
}

// TestRun_BothSourcesHonourTheNATSAndLimitsKeys runs one market of each
// source in one process with every key of the nats and limits sections
// set to a non-default value, and checks each reaches what it configures
// on the real server: the results stream's name, subjects, retention and
// duplicate window, the courier bucket and how often a courier is
// rewritten there (nats.kv_interval), the positions stream's retention
// (jetstream.max_age, jetstream.max_bytes), and limits.max_couriers in the
// engine of each source. Both markets are served by one listener, with
// the same metrics, board and health endpoints.
func TestRun_BothSourcesHonourTheNATSAndLimitsKeys(t *testing.T) {
	mq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	var cfgs []config.Config
	for _, y := range []string{
		sourceYAML("viaduct", "mqtt", mq.URL(), ns.URL(), t.TempDir(), ""),
		sourceYAML("harbour", "jetstream", mq.URL(), ns.URL(), t.TempDir(), `jetstream:
  replicas: 1
  pin_ttl: 2s
  ingest: gateway
  max_age: 2h
  max_bytes: 50MiB
`),
	} {
		c, err := config.Parse(strings.NewReader(y), "test.yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, c)
	}
	run := startService(t, cfgs, service.Deps{Log: testLog(t), Shards: 1})
	addr := (<-run.addr).String()

	nc := ns.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	streamOf := func(name string) jetstream.StreamConfig {
		t.Helper()
		var s jetstream.Stream
		testenv.WaitFor(t, 30*time.Second, "stream "+name, func() bool {
			s, err = js.Stream(ctx, name)
			return err == nil
		})
		return s.CachedInfo().Config
	}
	for _, market := range []string{"viaduct", "harbour"} {
		sc := streamOf("RESULTS_" + strings.ToUpper(market))
		if sc.MaxAge != 168*time.Hour || sc.MaxBytes != 100<<20 || sc.Duplicates != 3*time.Minute {
			t.Errorf("%s: results stream max_age %v, max_bytes %d, duplicates %v; want 168h, %d, 3m", market, sc.MaxAge, sc.MaxBytes, sc.Duplicates, 100<<20)
		}
		if want := "acme.dlv.dashboard." + market + ".>"; len(sc.Subjects) == 0 || sc.Subjects[0] != want {
			t.Errorf("%s: results stream subjects %v, want %s first", market, sc.Subjects, want)
		}
		testenv.WaitFor(t, 30*time.Second, "courier bucket of "+market, func() bool {
			_, err := js.KeyValue(ctx, defaults.CourierBucket(market))
			return err == nil
		})
	}
	pc := streamOf(defaults.PositionStream("harbour"))
	if pc.MaxAge != 2*time.Hour || pc.MaxBytes != 50<<20 {
		t.Errorf("positions stream max_age %v, max_bytes %d; want 2h, %d", pc.MaxAge, pc.MaxBytes, 50<<20)
	}

	// Both markets ready, the MQTT one subscribed: the broker drops what
	// is published before a subscription exists (seen once under load).
	testenv.WaitFor(t, 30*time.Second, "every market ready", func() bool {
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})

	// Five couriers in each market's engine: at max_couriers 3, with none
	// of them idle, two are refused as courier_limit.
	pub := mq.Publisher(t, "sources-test")
	now := time.Now().UnixMilli()
	for i := range 5 {
		courier := "c" + strconv.Itoa(i)
		payload := fmt.Appendf(nil, `{"courier":%q,"lat":41.98,"lon":2.82,"timestamp_ms":%d}`, courier, now+int64(i))
		if err := pub.Publish(ctx, "km0/viaduct/positions/"+courier, payload); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "part.harbour.0."+courier, payload); err != nil {
			t.Fatal(err)
		}
	}
	// nats.kv_interval 1h: a courier's first position is written to the
	// bucket at once, a newer one with the same status not for an hour.
	// At the default (15 s) it would be there within 19 s, checked below.
	bucketTS := func(market, courier string) int64 {
		kv, err := js.KeyValue(ctx, defaults.CourierBucket(market))
		if err != nil {
			return 0
		}
		e, err := kv.Get(ctx, bridge.CourierKey(courier))
		if err != nil {
			return 0
		}
		var cs bridge.CourierState
		if err := json.Unmarshal(e.Value(), &cs); err != nil {
			t.Fatalf("%s: courier %s in the bucket: %v", market, courier, err)
		}
		return cs.TS
	}
	for _, market := range []string{"viaduct", "harbour"} {
		testenv.WaitFor(t, 30*time.Second, "c0's first position in the bucket of "+market, func() bool {
			return bucketTS(market, "c0") == now
		})
	}
	newer := fmt.Appendf(nil, `{"courier":"c0","lat":41.981,"lon":2.82,"timestamp_ms":%d}`, now+10_000)
	if err := pub.Publish(ctx, "km0/viaduct/positions/c0", newer); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "part.harbour.0.c0", newer); err != nil {
		t.Fatal(err)
	}
	newerSent := time.Now()

	get := func(path string) (int, string) { return get(t, "http://"+addr+path) }
	for _, market := range []string{"viaduct", "harbour"} {
		for _, metric := range []string{
			fmt.Sprintf(`edgeproc_positions_rejected_total{market=%q,reason="courier_limit"} 2`, market),
			fmt.Sprintf(`edgeproc_positions_received_total{market=%q} 6`, market),
			fmt.Sprintf(`edgeproc_couriers{market=%q} 3`, market),
		} {
			testenv.WaitFor(t, 30*time.Second, metric, func() bool {
				_, body := get("/metrics")
				return strings.Contains(body, metric)
			})
		}
		if code, _ := get("/board/" + market); code != http.StatusOK {
			t.Errorf("/board/%s: %d, want 200", market, code)
		}
	}
	_, body := get("/metrics")
	for _, re := range []string{
		`edgeproc_bridge_published_total\{market="harbour"\}`,
		`edgeproc_checkpoints_total\{market="harbour"\}`,
		`edgeproc_partition_owned\{instance="[^"]+",market="harbour",partition="0"\} 1`,
	} {
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("/metrics lacks %s", re)
		}
	}
	if code, body := get("/partitions/harbour"); code != http.StatusOK || !strings.Contains(body, `"owned":true`) {
		t.Errorf("/partitions/harbour: %d %s", code, body)
	}
	testenv.WaitFor(t, 30*time.Second, "/readyz ready", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK
	})
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	// 1.25 default intervals after the newer position: the writer looks
	// every interval/4 and writes what has been due for an interval.
	time.Sleep(time.Until(newerSent.Add(defaults.KVInterval*5/4 + 2*time.Second)))
	for _, market := range []string{"viaduct", "harbour"} {
		if ts := bucketTS(market, "c0"); ts != now {
			t.Errorf("%s: c0 in the bucket at %d, want its first position's %d: nats.kv_interval 1h not honoured", market, ts, now)
		}
	}
	run.stop(t, 30*time.Second)
}

// TestRun_TwoPartitionedMarketsInOneProcess: two markets of source
// jetstream in one process, on one NATS server, each with its own
// partitions, consumers, buckets and results stream: each owns all its
// partitions, processes exactly its own couriers (none of the other's in
// its counts, its bucket or its partitions), records checkpoints, and
// both stop cleanly.
func TestRun_TwoPartitionedMarketsInOneProcess(t *testing.T) {
	ns := testenv.StartNATS(t)
	markets := []string{"north", "south"}
	var cfgs []config.Config
	for _, m := range markets {
		y := fmt.Sprintf(`market: %s
source: %s
nats: {url: %q}
windows: {idle_timeout: 0s}
state: {dir: %q, checkpoint_interval: 1s}
http: {listen: "127.0.0.1:0"}
jetstream: {replicas: 1, pin_ttl: 2s, partitions: 2, ingest: gateway}
`, m, "jetstream", ns.URL(), t.TempDir())
		c, err := config.Parse(strings.NewReader(y), m+".yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, c)
	}
	run := startService(t, cfgs, service.Deps{Log: testLog(t), Shards: 1})
	addr := (<-run.addr).String()
	get := func(path string) (int, string) { return get(t, "http://"+addr+path) }
	testenv.WaitFor(t, 30*time.Second, "both markets ready", func() bool {
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			select {
			case err := <-run.done:
				t.Fatalf("service ended: %v", err)
			default:
			}
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})

	nc := ns.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// north has 4 couriers, south 6, with two ids in both markets: the
	// same id is a different courier in each.
	couriers := map[string][]string{"north": {"n1", "n2", "x1", "x2"}, "south": {"s1", "s2", "s3", "s4", "x1", "x2"}}
	now := time.Now().UnixMilli()
	for _, m := range markets {
		for i, c := range couriers[m] {
			for k := range 3 {
				payload := fmt.Appendf(nil, `{"courier":%q,"lat":41.98,"lon":2.82,"timestamp_ms":%d}`, c, now+int64(1000*k+i))
				subject := fmt.Sprintf("part.%s.%d.%s", m, partition.PartitionOf(c, 2), c)
				if _, err := js.Publish(ctx, subject, payload); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, m := range markets {
		for _, metric := range []string{
			fmt.Sprintf(`edgeproc_positions_received_total{market=%q} %d`, m, 3*len(couriers[m])),
			fmt.Sprintf(`edgeproc_couriers{market=%q} %d`, m, len(couriers[m])),
		} {
			testenv.WaitFor(t, 30*time.Second, metric, func() bool {
				_, body := get("/metrics")
				return strings.Contains(body, metric)
			})
		}
		for n := range 2 {
			re := regexp.MustCompile(fmt.Sprintf(`edgeproc_partition_owned\{instance="[^"]+",market=%q,partition="%d"\} 1`, m, n))
			if _, body := get("/metrics"); !re.MatchString(body) {
				t.Errorf("%s: partition %d not owned", m, n)
			}
		}
		testenv.WaitFor(t, 30*time.Second, m+" checkpoints recorded", func() bool {
			_, body := get("/metrics")
			return regexp.MustCompile(fmt.Sprintf(`edgeproc_checkpoints_total\{market=%q\} [1-9]`, m)).MatchString(body)
		})
		kv, err := js.KeyValue(ctx, defaults.CourierBucket(m))
		if err != nil {
			t.Fatalf("%s: courier bucket: %v", m, err)
		}
		var keys []string
		testenv.WaitFor(t, 30*time.Second, m+"'s couriers in its bucket", func() bool {
			keys, err = kv.Keys(ctx)
			return err == nil && len(keys) == len(couriers[m])
		})
		want := map[string]bool{}
		for _, c := range couriers[m] {
			want[bridge.CourierKey(c)] = true
		}
		for _, k := range keys {
			if !want[k] {
				t.Errorf("%s's bucket holds %s, not one of its couriers %v", m, k, couriers[m])
			}
		}
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	run.stop(t, 30*time.Second)
}
