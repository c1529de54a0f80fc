package partition

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/internal/oracle"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/position"
)

// ownTracksYAML is testYAML's market reading OwnTracks phones from the
// broker at mqttURL through the relay, the courier the topic's level by
// (user or device).
func ownTracksYAML(url, mqttURL string, partitions int, by string) string {
	return testYAML(url, partitions, "127.0.0.1:0", "  ingest: mqtt\n") + fmt.Sprintf(`mqtt:
  url: %q
  topic: owntracks/+/+
  format: owntracks
  owntracks_courier: %s
`, mqttURL, by)
}

// oddNames are topic levels that are no courier id, as a phone may still
// publish them (Mosquitto refuses control characters in a topic).
var oddNames = []string{"jane doe", "a*b", ">", "*", "ünï", "50%", strings.Repeat("x", 100), ""}

// ownTracksPhones is testenv's simulated fleet as OwnTracks phones publish
// it, each location on owntracks/USER/DEVICE with the fleet's courier as
// the level by names (the other level varies: a user's phone and tablet,
// or a device under several users); the fleet's bad payloads as they
// are. Before it, in the minute before the fleet's, three locations each of
// couriers whose ids need escaping ("jane.doe", "_tick") and of names that
// are no courier id (oddNames, on the courier's level and on the other
// one); after it, a last will and a location without lat.
func ownTracksPhones(by string, couriers int, end time.Time) []testenv.Message {
	const span = 10 * time.Minute
	topic := func(courier, other string) string {
		if by == "device" {
			return "owntracks/" + other + "/" + courier
		}
		return "owntracks/" + courier + "/" + other
	}
	location := func(tst int64, lat, lon float64, tid string) []byte {
		return fmt.Appendf(nil, `{"_type":"location","acc":8,"alt":96,"batt":80,"conn":"m","lat":%v,"lon":%v,"t":"u","tid":%q,"tst":%d,"vel":20}`, lat, lon, tid, tst)
	}
	var out []testenv.Message
	start := end.Add(-span).Unix()
	for i := range 3 {
		tst, lat := start-60+int64(i)*20, 41.98+float64(i)*0.001 // before the fleet: none of its positions late
		for _, c := range []string{"jane.doe", "_tick"} {
			out = append(out, testenv.Message{Topic: topic(c, "phone"), Payload: location(tst, lat, 2.82, "jd")})
		}
		for _, name := range oddNames {
			out = append(out,
				testenv.Message{Topic: topic(name, "phone"), Payload: location(tst, lat, 2.82, "od")},
				testenv.Message{Topic: topic("girona-c0001", name), Payload: location(tst, lat, 2.83, "c1")})
		}
	}
	others := []string{"phone", "tablet", "watch"}
	for i, m := range testenv.FleetMessages("girona", couriers, span, 11, end) {
		var p struct {
			Courier string   `json:"courier"`
			Lat     *float64 `json:"lat"`
			Lon     *float64 `json:"lon"`
			TS      int64    `json:"timestamp_ms"`
		}
		if json.Unmarshal(m.Payload, &p) != nil || p.Courier == "" || p.Lat == nil || p.Lon == nil || p.TS <= 0 {
			out = append(out, testenv.Message{Topic: topic("girona-c0002", "phone"), Payload: m.Payload})
			continue
		}
		out = append(out, testenv.Message{Topic: topic(p.Courier, others[i%len(others)]), Payload: location(p.TS/1000, *p.Lat, *p.Lon, p.Courier[len(p.Courier)-2:])})
	}
	return append(out,
		testenv.Message{Topic: topic("lost", "phone"), Payload: []byte(`{"_type":"lwt","tst":1380738247}`)},
		testenv.Message{Topic: topic("jane", "phone"), Payload: fmt.Appendf(nil, `{"_type":"location","lon":2.82,"tst":%d,"tid":"ja"}`, end.Unix())},
	)
}

// TestOwnTracks_PartitionsEqualTheMQTTSource publishes an OwnTracks fleet
// to Mosquitto on owntracks/USER/DEVICE, relayed by the partitioned
// source's instances into the positions stream of a real nats-server, by
// USER (three partitions, two instances) and by DEVICE (one partition).
// Every courier must be in one partition whatever its other level, the
// subjects valid whatever the names, and the results stream must equal,
// key for key and byte for byte, the single-process (source mqtt) engine
// replaying each partition's positions on their original topics, in
// stream order at their stream times: with one partition, the market's
// single-process replay.
func TestOwnTracks_PartitionsEqualTheMQTTSource(t *testing.T) {
	for _, tt := range []struct {
		by                    string
		partitions, instances int
	}{
		{"user", 3, 2},
		{"device", 1, 1},
	} {
		t.Run(tt.by, func(t *testing.T) {
			mosq := testenv.StartMosquitto(t)
			ns := testenv.StartNATS(t)
			cfg, err := config.Parse(strings.NewReader(ownTracksYAML(ns.URL(), mosq.URL(), tt.partitions, tt.by)), "owntracks.yaml")
			if err != nil {
				t.Fatal(err)
			}
			var ins []*instance
			for i := range tt.instances {
				in := startInstance(t, cfg, ns.Connect(t), string(rune('a'+i)), nil)
				testenv.WaitFor(t, 60*time.Second, in.r.Instance()+" ready", func() bool { return in.r.NotReady() == "" })
				ins = append(ins, in)
			}

			msgs := ownTracksPhones(tt.by, 30, time.Now().Add(-time.Minute))
			topicOf := map[string]string{} // courier level and payload -> MQTT topic
			l := bareRelay(cfg)
			pub := mosq.Publisher(t, "owntracks-phones")
			for _, m := range msgs {
				pub.MustPublish(t, m.Topic, m.Payload)
				topicOf[storedKey(natsToMQTT(l.subjectOf(m.Topic)), m.Payload)] = m.Topic
			}
			testenv.WaitFor(t, 60*time.Second, "every position in the positions stream", func() bool {
				stored := map[string]bool{}
				for _, p := range storedPositions(t, ns.URL(), cfg.JetStream.Stream) {
					stored[storedKey(natsToMQTT(p.subject), p.payload)] = true
				}
				for k := range topicOf {
					if !stored[k] {
						return false
					}
				}
				return true
			})
			last := lastSeqs(t, ns.Connect(t), cfg)
			testenv.WaitFor(t, 2*time.Minute, "every partition applied to its end and recorded", func() bool { return settled(last, statuses(ins...)...) })
			for _, in := range ins {
				in.Stop()
			}

			checkOnePartitionPerCourier(t, ns.URL(), cfg, topicOf)
			want, stats := mqttSourceReplay(t, ns.URL(), cfg, topicOf)
			got := published(t, ns.URL(), cfg)
			for k := range got {
				if strings.HasPrefix(k, "dead_zone|") { // the market's: not a partition's replay
					delete(got, k)
				}
			}
			if diffs := testenv.DiffResults(got, want, "the single-process replay"); len(diffs) > 0 {
				t.Errorf("%d differences, first ones:", len(diffs))
				for _, d := range diffs[:min(len(diffs), 10)] {
					t.Error(d)
				}
			}
			var badCourier, janeDoe, tick, missingLat int
			for _, r := range got {
				switch {
				case strings.Contains(r, `"reason":"bad_courier"`):
					badCourier++
				case strings.Contains(r, `"type":"distance"`) && strings.Contains(r, `"courier":"jane.doe"`):
					janeDoe++
				case strings.Contains(r, `"type":"distance"`) && strings.Contains(r, `"courier":"_tick"`):
					tick++
				case strings.Contains(r, `"reason":"missing_field","field":"lat"`):
					missingLat++
				}
			}
			// The odd names' locations and any of the fleet's couriers
			// that is no courier id, once each.
			if want := badCouriers(cfg, topicOf); badCourier != want || janeDoe == 0 || tick == 0 || missingLat != 1 {
				t.Errorf("%d bad_courier, %d distance results of jane.doe and %d of _tick, %d missing lat; want %d, some, some, 1",
					badCourier, janeDoe, tick, missingLat, want)
			}
			if stats.Ignored["lwt"] != 1 {
				t.Errorf("the replay ignored %d last wills, want 1", stats.Ignored["lwt"])
			}
			t.Logf("%d OwnTracks messages by %s in %d partitions: %d results, as the single-process replay", len(msgs), tt.by, tt.partitions, len(got))
		})
	}
}

// badCouriers counts the distinct locations published on a topic whose
// courier level is no courier id (all of them locations here).
func badCouriers(cfg config.Config, topicOf map[string]string) int {
	level := market.EngineConfig(cfg).CourierLevel
	n := 0
	for _, topic := range topicOf {
		if !position.ValidCourier([]byte(courierLevel(topic, cfg.MQTT.Topic, level))) {
			n++
		}
	}
	return n
}

// checkOnePartitionPerCourier checks that the positions of each topic
// level that names a courier (by the market's owntracks_courier) were
// stored in one partition only, under one token.
func checkOnePartitionPerCourier(t *testing.T, url string, cfg config.Config, topicOf map[string]string) {
	t.Helper()
	level := market.EngineConfig(cfg).CourierLevel
	where := map[string]string{} // courier level -> subject
	for n := range cfg.JetStream.Partitions {
		for _, m := range storedPositions(t, url, cfg.JetStream.Stream, cfg.JetStream.PartitionSubject(n)) {
			topic, ok := topicOf[storedKey(natsToMQTT(m.subject), m.payload)]
			if !ok {
				t.Errorf("stored on %s, never published: %s", m.subject, m.payload)
				continue
			}
			c := courierLevel(topic, cfg.MQTT.Topic, level)
			if s, ok := where[c]; ok && s != m.subject {
				t.Errorf("courier level %q on %s and on %s", c, s, m.subject)
			}
			where[c] = m.subject
		}
	}
	if len(where) < 30 {
		t.Errorf("%d couriers stored, want at least the fleet's 30", len(where))
	}
}

// mqttSourceReplay is the oracle: for each partition, the engine of the
// single-process source (market.EngineConfig, mqtt.topic as its filter)
// over the partition's stored positions on their original MQTT topics,
// in stream order, arriving at their stream times (the partition's
// ticks and wake-ups as its owner applies them), stopped without ending
// the input; the results by key and the engines' counters summed. A
// partition counts no dead zones (EngineConfig), so neither does it.
func mqttSourceReplay(t *testing.T, url string, cfg config.Config, topicOf map[string]string) (map[string]string, engine.Stats) {
	t.Helper()
	x := oracle.NewResults(nil, false)
	sum := engine.Stats{Ignored: map[string]int64{}}
	for n := range cfg.JetStream.Partitions {
		ecfg := market.EngineConfig(cfg)
		ecfg.Topic, ecfg.Shards, ecfg.DeadZoneWindow = cfg.MQTT.Topic, 1, 0
		e := engine.New(ecfg, x.Sink)
		var buf []byte
		for _, m := range testenv.ReadStored(t, url, cfg.JetStream.Stream, cfg.JetStream.PartitionSubject(n)) {
			err := eachEntry(m.Subject, m.Header, m.Data, m.Seq, m.Time.UnixMilli(), &buf, func(line uint64, en entry.Entry) {
				if en.Kind == entry.Position {
					en.Topic = topicOf[storedKey(en.Topic, en.Payload)]
				}
				e.Apply(line, en)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		e.Stop()
		for k, v := range e.Stats().Ignored {
			sum.Ignored[k] += v
		}
	}
	return x.ByKey(t), sum
}

// ownTracksMapping is the server-side subject mapping of an OwnTracks
// market with jetstream.ingest gateway (docs/scale-out.md): the courier's
// wildcard, USER (1) or DEVICE (2), is the one partition(N, …) hashes and
// the one the subject keeps.
func ownTracksMapping(partitions int, by string) map[string]string {
	w := 1
	if by == "device" {
		w = 2
	}
	return map[string]string{
		"owntracks.*.*": fmt.Sprintf("part.girona.{{partition(%d,%d)}}.{{wildcard(%d)}}", partitions, w, w),
	}
}

// TestOwnTracksMapping_AgreesWithTheRelay: for OwnTracks topics as the
// MQTT gateway turns them into subjects, the server's mapping of
// docs/scale-out.md stores each location on the subject the relay gives
// it, by USER and by DEVICE, whatever the other level: the two ways in
// put a courier in the same partition under the same token.
func TestOwnTracksMapping_AgreesWithTheRelay(t *testing.T) {
	const partitions = 6
	for _, by := range config.OwnTracksCouriers {
		t.Run(by, func(t *testing.T) {
			cl := testenv.StartNATSWithMappings(t, ownTracksMapping(partitions, by))
			js, err := jetstream.New(cl.Connect(t))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MAPPED", Subjects: []string{"part.girona.*.*"}}); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, cl.URL(), partitions)
			cfg.MQTT.Format, cfg.MQTT.Topic, cfg.MQTT.OwnTracksCourier = "owntracks", "owntracks/+/+", by
			l := bareRelay(cfg)
			var topics []string
			for i := range 60 {
				for _, other := range []string{"phone", "tablet.2", "Pixel-7"} {
					c := fmt.Sprintf("courier-%d", i)
					if i%10 == 0 {
						c = fmt.Sprintf("van.%d:x", i)
					}
					if by == "device" {
						topics = append(topics, "owntracks/"+other+"/"+c)
					} else {
						topics = append(topics, "owntracks/"+c+"/"+other)
					}
				}
			}
			for _, topic := range topics {
				if _, err := js.PublishMsg(ctx, fleetMsg(testenv.Message{Topic: topic}, 0)); err != nil {
					t.Fatal(err)
				}
			}
			stored := testenv.ReadStored(t, cl.URL(), "MAPPED")
			if len(stored) != len(topics) {
				t.Fatalf("%d of %d stored", len(stored), len(topics))
			}
			used := map[string]bool{}
			for i, m := range stored {
				if want := l.subjectOf(topics[i]); m.Subject != want {
					t.Errorf("%s: the server's mapping stored it on %s, the relay on %s", topics[i], m.Subject, want)
				}
				used[strings.Split(m.Subject, ".")[2]] = true
			}
			if len(used) != partitions {
				t.Errorf("%d partitions used, want %d", len(used), partitions)
			}
		})
	}
}

// storedKey identifies a stored position by the MQTT topic its subject
// stands for (its courier level, the other levels gone) and its payload.
func storedKey(topic string, payload []byte) string {
	return topic[strings.LastIndexByte(topic, '/')+1:] + "|" + string(payload)
}
