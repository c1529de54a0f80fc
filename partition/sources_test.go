package partition

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/oracle"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/mqttsource"
)

// sourcesWindows are both markets' windows and dead zones in
// TestSources_OneFleetTheSameResults: seconds, for a fleet on the clock.
const sourcesWindows = `windows:
  size: 4s
  slide: 2s
  gap: 3s
  tolerated_delay: 1s
  idle_timeout: 2s
dead_zones:
  window: 10s
  h3_resolution: 7
`

// TestSources_OneFleetTheSameResults runs one fleet, published to
// Mosquitto, through both sources at once: a single process (source
// mqtt) and three partitions on two instances relaying from the same
// broker (source jetstream, ingest mqtt). Phones on the clock, a third
// of them going silent for 6 s now and then in one of two places, a
// few sending a position 30 s old, a few payloads bad; after the fleet,
// one courier a partition keeps publishing, so every watermark passes
// everything the fleet opened. Every result of the fleet's couriers —
// distance, no_signal, signal_restored, late, and the market's
// dead_zone, which the partitioned source combines from its partitions'
// parts — must be the same in both results streams, key for key and
// value for value (all but emitted_at); the rejected ones the same
// payloads (their keys are lines of each source's own log).
func TestSources_OneFleetTheSameResults(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)

	single, err := config.Parse(strings.NewReader(fmt.Sprintf(`market: girona
mqtt:
  url: %q
  topic: km0/girona/positions/+
  client_id: single-girona
nats:
  url: %q
  stream: SINGLE_GIRONA
  subject_prefix: single
state:
  dir: %q
  checkpoint_interval: 500ms
http:
  listen: 127.0.0.1:0
%s`, mosq.URL(), ns.URL(), t.TempDir(), sourcesWindows)), "single.yaml")
	if err != nil {
		t.Fatal(err)
	}
	parted, err := config.Parse(strings.NewReader(fmt.Sprintf(`market: girona
source: jetstream
jetstream:
  partitions: 3
  replicas: 1
  pin_ttl: 2s
  ingest: mqtt
mqtt:
  url: %q
  topic: km0/girona/positions/+
  client_id: parted-girona
nats:
  url: %q
state:
  checkpoint_interval: 500ms
http:
  listen: 127.0.0.1:0
%s`, mosq.URL(), ns.URL(), sourcesWindows)), "parted.yaml")
	if err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	sm := market.New(single, mqttsource.New(single, log, mqttsource.Deps{Shards: 2}), market.Deps{Conn: ns.Connect(t), Log: log})
	go func() { done <- sm.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var ins []*instance
	for _, name := range []string{"a", "b"} {
		in := startInstance(t, parted, ns.Connect(t), name, nil)
		testenv.WaitFor(t, 60*time.Second, name+" ready", func() bool { return in.r.NotReady() == "" })
		ins = append(ins, in)
	}
	testenv.WaitFor(t, 60*time.Second, "the single process ready", func() bool { return sm.NotReady() == "" })

	// One sentinel a partition, to move every partition's watermark on
	// after the fleet.
	var sentinels []string
	for p := range parted.JetStream.Partitions {
		for i := 0; ; i++ {
			if name := fmt.Sprintf("zz-end-%d", i); partitionOf(name, parted.JetStream.Partitions) == p {
				sentinels = append(sentinels, name)
				break
			}
		}
	}

	pub := mosq.Publisher(t, "phones")
	send := func(courier string, ts int64, lat, lon float64) {
		pub.MustPublish(t, "km0/girona/positions/"+courier, fmt.Appendf(nil, `{"courier":%q,"lat":%.6f,"lon":%.6f,"timestamp_ms":%d}`, courier, lat, lon, ts))
	}
	const couriers, rounds, every = 24, 64, 500 * time.Millisecond
	places := [][2]float64{{41.9794, 2.8214}, {41.9500, 2.7800}}
	var lastTS int64
	for round := range rounds {
		now := time.Now().UnixMilli()
		phase := now % 20_000 // a silence from 2 s to 8 s of each 20 s: its window fires long after the restore
		for c := range couriers {
			courier := fmt.Sprintf("c%02d", c)
			lat, lon := 41.96+float64(c)*0.002, 2.80+float64(round)*2e-4
			if c%3 == 0 { // through tunnels, in one of two places
				pl := places[c/3%2]
				lat, lon = pl[0]+float64(c)*1e-4, pl[1]+float64(round)*1e-4
				if phase >= 2_000+int64(c)*20 && phase < 8_000 {
					continue
				}
			}
			send(courier, now, lat, lon)
			lastTS = max(lastTS, now)
		}
		if round%25 == 7 {
			send("c01", now-30_000, 41.96, 2.80)                                              // late for both operators
			pub.MustPublish(t, "km0/girona/positions/c02", []byte(`{"courier":"c02","lat":`)) // malformed
		}
		time.Sleep(every)
	}
	endAt := lastTS + 16_000 // past every window, session and dead zone the fleet opened
	for now := time.Now().UnixMilli(); now < endAt+2_000; now = time.Now().UnixMilli() {
		for _, s := range sentinels {
			send(s, now, 41.97, 2.83)
		}
		time.Sleep(every)
	}

	lastZone := lastTS / 10_000 * 10_000
	streams := map[string]string{"single": single.NATS.Stream, "partitioned": parted.NATS.Stream}
	testenv.WaitFor(t, 90*time.Second, "both sources past the fleet", func() bool {
		for _, stream := range streams {
			rs := streamRecords(t, ns.URL(), stream)
			for _, s := range sentinels {
				if !slices.ContainsFunc(rs, func(r sourceRecord) bool {
					return r.Type == "distance" && r.Courier == s && r.WindowEnd >= endAt
				}) {
					return false
				}
			}
			if !slices.ContainsFunc(rs, func(r sourceRecord) bool { return r.Type == "dead_zone" && r.WindowStart == lastZone }) {
				return false
			}
		}
		return true
	})
	for _, in := range ins {
		in.Stop()
	}

	fleetOnly := func(stream string) (map[string]string, []string) {
		byKey, rejected := map[string]string{}, []string(nil)
		for _, r := range streamRecords(t, ns.URL(), stream) {
			switch {
			case r.Type == "dead_zone_part":
			case r.Type == "rejected":
				rejected = append(rejected, r.Reason+" "+r.Raw)
			case strings.HasPrefix(r.Courier, "zz-end-"):
			case r.Type == "dead_zone" && r.WindowStart > lastZone: // the sentinels'
			default:
				byKey[r.Key] = oracle.EmittedRe.ReplaceAllString(string(r.data), "")
			}
		}
		slices.Sort(rejected)
		return byKey, rejected
	}
	want, wantRejected := fleetOnly(single.NATS.Stream)
	got, gotRejected := fleetOnly(parted.NATS.Stream)
	if diffs := testenv.DiffResults(got, want, "the single process"); len(diffs) > 0 {
		t.Errorf("%d differences, first ones:", len(diffs))
		for _, d := range diffs[:min(len(diffs), 10)] {
			t.Error(d)
		}
	}
	if !slices.Equal(gotRejected, wantRejected) {
		t.Errorf("rejected: %q, the single process %q", gotRejected, wantRejected)
	}
	types := map[string]int{}
	for k := range want {
		types[k[:strings.IndexByte(k, '|')]]++
	}
	for _, typ := range []string{"distance", "no_signal", "signal_restored", "late", "dead_zone"} {
		if types[typ] == 0 {
			t.Errorf("no %s result: the test checks none", typ)
		}
	}
	t.Logf("the fleet's results, the same from both sources: %v, and %d rejected", types, len(wantRejected))
}

// sourceRecord is what TestSources_OneFleetTheSameResults reads of a
// result.
type sourceRecord struct {
	Type        string `json:"type"`
	Key         string `json:"key"`
	Courier     string `json:"courier"`
	WindowStart int64  `json:"window_start_ms"`
	WindowEnd   int64  `json:"window_end_ms"`
	Reason      string `json:"reason"`
	Raw         string `json:"raw"`
	data        []byte
}

func streamRecords(t testing.TB, url, stream string) []sourceRecord {
	t.Helper()
	var out []sourceRecord
	for _, m := range testenv.ReadStream(t, url, stream) {
		var r sourceRecord
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("stream %s: %v: %q", stream, err, m.Data)
		}
		r.data = m.Data
		out = append(out, r)
	}
	return out
}
