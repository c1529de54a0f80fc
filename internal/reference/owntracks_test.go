package reference

import (
	"fmt"
	"testing"
)

// otParams is baseParams reading OwnTracks lines with the USER level of
// owntracks/+/+ as the courier.
func otParams() Params {
	p := baseParams()
	p.Format, p.Topic = "owntracks", "owntracks/+/+"
	return p
}

// otLine is an OwnTracks location line as the Android app sends it, with
// its topic, at tst seconds, arrived at arrival (< 0: no arrival_ms).
func otLine(user, device string, tst int64, p [2]float64, arrival int64) string {
	s := fmt.Sprintf(`{"_type":"location","_id":"5e9f1a2b","acc":12,"batt":64,"bs":1,"conn":"m","created_at":%d,"lat":%v,"lon":%v,"t":"u","tid":"v3","tst":%d,"vel":0,"topic":"owntracks/%s/%s"`,
		tst+1, p[0], p[1], tst, user, device)
	if arrival >= 0 {
		s += fmt.Sprintf(`,"arrival_ms":%d`, arrival)
	}
	return s + "}"
}

func TestRun_OwnTracks(t *testing.T) {
	device := func() Params { p := otParams(); p.CourierLevel = 1; return p }
	shared := func() Params { p := otParams(); p.Topic = "$share/g/owntracks/+/+"; return p }
	lwt := `{"_type":"lwt","tst":1380738247,"topic":"owntracks/jane/phone","arrival_ms":%d}`
	cases := []boundaryCase{
		{
			name: "tst is seconds; the courier is the USER level", params: otParams,
			lines: []string{otLine("jane", "phone", 600, ptA, -1)},
			types: []string{"rejected", "no_signal"},
			want:  []map[string]any{noSigRec("jane", 600_000, 600_000, ptA, 0, true)},
		},
		{
			name: "owntracks_courier device", params: device,
			lines: []string{otLine("jane", "phone", 600, ptA, -1)},
			types: []string{"rejected", "no_signal"},
			want:  []map[string]any{noSigRec("phone", 600_000, 600_000, ptA, 0, true)},
		},
		{
			name: "a shared subscription", params: shared,
			lines: []string{otLine("jane", "phone", 600, ptA, -1)},
			types: []string{"rejected", "no_signal"},
			want:  []map[string]any{noSigRec("jane", 600_000, 600_000, ptA, 0, true)},
		},
		{
			name: "other types are neither positions nor rejections", params: otParams,
			lines: []string{
				`{"_type":"lwt","tst":1380738247}`,
				`{"_type":"transition","event":"leave","lat":1,"lon":2,"tst":600,"topic":"owntracks/jane/phone/event"}`,
				`{"_type":"card","tid":"JJ","lat":"bad"}`,
				`{"_type":7}`,
			},
			types: []string{"rejected", "no_signal"},
			want:  nil,
		},
		{
			// Idle timeout 30 s, delay 0, gap 60 s: after the position at
			// 600 s (arrived at 600 s), a line at 669.999 s applies the
			// idle rule (silent since 600 s) and closes the session
			// before the end of input...
			name:   "without an ignored message, the idle rule closes the session",
			params: func() Params { p := otParams(); p.IdleTimeoutMs = 30_000; return p },
			lines:  []string{otLine("jane", "phone", 600, ptA, 600_000), tick(669_999)},
			types:  []string{"no_signal"},
			want:   []map[string]any{noSigRec("jane", 600_000, 600_000, ptA, 669_999, false)},
		},
		{
			// ... but an lwt arrived at 640 s: silent for 29.999 s only,
			// nothing advances and the session closes with the input.
			name:   "an ignored message is an arrival for the idle rule",
			params: func() Params { p := otParams(); p.IdleTimeoutMs = 30_000; return p },
			lines:  []string{otLine("jane", "phone", 600, ptA, 600_000), fmt.Sprintf(lwt, 640_000), tick(669_999)},
			types:  []string{"no_signal"},
			want:   []map[string]any{noSigRec("jane", 600_000, 600_000, ptA, 669_999, true)},
		},
		{
			name: "rejections in order, on OwnTracks' fields", params: otParams,
			lines: []string{
				`{"lat":1,"lon":2,"tst":600,"topic":"owntracks/jane/phone"}`,
				`{"_type":null}`,
				`{"_type":"location","lon":2,"tst":600}`,
				`{"_type":"location","lat":1,"lon":2,"topic":"owntracks/jane/phone"}`,
				`{"_type":"location","lat":91,"lon":2,"tst":600,"topic":"owntracks/jane doe/phone"}`,
				`{"_type":"location","lat":91,"lon":2,"tst":600}`,
				`{"_type":"location","lat":91,"lon":2,"tst":600,"topic":"owntracks/jane/phone/event"}`,
				`{"_type":"location","lat":"41.9","lon":2,"tst":1.5,"topic":"owntracks/jane/phone"}`,
				`{"_type":"location","lat":1,"lon":2,"tst":253402300800,"topic":"owntracks/jane/phone"}`,
				`{"_type":"location","lat":1,"lon":2,"tst":"600","topic":"owntracks/jane/phone"}`,
			},
			types: []string{"rejected"},
			want: []map[string]any{
				missRec(1, "_type", `{"lat":1,"lon":2,"tst":600,"topic":"owntracks/jane/phone"}`, 0),
				missRec(2, "_type", `{"_type":null}`, 0),
				missRec(3, "lat", `{"_type":"location","lon":2,"tst":600}`, 0),
				missRec(4, "tst", `{"_type":"location","lat":1,"lon":2,"topic":"owntracks/jane/phone"}`, 0),
				rejRec(5, "bad_courier", `{"_type":"location","lat":91,"lon":2,"tst":600,"topic":"owntracks/jane doe/phone"}`, 0),
				rejRec(6, "bad_courier", `{"_type":"location","lat":91,"lon":2,"tst":600}`, 0),
				rejRec(7, "bad_courier", `{"_type":"location","lat":91,"lon":2,"tst":600,"topic":"owntracks/jane/phone/event"}`, 0),
				rejRec(8, "bad_coordinates", `{"_type":"location","lat":"41.9","lon":2,"tst":1.5,"topic":"owntracks/jane/phone"}`, 0),
				rejRec(9, "bad_timestamp", `{"_type":"location","lat":1,"lon":2,"tst":253402300800,"topic":"owntracks/jane/phone"}`, 0),
				rejRec(10, "bad_timestamp", `{"_type":"location","lat":1,"lon":2,"tst":"600","topic":"owntracks/jane/phone"}`, 0),
			},
		},
		{
			name: "the largest tst", params: otParams,
			lines: []string{otLine("jane", "phone", 253402300799, ptA, -1)},
			types: []string{"rejected", "no_signal"},
			want:  []map[string]any{noSigRec("jane", 253402300799_000, 253402300799_000, ptA, 0, true)},
		},
	}
	runBoundaryCases(t, cases)
}

func TestTopicLevel(t *testing.T) {
	tests := []struct {
		filter, topic string
		n             int
		want          string
		ok            bool
	}{
		{"owntracks/+/+", "owntracks/jane/phone", 0, "jane", true},
		{"owntracks/+/+", "owntracks/jane/phone", 1, "phone", true},
		{"owntracks/+/+", "owntracks/jane", 0, "", false},
		{"owntracks/+/+", "owntracks/jane/phone/x", 0, "", false},
		{"owntracks/+/+/#", "owntracks/jane/phone", 1, "phone", true},
		{"owntracks/+/+/#", "owntracks/jane/phone/a/b", 0, "jane", true},
		{"owntracks/#/+", "owntracks/jane/phone", 0, "", false},
		{"+/+/+", "$SYS/a/b", 0, "", false},
		{"$share/g/owntracks/+/+", "owntracks/jane/phone", 1, "phone", true},
		{"$share/g", "g", 0, "", false},
	}
	for _, tt := range tests {
		if got, ok := topicLevel(tt.filter, tt.topic, tt.n); got != tt.want || ok != tt.ok {
			t.Errorf("topicLevel(%q, %q, %d) = %q, %v; want %q, %v", tt.filter, tt.topic, tt.n, got, ok, tt.want, tt.ok)
		}
	}
}
