package position

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
)

// referenceOwnTracks decodes in with encoding/json and the contract's
// OwnTracks rules (§2 Input formats), as plainly as possible, to check
// DecodeOwnTracks against. topic "" reads the payload's "topic" member.
func referenceOwnTracks(in []byte, topic, filter string, level int) (Reason, Position) {
	m, p, reason := referenceObject(in)
	if m == nil {
		return reason, p
	}
	floatOf := func(raw json.RawMessage) (float64, bool) {
		if !rawIsNum(raw) {
			return 0, false
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		return f, (err == nil || strings.Contains(err.Error(), "range")) && !math.IsInf(f, 0) && !math.IsNaN(f)
	}
	if raw, ok := m["_type"]; !ok || string(raw) == "null" {
		p.Missing = "_type"
		return MissingField, p
	}
	var typ any
	_ = json.Unmarshal(m["_type"], &typ)
	if typ != "location" {
		p.Type = MsgOther
		for _, t := range MessageTypes {
			if typ == t.String() && t != MsgOther {
				p.Type = t
			}
		}
		return Ignored, p
	}
	for _, k := range []string{"lat", "lon", "tst"} {
		if raw, ok := m[k]; !ok || string(raw) == "null" {
			p.Missing = k
			return MissingField, p
		}
	}
	if topic == "" {
		if json.Unmarshal(m["topic"], &topic) != nil {
			topic = ""
		}
	}
	courier, ok := splitLevel(filter, topic, level)
	if !ok || !ValidCourier([]byte(courier)) {
		return BadCourier, p
	}
	p.Courier = []byte(courier)
	if p.Lat, ok = floatOf(m["lat"]); !ok || p.Lat < -90 || p.Lat > 90 {
		return BadCoordinates, p
	}
	if p.Lon, ok = floatOf(m["lon"]); !ok || p.Lon < -180 || p.Lon > 180 {
		return BadCoordinates, p
	}
	tst, ok := rawInt(m["tst"])
	if !ok || tst <= 0 || tst > 253402300799 {
		return BadTimestamp, p
	}
	p.TS = tst * 1000
	if a, ok := floatOf(m["acc"]); ok && a >= 0 {
		p.Accuracy = a
	}
	return OK, p
}

// splitLevel is the fuzz reference's topic matcher for filters of plain
// levels and '+' (no '#', no $share): the level of the level-th '+'.
func splitLevel(filter, topic string, level int) (string, bool) {
	fl, tl := strings.Split(filter, "/"), strings.Split(topic, "/")
	if len(fl) != len(tl) || strings.HasPrefix(topic, "$") && strings.HasPrefix(filter, "+") {
		return "", false
	}
	plus, got, found := 0, "", false
	for i := range fl {
		switch {
		case fl[i] == "+":
			if plus == level {
				got, found = tl[i], true
			}
			plus++
		case fl[i] != tl[i]:
			return "", false
		}
	}
	return got, found
}

var otFuzzSeeds = []string{
	otIOS, otAndroid, otPOI, otMinimal,
	`{"_type":"lwt","tst":1380738247}`,
	`{"_type":"transition","lat":12.34,"lon":44.5,"tst":1427634603,"event":"enter"}`,
	`{"_type":"\u006cocation","lat":1,"lon":2,"tst":3,"topic":"owntracks\/a\/b"}`,
	`{"_type":"location","lat":1,"lon":2,"tst":253402300800,"topic":"owntracks/a/b","arrival_ms":5}`,
	`{"_type":"location","lat":"1","lon":2,"tst":1.5,"acc":-0}`,
	`{"_type":null,"lat":1}`,
	`{"_type":5}`,
	`{"lat":1,"lon":2,"tst":3}`,
	`{"_type":"location","topic":"owntracks/t\u00e8l/b","lat":1,"lon":2,"tst":3}`,
	`[]`,
	``,
}

func checkOwnTracks(t *testing.T, in []byte, topic string, level int) {
	t.Helper()
	var d Decoder
	var got Position
	orig := bytes.Clone(in)
	r := d.DecodeOwnTracks(in, topic, otFilter, level, &got)
	if !bytes.Equal(in, orig) {
		t.Fatalf("DecodeOwnTracks modified its input %q", orig)
	}
	wantR, want := referenceOwnTracks(in, topic, otFilter, level)
	if r != wantR || got.Missing != want.Missing || got.Type != want.Type {
		t.Fatalf("DecodeOwnTracks(%q, topic %q, level %d) = %v, missing %q, type %v; want %v, %q, %v (encoding/json reference)",
			in, topic, level, r, got.Missing, got.Type, wantR, want.Missing, want.Type)
	}
	if got.HasArrival != want.HasArrival || got.Arrival != want.Arrival {
		t.Fatalf("DecodeOwnTracks(%q): HasArrival, Arrival = %v, %d; want %v, %d", in, got.HasArrival, got.Arrival, want.HasArrival, want.Arrival)
	}
	if r == OK && !samePosition(got, want) {
		t.Fatalf("DecodeOwnTracks(%q):\ngot  %+v (courier %q)\nwant %+v (courier %q)", in, got, got.Courier, want, want.Courier)
	}
}

func TestDecodeOwnTracks_MatchesReference(t *testing.T) {
	for _, s := range otFuzzSeeds {
		for _, topic := range []string{"", "owntracks/van-3/phone", "owntracks/a b/c", "owntracks/x"} {
			checkOwnTracks(t, []byte(s), topic, 0)
			checkOwnTracks(t, []byte(s), topic, 1)
		}
	}
}

// FuzzDecodeOwnTracks checks DecodeOwnTracks against encoding/json on any
// payload and topic (a replay line's when the topic is empty), at both
// courier levels.
func FuzzDecodeOwnTracks(f *testing.F) {
	for _, s := range otFuzzSeeds {
		f.Add([]byte(s), "", false)
		f.Add([]byte(s), "owntracks/van-3/phone", true)
	}
	f.Fuzz(func(t *testing.T, in []byte, topic string, device bool) {
		level := 0
		if device {
			level = 1
		}
		checkOwnTracks(t, in, topic, level)
	})
}
