package position

import (
	"strings"
	"testing"
)

// OwnTracks payloads shaped as the apps publish them (the OwnTracks
// booklet's JSON page, _type=location): every member but _type, lat, lon,
// tst and acc must be ignored.
const (
	// iOS with extended data: WLAN, monitoring mode, pressure, motion.
	otIOS = `{"_type":"location","BSSID":"f4:92:bf:a1:22:3c","SSID":"DeliveryHub","acc":5,"alt":96,"batt":78,"bs":1,"cog":212,"conn":"w","created_at":1726308299,"lat":41.979402,"lon":2.821398,"m":2,"motionactivities":["automotive"],"p":101.325,"t":"t","tid":"v3","tst":1726308298,"vac":3,"vel":27}`
	// Android: _id, regions, mobile data.
	otAndroid = `{"_type":"location","_id":"5e9f1a2b","acc":12,"alt":104,"batt":64,"bs":1,"conn":"m","created_at":1726308300,"inregions":["Depot","Girona"],"inrids":["6da9cf","3defa7"],"lat":41.9794,"lon":2.8214,"t":"u","tid":"v3","tst":1726308298,"vac":4,"vel":0}`
	// iOS, a point of interest tagged with a photo.
	otPOI = `{"_type":"location","acc":5,"alt":0,"conn":"w","created_at":1734377867,"image":"/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHRofHh0aHBwgJC4nICIsIxwcKDcpLDAxNDQ0Hyc5PTgyPC4zNDL/","imagename":"IMG_0009","lat":52.085284,"lon":5.120975,"m":1,"poi":"fabulous rijsttafel","t":"u","tid":"JJ","tst":1734377712}`
	// Minimal: no acc (iOS leaves zero-valued members out).
	otMinimal = `{"_type":"location","lat":48.856826,"lon":2.292713,"tid":"j1","tst":1706856298}`
)

const otFilter = "owntracks/+/+"

func TestDecodeOwnTracks_AppPayloads(t *testing.T) {
	tests := []struct {
		name, in, topic string
		level           int
		courier         string
		lat, lon        float64
		ts              int64
		acc             float64
	}{
		{"iOS", otIOS, "owntracks/van-3/iphone", 0, "van-3", 41.979402, 2.821398, 1726308298000, 5},
		{"Android", otAndroid, "owntracks/van-3/pixel", 0, "van-3", 41.9794, 2.8214, 1726308298000, 12},
		{"Android, device level", otAndroid, "owntracks/jane/van-3", 1, "van-3", 41.9794, 2.8214, 1726308298000, 12},
		{"POI with image", otPOI, "owntracks/jan/phone", 0, "jan", 52.085284, 5.120975, 1734377712000, 5},
		{"no acc", otMinimal, "owntracks/jane/nokia", 1, "nokia", 48.856826, 2.292713, 1706856298000, -1},
		{"shared subscription", otMinimal, "owntracks/jane/nokia", 0, "jane", 48.856826, 2.292713, 1706856298000, -1},
	}
	var d Decoder
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			filter := otFilter
			if strings.HasPrefix(tt.name, "shared") {
				filter = "$share/edge/" + otFilter
			}
			var p Position
			if r := d.DecodeOwnTracks([]byte(tt.in), tt.topic, filter, tt.level, &p); r != OK {
				t.Fatalf("DecodeOwnTracks = %v, want ok", r)
			}
			if string(p.Courier) != tt.courier || p.Lat != tt.lat || p.Lon != tt.lon || p.TS != tt.ts || p.Accuracy != tt.acc {
				t.Errorf("got courier %q lat %v lon %v ts %d acc %v; want %q %v %v %d %v",
					p.Courier, p.Lat, p.Lon, p.TS, p.Accuracy, tt.courier, tt.lat, tt.lon, tt.ts, tt.acc)
			}
		})
	}
}

// ot builds an OwnTracks location from otMinimal's members with some
// replaced or removed: each pair is a key and its raw JSON value, "" to
// remove it.
func ot(pairs ...string) string {
	keys := []string{"_type", "lat", "lon", "tst"}
	vals := map[string]string{"_type": `"location"`, "lat": "48.856826", "lon": "2.292713", "tst": "1706856298"}
	for i := 0; i+1 < len(pairs); i += 2 {
		if _, ok := vals[pairs[i]]; !ok {
			keys = append(keys, pairs[i])
		}
		vals[pairs[i]] = pairs[i+1]
	}
	var b strings.Builder
	b.WriteByte('{')
	for _, k := range keys {
		if vals[k] == "" {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + k + `":` + vals[k])
	}
	b.WriteByte('}')
	return b.String()
}

func TestDecodeOwnTracks_Reasons(t *testing.T) {
	const topic = "owntracks/jane/phone"
	big := `"` + strings.Repeat("x", MaxPayload) + `"`
	tests := []struct {
		name    string
		in      string
		topic   string // default topic
		want    Reason
		missing string
		ts      int64
	}{
		{"valid", ot(), "", OK, "", 1706856298000},

		{"too large", ot("image", big), "", TooLarge, "", 0},
		{"too large lwt", `{"_type":"lwt","pad":` + big + `}`, "", TooLarge, "", 0},
		{"not json", "owntracks", "", MalformedJSON, "", 0},
		{"array", `[` + ot() + `]`, "", MalformedJSON, "", 0},
		{"NaN", ot("lat", "NaN"), "", MalformedJSON, "", 0},
		{"malformed lwt", `{"_type":"lwt",}`, "", MalformedJSON, "", 0},

		// _type is required and read first.
		{"_type absent", ot("_type", ""), "", MissingField, "_type", 0},
		{"_type null", ot("_type", "null"), "", MissingField, "_type", 0},
		{"_type absent and lat absent", ot("_type", "", "lat", ""), "", MissingField, "_type", 0},
		{"lat absent", ot("lat", ""), "", MissingField, "lat", 0},
		{"lat null", ot("lat", "null"), "", MissingField, "lat", 0},
		{"lon absent", ot("lon", ""), "", MissingField, "lon", 0},
		{"tst absent", ot("tst", ""), "", MissingField, "tst", 0},
		{"tst null", ot("tst", "null"), "", MissingField, "tst", 0},
		{"lat and tst absent", ot("lat", "", "tst", ""), "", MissingField, "lat", 0},
		{"lon absent, topic bad", ot("lon", ""), "owntracks/jane doe/phone", MissingField, "lon", 0},
		{"edgeproc fields do not stand in", `{"_type":"location","courier":"van-3","lat":1,"lon":2,"timestamp_ms":1726308298000}`, "", MissingField, "tst", 0},

		// The courier comes from the topic.
		{"courier not in the pattern", ot(), "owntracks/jane doe/phone", BadCourier, "", 0},
		{"courier empty", ot(), "owntracks//phone", BadCourier, "", 0},
		{"courier 65 chars", ot(), "owntracks/" + strings.Repeat("j", 65) + "/phone", BadCourier, "", 0},
		{"courier 64 chars", ot(), "owntracks/" + strings.Repeat("j", 64) + "/phone", OK, "", 1706856298000},
		{"topic with a level more", ot(), "owntracks/jane/phone/event", BadCourier, "", 0},
		{"topic of another tree", ot(), "fleet/jane/phone", BadCourier, "", 0},
		{"courier bad, lat bad", ot("lat", "91"), "owntracks/jane doe/phone", BadCourier, "", 0},
		{"payload courier ignored", ot("courier", `"x y"`), "", OK, "", 1706856298000},

		{"lat 91", ot("lat", "91"), "", BadCoordinates, "", 0},
		{"lon -180.5", ot("lon", "-180.5"), "", BadCoordinates, "", 0},
		{"lat as a string (apps before 2016)", ot("lat", `"48.856826"`), "", BadCoordinates, "", 0},
		{"lat beyond float64", ot("lat", "1e400"), "", BadCoordinates, "", 0},
		{"lat bad, tst bad", ot("lat", "-91", "tst", "1.5"), "", BadCoordinates, "", 0},

		{"tst with fraction", ot("tst", "1706856298.5"), "", BadTimestamp, "", 0},
		{"tst with exponent", ot("tst", "1.706856298e9"), "", BadTimestamp, "", 0},
		{"tst as a string", ot("tst", `"1706856298"`), "", BadTimestamp, "", 0},
		{"tst zero", ot("tst", "0"), "", BadTimestamp, "", 0},
		{"tst negative", ot("tst", "-1"), "", BadTimestamp, "", 0},
		{"tst 1", ot("tst", "1"), "", OK, "", 1000},
		{"tst 9999-12-31T23:59:59Z", ot("tst", "253402300799"), "", OK, "", 253402300799000},
		{"tst one second later", ot("tst", "253402300800"), "", BadTimestamp, "", 0},
		{"tst in milliseconds beyond 9999", ot("tst", "1706856298000000"), "", BadTimestamp, "", 0},
		{"tst beyond int64", ot("tst", "9223372036854775808"), "", BadTimestamp, "", 0},
		{"tst in milliseconds reads past 9999", ot("tst", "1706856298000"), "", BadTimestamp, "", 0},
	}
	var d Decoder
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := tt.topic
			if tp == "" {
				tp = topic
			}
			var p Position
			got := d.DecodeOwnTracks([]byte(tt.in), tp, otFilter, 0, &p)
			if got != tt.want || p.Missing != tt.missing {
				t.Fatalf("DecodeOwnTracks(%q) = %v, missing %q; want %v, missing %q", tt.in, got, p.Missing, tt.want, tt.missing)
			}
			if got == OK && p.TS != tt.ts {
				t.Errorf("TS = %d, want %d", p.TS, tt.ts)
			}
		})
	}
}

func TestDecodeOwnTracks_Accuracy(t *testing.T) {
	tests := []struct {
		acc  string
		want float64
	}{
		{"", -1}, {"null", -1}, {"0", 0}, {"7.5", 7.5}, {"-1", -1}, {`"65"`, -1}, {"1e400", -1}, {"true", -1},
	}
	var d Decoder
	for _, tt := range tests {
		var p Position
		in := ot("acc", tt.acc, "accuracy_m", "3")
		if r := d.DecodeOwnTracks([]byte(in), "owntracks/a/b", otFilter, 0, &p); r != OK || p.Accuracy != tt.want {
			t.Errorf("acc %q: got %v, accuracy %v; want ok, %v (accuracy_m is not OwnTracks')", tt.acc, r, p.Accuracy, tt.want)
		}
	}
}

func TestDecodeOwnTracks_Ignored(t *testing.T) {
	tests := []struct {
		in   string
		want MessageType
	}{
		{`{"_type":"lwt","tst":1380738247}`, MsgLWT},
		{`{"_type":"transition","wtst":1425042603,"lat":12.34,"lon":44.5,"tst":1427634603,"acc":130,"tid":"JP","event":"enter","desc":"my restaurant","t":"b"}`, MsgTransition},
		{`{"_type":"status","iOS":{"version":"18.2.0","locale":"ca_ES"},"_id":"a1"}`, MsgStatus},
		{`{"_type":"card","tid":"JJ","name":"Jane","face":"iVBORw0KGgo="}`, MsgCard},
		{`{"_type":"waypoint","desc":"Depot","lat":41.98,"lon":2.82,"rad":50,"tst":1385997757,"rid":"f7676c"}`, MsgWaypoint},
		{`{"_type":"waypoints","_creator":"ios","waypoints":[{"_type":"waypoint","desc":"Depot","lat":41.98,"lon":2.82,"rad":50,"tst":1385997757}]}`, MsgWaypoints},
		{`{"_type":"encrypted","data":"tR3s7RrJnOl+yqXxKGBZ0Q=="}`, MsgEncrypted},
		{`{"_type":"beacon","desc":"door","uuid":"E2C56DB5","major":1,"minor":2,"tst":1,"acc":1,"rssi":-60,"prox":1}`, MsgBeacon},
		{`{"_type":"cmd","action":"reportLocation"}`, MsgCmd},
		{`{"_type":"configuration","mode":0,"waypoints":[]}`, MsgConfiguration},
		{`{"_type":"steps","tst":1,"steps":1200,"from":0,"to":1}`, MsgSteps},
		{`{"_type":"request","request":"tour","tour":{}}`, MsgRequest},
		{`{"_type":"\u006cwt"}`, MsgLWT},
		{`{"_type":"msg","title":"Lunch"}`, MsgOther},
		{`{"_type":"LWT"}`, MsgOther},
		{`{"_type":"Location","lat":1,"lon":2,"tst":3}`, MsgOther},
		{`{"_type":""}`, MsgOther},
		{`{"_type":5,"lat":1,"lon":2,"tst":3}`, MsgOther},
		{`{"_type":["location"]}`, MsgOther},
		{`{"_type":"configurations"}`, MsgOther},
		{`{"_type":"lwt\u00e9"}`, MsgOther},
		// A message of another type is ignored whatever else it holds.
		{`{"_type":"lwt","lat":"bad","tst":1.5}`, MsgLWT},
		{`{"_type":"location","_type":"lwt","lat":1,"lon":2,"tst":3}`, MsgLWT},
	}
	var d Decoder
	for _, tt := range tests {
		var p Position
		if r := d.DecodeOwnTracks([]byte(tt.in), "owntracks/jane/phone", otFilter, 0, &p); r != Ignored || p.Type != tt.want {
			t.Errorf("DecodeOwnTracks(%s) = %v, type %v; want ignored, type %v", tt.in, r, p.Type, tt.want)
		}
	}
	var p Position
	if r := d.DecodeOwnTracks([]byte(`{"_type":"lwt","_type":"location","lat":1,"lon":2,"tst":3}`), "owntracks/a/b", otFilter, 0, &p); r != OK {
		t.Errorf("the last _type wins: got %v, want ok", r)
	}
}

// In a replay there is no MQTT topic: the line's own "topic" member is
// read, as OwnTracks' HTTP mode sends it.
func TestDecodeOwnTracks_ReplayTopic(t *testing.T) {
	tests := []struct {
		name, topic string
		level       int
		want        Reason
		courier     string
	}{
		{"user", `"owntracks/van-3/phone"`, 0, OK, "van-3"},
		{"device", `"owntracks/jane/van-3"`, 1, OK, "van-3"},
		{"escaped slashes", `"owntracks\/van-3\/phone"`, 0, OK, "van-3"},
		{"escaped courier", `"owntracks/v\u0061n-3/phone"`, 0, OK, "van-3"},
		{"non-ASCII device, escaped", `"owntracks/van-3/t\u00e8l\/2"`, 0, BadCourier, ""},
		{"non-ASCII device", `"owntracks/van-3/tèl"`, 0, OK, "van-3"},
		{"non-ASCII device and an escape", `"owntracks\/van-3/tèl"`, 0, OK, "van-3"},
		{"absent", ``, 0, BadCourier, ""},
		{"null", `null`, 0, BadCourier, ""},
		{"not a string", `["owntracks/van-3/phone"]`, 0, BadCourier, ""},
		{"other tree", `"fleet/van-3/phone"`, 0, BadCourier, ""},
		{"empty", `""`, 0, BadCourier, ""},
	}
	var d Decoder
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := ot("topic", tt.topic, "arrival_ms", "1706856299000")
			var p Position
			r := d.DecodeOwnTracks([]byte(in), "", otFilter, tt.level, &p)
			if r != tt.want || r == OK && string(p.Courier) != tt.courier {
				t.Fatalf("DecodeOwnTracks(%s) = %v, courier %q; want %v, %q", in, r, p.Courier, tt.want, tt.courier)
			}
			if !p.HasArrival || p.Arrival != 1706856299000 {
				t.Errorf("arrival = %v %d, want 1706856299000", p.HasArrival, p.Arrival)
			}
		})
	}
	// The "non-ASCII device, escaped" topic matched "owntracks/+/+" only
	// as 4 levels: it has an escaped slash.
	var p Position
	if r := d.DecodeOwnTracks([]byte(ot("topic", `"owntracks/van-3/t\u00e8l"`)), "", otFilter, 0, &p); r != OK || string(p.Courier) != "van-3" {
		t.Errorf("non-ASCII escaped device: got %v %q, want ok van-3", r, p.Courier)
	}
	// A live message's topic wins over its payload's.
	if r := d.DecodeOwnTracks([]byte(ot("topic", `"owntracks/x y/phone"`)), "owntracks/van-3/phone", otFilter, 0, &p); r != OK || string(p.Courier) != "van-3" {
		t.Errorf("live topic: got %v %q, want ok van-3", r, p.Courier)
	}
}

func TestTopicLevel(t *testing.T) {
	tests := []struct {
		filter, topic string
		n             int
		want          string
		wantOK        bool
	}{
		{"owntracks/+/+", "owntracks/jane/phone", 0, "jane", true},
		{"owntracks/+/+", "owntracks/jane/phone", 1, "phone", true},
		{"owntracks/+/+", "owntracks/jane/phone", 2, "", false},
		{"owntracks/+/+", "owntracks/jane/phone", -1, "phone", true},
		{"owntracks/+/+", "owntracks/jane", 0, "", false},
		{"owntracks/+/+", "owntracks/jane/phone/event", 0, "", false},
		{"owntracks/+/+/#", "owntracks/jane/phone/event", 1, "phone", true},
		{"owntracks/+/phone", "owntracks/jane/phone", 0, "jane", true},
		{"owntracks/+/phone", "owntracks/jane/phone", 1, "", false},
		{"$share/g/owntracks/+/+", "owntracks/jane/phone", 1, "phone", true},
		{"+/+", "$SYS/x", 0, "", false},
	}
	for _, tt := range tests {
		got, ok := TopicLevel(tt.filter, tt.topic, tt.n)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("TopicLevel(%q, %q, %d) = %q, %v; want %q, %v", tt.filter, tt.topic, tt.n, got, ok, tt.want, tt.wantOK)
		}
		gotB, okB := TopicLevel(tt.filter, []byte(tt.topic), tt.n)
		if string(gotB) != tt.want || okB != tt.wantOK {
			t.Errorf("TopicLevel(%q, []byte(%q), %d) = %q, %v; want %q, %v", tt.filter, tt.topic, tt.n, gotB, okB, tt.want, tt.wantOK)
		}
	}
}

func TestDecode_MissingNamesTheField(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{}`, "courier"},
		{`{"lat":1,"lon":2,"timestamp_ms":3}`, "courier"},
		{`{"courier":"a","lon":2,"timestamp_ms":3}`, "lat"},
		{`{"courier":"a","lat":1,"lon":null}`, "lon"},
		{`{"courier":5,"lat":1,"lon":2}`, "timestamp_ms"},
		{`{"courier":"a","lat":1,"lon":2,"tst":3}`, "timestamp_ms"},
	}
	var d Decoder
	for _, tt := range tests {
		var p Position
		if r := d.Decode([]byte(tt.in), &p); r != MissingField || p.Missing != tt.want {
			t.Errorf("Decode(%s) = %v, missing %q; want missing_field, %q", tt.in, r, p.Missing, tt.want)
		}
	}
	var p Position
	if r := d.Decode([]byte(obj("lat", "91")), &p); r != BadCoordinates || p.Missing != "" {
		t.Errorf("bad_coordinates: Missing = %q, want empty", p.Missing)
	}
}

// The per-position path allocates nothing, live or replayed.
func TestDecodeOwnTracks_NoAllocs(t *testing.T) {
	var d Decoder
	var p Position
	ios, android := []byte(otIOS), []byte(ot("topic", `"owntracks\/van-3\/phone"`, "arrival_ms", "1"))
	lwt := []byte(`{"_type":"lwt","tst":1380738247}`)
	n := testing.AllocsPerRun(200, func() {
		if d.DecodeOwnTracks(ios, "owntracks/van-3/iphone", otFilter, 1, &p) != OK ||
			d.DecodeOwnTracks(android, "", otFilter, 0, &p) != OK ||
			d.DecodeOwnTracks(lwt, "owntracks/van-3/iphone", otFilter, 0, &p) != Ignored {
			t.Fatal("unexpected reason")
		}
	})
	if n != 0 {
		t.Errorf("DecodeOwnTracks allocates %v times per run, want 0", n)
	}
}
