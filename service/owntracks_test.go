package service_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/service"
)

// ownTracksFleet is testenv's simulated fleet as OwnTracks phones publish
// it: each position a location message (tst in whole seconds, the app's
// other members) on owntracks/COURIER/phone; the fleet's bad payloads as
// they are; then a last will, a location without lat and one from a user
// whose name is no courier id.
func ownTracksFleet(market string, end time.Time) []testenv.Message {
	var out []testenv.Message
	for i, m := range testenv.FleetMessages(market, 20, 10*time.Minute, 11, end) {
		var p struct {
			Courier   string   `json:"courier"`
			Lat       *float64 `json:"lat"`
			Lon       *float64 `json:"lon"`
			TS        int64    `json:"timestamp_ms"`
			AccuracyM *float64 `json:"accuracy_m"`
		}
		if json.Unmarshal(m.Payload, &p) != nil || p.Courier == "" || p.Lat == nil || p.Lon == nil || p.TS <= 0 {
			out = append(out, testenv.Message{Topic: "owntracks/bad/phone", Payload: m.Payload})
			continue
		}
		acc := ""
		if p.AccuracyM != nil {
			acc = fmt.Sprintf(`"acc":%v,`, *p.AccuracyM)
		}
		payload := fmt.Sprintf(`{"_type":"location",%s"alt":96,"batt":%d,"bs":1,"conn":"m","created_at":%d,"lat":%v,"lon":%v,"t":"u","tid":"%s","tst":%d,"vac":4,"vel":%d}`,
			acc, 40+i%60, p.TS/1000+1, *p.Lat, *p.Lon, p.Courier[len(p.Courier)-2:], p.TS/1000, i%50)
		out = append(out, testenv.Message{Topic: "owntracks/" + p.Courier + "/phone", Payload: []byte(payload)})
	}
	return append(out,
		testenv.Message{Topic: "owntracks/lost/phone", Payload: []byte(`{"_type":"lwt","tst":1380738247}`)},
		testenv.Message{Topic: "owntracks/jane/phone", Payload: []byte(fmt.Sprintf(`{"_type":"location","lon":2.82,"tst":%d,"tid":"ja"}`, end.Unix()))},
		testenv.Message{Topic: "owntracks/jane doe/phone", Payload: []byte(fmt.Sprintf(`{"_type":"location","lat":41.98,"lon":2.82,"tst":%d,"tid":"jd"}`, end.Unix()))},
	)
}

// TestRun_OwnTracksLiveEqualsReplay publishes an OwnTracks fleet to
// owntracks/USER/DEVICE through Mosquitto: the results reach the stream
// under the USER level as the courier, the other message types are only
// counted, a missing lat is dead-lettered naming it, and everything equals
// `edgeproc replay --format owntracks` over the same messages (each line
// with its topic and the arrival the service recorded).
func TestRun_OwnTracksLiveEqualsReplay(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	cfg := mustConfigMQTT(t, "girona", mosq.URL(), ns.URL(), `topic: "owntracks/+/+", format: owntracks`)
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	svc := startService(t, []config.Config{cfg}, service.Deps{Log: testLog(t), Record: rec.record, Registry: reg})

	msgs := ownTracksFleet("girona", time.Now().Add(-time.Minute))
	pub := mosq.Publisher(t, "owntracks-pub")
	waitReady(t, svc, 20*time.Second)
	published := map[string]bool{}
	for _, m := range msgs {
		pub.MustPublish(t, m.Topic, m.Payload)
		published[string(m.Payload)] = true
	}
	rec.waitSeen(t, published, 60*time.Second)
	svc.stop(t, 15*time.Second)

	if got := seriesWith(t, reg, "edgeproc_inputs_ignored_total", "girona", "type", "lwt"); got != 1 {
		t.Errorf("edgeproc_inputs_ignored_total{type=lwt} = %v, want 1", got)
	}
	if got := seriesWith(t, reg, "edgeproc_positions_rejected_total", "girona", "reason", "courier_mismatch"); got != 0 {
		t.Errorf("courier_mismatch = %v, want 0: there is none in this format", got)
	}
	got := streamResults(t, ns.URL(), cfg.NATS.Stream)
	want := expectedOwnTracks(t, cfg, rec.inputs["girona"])
	compareResults(t, got, want)

	var couriers, missingLat, badCourier int
	for _, r := range got {
		switch {
		case strings.Contains(r, `"courier":"girona-c00`):
			couriers++
		case strings.Contains(r, `"reason":"missing_field","field":"lat"`):
			missingLat++
		case strings.Contains(r, `"reason":"bad_courier"`) && strings.Contains(r, `"tid\":\"jd\"`):
			badCourier++
		}
	}
	if couriers == 0 || missingLat != 1 || badCourier != 1 {
		t.Errorf("got %d results of the fleet's couriers, %d missing lat, %d bad courier; want some, 1, 1", couriers, missingLat, badCourier)
	}
}

// ownTracksClockRe is clockRe and the topic expectedOwnTracks put into
// a rejected payload, as escaped in the record's raw string.
var ownTracksClockRe = regexp.MustCompile(clockRe.String() + `|,\\"topic\\":\\"[^\\]*\\"`)

// expectedOwnTracks is expectedResults for an OwnTracks market: each
// recorded payload becomes a replay line carrying its topic and arrival.
func expectedOwnTracks(tb testing.TB, cfg config.Config, inputs []engine.Input) map[string]string {
	tb.Helper()
	lines := make([]engine.Input, len(inputs))
	for i, in := range inputs {
		lines[i] = in
		lines[i].Payload = withMember(in.Payload, "topic", in.Topic)
	}
	ecfg := market.EngineConfig(cfg)
	ecfg.Topic = cfg.MQTT.Topic
	return replayExpected(tb, ecfg, lines, ownTracksClockRe)
}

// withMember adds "name":"value" (value plain ASCII) to a payload that
// ends as a JSON object, like withArrival; others are left alone.
func withMember(p []byte, name, value string) []byte {
	t := bytes.TrimRight(p, " \t\r")
	if len(p) > 4096 || len(t) == 0 || t[len(t)-1] != '}' {
		return p
	}
	body := bytes.TrimRight(t[:len(t)-1], " \t\r\n")
	out := append([]byte(nil), body...)
	if len(body) > 0 && body[len(body)-1] != '{' {
		out = append(out, ',')
	}
	return append(out, fmt.Sprintf(`%q:%q}`, name, value)...)
}
