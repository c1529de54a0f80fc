package engine

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/km0/edgeproc/position"
	"github.com/km0/edgeproc/result"
)

func ownTracksConfig() Config {
	c := liveConfig()
	c.Topic, c.Format = "owntracks/+/+", position.FormatOwnTracks
	return c
}

// otInput is an OwnTracks location of user on device, at ts (ms, a whole
// second), arrived at arrival.
func otInput(user, device string, ts, arrival int64) *Input {
	return &Input{
		Payload: []byte(fmt.Sprintf(`{"_type":"location","acc":12,"batt":64,"conn":"m","lat":41,"lon":2,"tid":"v3","tst":%d,"vel":0}`, ts/1000)),
		Topic:   "owntracks/" + user + "/" + device, Arrival: arrival, HasArrival: true,
	}
}

func TestEngine_OwnTracksCourierLevel(t *testing.T) {
	for _, tt := range []struct {
		level int
		want  string
	}{{0, "jane"}, {1, "phone"}} {
		var c collector
		cfg := ownTracksConfig()
		cfg.CourierLevel = tt.level
		e := New(cfg, c.sink)
		e.Push(otInput("jane", "phone", t0, t0))
		e.EndOfInput()
		ns := c.ofType(result.NoSignal)
		if len(ns) != 1 || ns[0].Courier != tt.want || ns[0].End != t0 {
			t.Errorf("level %d: got %+v, want one no_signal of %s last seen at %d", tt.level, ns, tt.want, t0)
		}
		if rj := c.ofType(result.Rejected); len(rj) != 0 {
			t.Errorf("level %d: got rejections %+v, want none (no courier_mismatch in this format)", tt.level, rj)
		}
	}
}

// An OwnTracks message of another type is counted by type, is not
// dead-lettered, and is an arrival for the idle rule.
func TestEngine_OwnTracksIgnored(t *testing.T) {
	var c collector
	e := New(ownTracksConfig(), c.sink)
	e.Push(otInput("jane", "phone", t0, t0))
	lwt := func(arrival int64) *Input {
		return &Input{Payload: []byte(`{"_type":"lwt","tst":1380738247}`), Topic: "owntracks/jane/phone", Arrival: arrival, HasArrival: true}
	}
	// Without them the idle rule would close the session at
	// t0+gap+delay = t0+70s (TestEngine_TickAdvancesIdleWatermark);
	// arrivals at t0+50s restart the idle clock: nothing advances before
	// t0+50s+idle_timeout = t0+80s.
	e.Push(lwt(t0 + 50_000))
	e.Push(&Input{Payload: []byte(`{"_type":"transition","event":"enter","lat":1,"lon":2,"tst":5}`), Topic: "owntracks/jane/phone/event", Arrival: t0 + 50_000, HasArrival: true})
	e.Push(&Input{Payload: []byte(`{"_type":"msg"}`), Topic: "owntracks/jane/phone", Arrival: t0 + 50_000, HasArrival: true})
	e.Tick(t0 + 79_999)
	e.Sync()
	if n := len(c.ofType(result.NoSignal)); n != 0 {
		t.Fatalf("got %d no_signal before the idle timeout after the last arrival, want 0", n)
	}
	if rj := c.ofType(result.Rejected); len(rj) != 0 {
		t.Fatalf("got %+v, want no rejected record for ignored messages", rj)
	}
	st := e.Stats()
	want := map[string]int64{"lwt": 1, "transition": 1, "other": 1}
	for _, typ := range position.MessageTypes {
		if st.Ignored[typ.String()] != want[typ.String()] {
			t.Errorf("Ignored[%s] = %d, want %d", typ, st.Ignored[typ.String()], want[typ.String()])
		}
	}
	if len(st.Ignored) != len(position.MessageTypes) {
		t.Errorf("Ignored has %d types, want every one of %d", len(st.Ignored), len(position.MessageTypes))
	}
	if st.Received != 4 || st.Accepted != 1 || st.Results["rejected"] != 0 {
		t.Errorf("received %d accepted %d rejected %d; want 4, 1, 0", st.Received, st.Accepted, st.Results["rejected"])
	}
	e.Tick(t0 + 80_000) // idle: wm = t0 + (80s - 0) - delay = t0+70s >= t0+gap
	e.Sync()
	if n := len(c.ofType(result.NoSignal)); n != 1 {
		t.Errorf("got %d no_signal after the idle timeout, want 1", n)
	}
	e.Stop()
}

func TestEngine_EdgeprocFormatCountsNoIgnored(t *testing.T) {
	e := New(liveConfig(), func([]result.Record) {})
	e.Push(&Input{Payload: []byte(`{"_type":"lwt"}`), Topic: "km0/m/positions/a", Arrival: t0, HasArrival: true})
	e.Sync()
	st := e.Stats()
	if len(st.Ignored) != 0 || st.Rejected["missing_field"] != 1 {
		t.Errorf("edgeproc format: ignored %v, missing_field %d; want none, 1", st.Ignored, st.Rejected["missing_field"])
	}
	e.Stop()
}

func TestEngine_MissingFieldNamed(t *testing.T) {
	tests := []struct {
		cfg     Config
		payload string
		want    string
	}{
		{liveConfig(), `{"lat":1,"lon":2}`, "courier"},
		{liveConfig(), `{"courier":"a","lat":1,"lon":2,"timestamp_ms":null}`, "timestamp_ms"},
		{ownTracksConfig(), `{"lat":1,"lon":2,"tst":3}`, "_type"},
		{ownTracksConfig(), `{"_type":"location","lat":1,"tst":3}`, "lon"},
	}
	for _, tt := range tests {
		var c collector
		e := New(tt.cfg, c.sink)
		e.Push(&Input{Payload: []byte(tt.payload), Topic: "owntracks/a/b", Arrival: t0, HasArrival: true})
		e.Sync()
		rj := c.ofType(result.Rejected)
		if len(rj) != 1 || rj[0].Reason != "missing_field" || rj[0].Field != tt.want {
			t.Errorf("%s: got %+v, want one missing_field naming %s", tt.payload, rj, tt.want)
		} else if js := string(rj[0].AppendJSON(nil)); !strings.Contains(js, `"reason":"missing_field","field":"`+tt.want+`"`) {
			t.Errorf("%s: JSON %s does not name the field", tt.payload, js)
		}
		e.Stop()
	}
}

// syncBuffer is a log destination written from the shards' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A late position whose timestamp_ms reads as seconds is counted and
// hinted at in the log (rate-limited); a late one in milliseconds is not.
func TestEngine_SecondsHint(t *testing.T) {
	var logged syncBuffer
	cfg := liveConfig()
	cfg.Log = slog.New(slog.NewTextHandler(&logged, nil))
	var c collector
	e := New(cfg, c.sink)
	e.Push(input("a", t0, t0))
	e.Push(input("b", t0-600_000, t0)) // late, in milliseconds
	e.Push(input("c", t0/1000, t0))    // late, in seconds
	e.Push(input("d", t0/1000+5, t0))  // again: counted, not logged
	e.Sync()
	if st := e.Stats(); st.SecondsLate != 2 {
		t.Errorf("SecondsLate = %d, want 2", st.SecondsLate)
	}
	if n := len(c.ofType(result.Late)); n != 6 {
		t.Errorf("got %d late records, want 6 (three positions, two operators)", n)
	}
	out := logged.String()
	// c and d may sit on different shards: either is logged first.
	named := strings.Contains(out, fmt.Sprintf("courier=c timestamp_ms=%d", t0/1000)) || strings.Contains(out, fmt.Sprintf("courier=d timestamp_ms=%d", t0/1000+5))
	if strings.Count(out, "timestamp_ms looks like seconds, not milliseconds") != 1 || !named {
		t.Errorf("log = %q, want one seconds hint naming courier c or d and its timestamp_ms", out)
	}
	e.Stop()
}
