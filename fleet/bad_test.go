package fleet

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"
)

var intLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// classify is a reference implementation of the contract's rejection
// reasons (§2, in the contract's order, without the topic and clock checks);
// "" means the payload is a valid position.
func classify(b []byte) string {
	if len(b) > maxPayload {
		return ReasonTooLarge
	}
	t := bytes.TrimSpace(b)
	if !json.Valid(t) || len(t) == 0 || t[0] != '{' {
		return ReasonMalformedJSON
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(t, &m); err != nil {
		return ReasonMalformedJSON
	}
	for _, k := range []string{"courier", "lat", "lon", "timestamp_ms"} {
		if v, ok := m[k]; !ok || string(v) == "null" {
			return ReasonMissingField
		}
	}
	var c string
	if json.Unmarshal(m["courier"], &c) != nil || !idPattern.MatchString(c) {
		return ReasonBadCourier
	}
	for k, lim := range map[string]float64{"lat": 90, "lon": 180} {
		raw := string(m[k])
		if raw == "" || raw[0] == '"' {
			return ReasonBadCoords
		}
		v, err := strconv.ParseFloat(raw, 64)
		if err != nil || math.IsInf(v, 0) || math.Abs(v) > lim {
			return ReasonBadCoords
		}
	}
	ts := string(m["timestamp_ms"])
	if !intLiteral.MatchString(ts) {
		return ReasonBadTimestamp
	}
	if v, err := strconv.ParseInt(ts, 10, 64); err != nil || v <= 0 {
		return ReasonBadTimestamp
	}
	return ""
}

func TestClassify_Reference(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"courier":"van-3","lat":41.9794,"lon":2.8214,"timestamp_ms":1726308298000}`, ""},
		{`{"courier":"van-3","lat":41.9794,"lon":2.8214,"timestamp_ms":1726308298000.0}`, ReasonBadTimestamp},
		{`null`, ReasonMalformedJSON},
		{`{"courier":"van-3","lat":91,"lon":2.8214,"timestamp_ms":1}`, ReasonBadCoords},
		{`{"courier":null,"lat":91,"lon":2.8214,"timestamp_ms":1}`, ReasonMissingField},
	}
	for _, tt := range tests {
		if got := classify([]byte(tt.in)); got != tt.want {
			t.Errorf("classify(%s) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestBadKinds builds every kind many times (its random variants) and checks
// the contract reason it gets.
func TestBadKinds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	e := Event{Courier: "c0042", Lat: 41.979412, Lon: 2.821377, TS: 1767614400123, Accuracy: 12.5}
	if got := classify(appendPosition(nil, e)); got != "" {
		t.Fatalf("the valid position is rejected as %q", got)
	}
	for i, k := range badKinds {
		for range 50 {
			b := k.build(nil, e, r)
			if got := classify(b); got != k.reason {
				t.Errorf("kind %d: %s is rejected as %q, want %q", i, b, got, k.reason)
			}
			if bytes.IndexByte(b, '\n') >= 0 || len(bytes.TrimSpace(b)) == 0 {
				t.Errorf("kind %d: %q is blank or holds a newline", i, b)
			}
		}
	}
}

func TestFleet_BadPayloads(t *testing.T) {
	evs := mustCollect(t, Config{Couriers: 40, Duration: time.Hour, Seed: 8, BadRate: 0.05})
	bad, good := 0, 0
	reasons := map[string]int{}
	var line []byte
	for _, e := range evs {
		if e.Raw == nil {
			good++
			if e.Reject != "" {
				t.Errorf("valid event with Reject %q", e.Reject)
			}
			continue
		}
		bad++
		reasons[e.Reject]++
		if got := classify(e.Raw); got != e.Reject {
			t.Errorf("%s is rejected as %q, want %q", e.Raw, got, e.Reject)
		}
		// A replay reads arrival_ms from any small JSON object line.
		line = AppendJSON(line[:0], e, true)
		var m map[string]json.RawMessage
		if len(line) <= maxPayload && json.Unmarshal(line, &m) == nil {
			if got := string(m["arrival_ms"]); got != strconv.FormatInt(e.Arrival, 10) {
				t.Errorf("replay line %s: arrival_ms = %s, want %d", line, got, e.Arrival)
			}
		}
	}
	if frac := float64(bad) / float64(good); math.Abs(frac-0.05) > 0.006 {
		t.Errorf("bad payloads per position = %.4f, want 0.05 ± 0.006", frac)
	}
	for _, want := range []string{ReasonTooLarge, ReasonMalformedJSON, ReasonMissingField, ReasonBadCourier, ReasonBadCoords, ReasonBadTimestamp} {
		if reasons[want] == 0 {
			t.Errorf("no bad payload with reason %q in %v", want, reasons)
		}
	}
}
