package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/km0/edgeproc/position"
)

// ownTracksInput is randomInput's adversarial stream as an OwnTracks
// fleet would send it, replayed: each position becomes a location message
// with the app's other members, its courier a level of the line's topic
// (USER, or DEVICE when device), timestamp_ms cut to whole seconds of
// tst; its bad lines stay (now missing _type). Other messages (lwt,
// transition, card, ...) and OwnTracks' own bad lines are mixed in.
func ownTracksInput(r *rand.Rand, n int, device bool) []byte {
	var b bytes.Buffer
	arrival := int64(-1)
	topicOf := func(courier string) string {
		t := "owntracks/" + courier + "/phone"
		if device {
			t = "owntracks/fleet/" + courier
		}
		if r.IntN(10) == 0 {
			t = strings.ReplaceAll(t, "/", `\/`) // as PHP's json_encode writes it
		}
		return t
	}
	withArrival := func(s string) string {
		if arrival >= 0 && r.IntN(4) > 0 {
			arrival += int64(r.IntN(20_000))
			return s[:len(s)-1] + fmt.Sprintf(`,"arrival_ms":%d}`, arrival)
		}
		return s
	}
	for _, line := range bytes.Split(randomInput(r, n), []byte("\n")) {
		switch k := r.IntN(100); {
		case k < 5:
			b.WriteString(withArrival(pick(r, []string{
				`{"_type":"lwt","tst":1380738247}`,
				`{"_type":"transition","event":"enter","desc":"Depot","lat":41.001,"lon":2.001,"tst":1750000000,"acc":20,"tid":"v3","t":"c","topic":"owntracks/a/phone/event"}`,
				`{"_type":"card","tid":"v3","name":"Van 3"}`,
				`{"_type":"status","android":{"hib":0,"bo":1,"loc":0,"ps":0,"wifi":1}}`,
				`{"_type":"waypoint","desc":"Depot","lat":41,"lon":2,"rad":50,"tst":1385997757}`,
				`{"_type":"encrypted","data":"tR3s7RrJnOl+yqXxKGBZ0Q=="}`,
				`{"_type":"msg","title":"Lunch"}`,
				`{"_type":5}`,
			})))
			b.WriteByte('\n')
		case k < 8:
			b.WriteString(withArrival(pick(r, []string{
				`{"_type":"location","lon":2,"tst":1750000000,"topic":"owntracks/a/phone"}`,
				`{"_type":"location","lat":41,"lon":null,"topic":"owntracks/a/phone"}`,
				`{"_type":"location","lat":41,"lon":2,"tst":1750000000}`,
				`{"_type":"location","lat":41,"lon":2,"tst":null,"topic":"owntracks/a/phone"}`,
				`{"_type":"location","lat":41,"lon":2,"tst":1750000000,"topic":"owntracks/a b/c d"}`,
				`{"_type":"location","lat":"41.0","lon":2,"tst":1750000000,"topic":"owntracks/a/phone"}`,
				`{"_type":"location","lat":41,"lon":2,"tst":1750000000.5,"topic":"owntracks/fleet/a"}`,
				`{"_type":null,"lat":41,"lon":2,"tst":1750000000}`,
				`{"lat":41,"lon":2,"tst":1750000000,"topic":"owntracks/a/phone"}`,
			})))
			b.WriteByte('\n')
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(line, &m) != nil || m["courier"] == nil || m["timestamp_ms"] == nil {
			b.Write(line)
			b.WriteByte('\n')
			continue
		}
		var courier string
		if json.Unmarshal(m["courier"], &courier) != nil {
			b.Write(line)
			b.WriteByte('\n')
			continue
		}
		tst := string(m["timestamp_ms"])
		if len(tst) > 3 && !strings.ContainsAny(tst, ".eE") {
			tst = tst[:len(tst)-3] // seconds, cut
		}
		s := fmt.Sprintf(`{"_type":"location","BSSID":"f4:92:bf:a1:22:3c","alt":96,"batt":%d,"conn":"w","lat":%s,"lon":%s,"m":2,"t":"u","tid":"v3","tst":%s,"vel":%d,"topic":"%s"`,
			r.IntN(100), m["lat"], m["lon"], tst, r.IntN(60), topicOf(courier))
		if a, ok := m["accuracy_m"]; ok {
			s += `,"acc":` + string(a)
		}
		if a, ok := m["arrival_ms"]; ok {
			s += `,"arrival_ms":` + string(a)
			prev := arrival
			_ = json.Unmarshal(a, &arrival)
			if prev >= 0 && arrival-prev > 5_000 && r.IntN(2) == 0 {
				// A silence: the broker sends the phone's last will in
				// the middle of it, which the idle rule must hear.
				fmt.Fprintf(&b, `{"_type":"lwt","tst":1380738247,"topic":"%s","arrival_ms":%d}`+"\n", topicOf(courier), prev+r.Int64N(arrival-prev))
			}
		}
		b.WriteString(s + "}\n")
	}
	return b.Bytes()
}

func pick(r *rand.Rand, s []string) string { return s[r.IntN(len(s))] }

func TestReplay_MatchesReference_OwnTracks(t *testing.T) {
	seeds := 80
	if testing.Short() {
		seeds = 30
	}
	seen := map[string]int{} // rejections by reason (and missing field)
	for seed := 0; seed < seeds; seed++ {
		r := rand.New(rand.NewPCG(uint64(seed), 34))
		c := randomConfig(r)
		c.Format, c.Topic = position.FormatOwnTracks, "owntracks/+/+"
		device := r.IntN(2) == 0
		if device {
			c.CourierLevel = 1
		}
		in := ownTracksInput(r, 50+r.IntN(300), device)
		recs, _ := replayRecords(t, c, in)
		if len(ofType(recs, "distance")) == 0 {
			t.Fatalf("seed %d: no distance result: the OwnTracks stream is not read as positions", seed)
		}
		for _, rj := range ofType(recs, "rejected") {
			seen[fmt.Sprint(rj["reason"], rj["field"])]++
		}
		compare(t, fmt.Sprintf("owntracks seed %d device %v config %+v", seed, device, c), c, in)
	}
	for _, k := range []string{"missing_field_type", "missing_fieldlat", "missing_fieldlon", "missing_fieldtst", "bad_courier<nil>", "bad_coordinates<nil>", "bad_timestamp<nil>", "malformed_json<nil>", "future_timestamp<nil>"} {
		if seen[k] == 0 {
			t.Errorf("no rejection %s in %d streams: the streams are meant to exercise each (seen %v)", k, seeds, seen)
		}
	}
}
