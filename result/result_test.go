package result

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRecord_KeysAndJSON(t *testing.T) {
	cases := []struct {
		r    Record
		key  string
		want map[string]any
	}{
		{Record{Type: Distance, Market: "girona", Courier: "van-3", Start: 60000, End: 360000, DistanceM: 12.5, Positions: 3, Stopped: true, Cell: 0x89394460cafffff, EmittedAt: 7},
			"distance|girona|van-3|60000",
			map[string]any{"window_start_ms": 60000.0, "window_end_ms": 360000.0, "distance_m": 12.5, "positions": 3.0, "stopped": true, "cell": "89394460cafffff", "emitted_at_ms": 7.0}},
		{Record{Type: Distance, Market: "girona", Courier: "van-3", Start: 60000, End: 360000, DistanceM: 0, Positions: 1, InsufficientEvidence: true, Cell: 0x89394460cafffff},
			"distance|girona|van-3|60000",
			map[string]any{"distance_m": 0.0, "positions": 1.0, "stopped": false, "insufficient_evidence": true}},
		{Record{Type: NoSignal, Market: "girona", Courier: "van-3", Start: 10, End: 20, Lat: 41.5, Lon: 2.25, EndOfInput: true},
			"no_signal|girona|van-3|10",
			map[string]any{"session_start_ms": 10.0, "last_seen_ms": 20.0, "last_lat": 41.5, "last_lon": 2.25, "end_of_input": true}},
		{Record{Type: SignalRestored, Market: "girona", Courier: "van-3", SilentFrom: 20, RestoredAt: 95},
			"signal_restored|girona|van-3|20",
			map[string]any{"silent_from_ms": 20.0, "restored_at_ms": 95.0, "gap_ms": 75.0}},
		{Record{Type: Late, Market: "girona", Courier: "van-3", Operator: OpSession, TS: 5, Watermark: 50},
			"late|girona|van-3|5|session",
			map[string]any{"operator": "session", "timestamp_ms": 5.0, "watermark_ms": 50.0, "lateness_ms": 45.0}},
		{Record{Type: LeftArea, Market: "girona", Courier: "van-3", TS: 1726315265000, Lat: 41.80, Lon: 2.5, Cell: 0x89394460cafffff, EmittedAt: 3},
			"left_area|girona|van-3|1726315265000",
			map[string]any{"timestamp_ms": 1726315265000.0, "lat": 41.8, "lon": 2.5, "cell": "89394460cafffff", "emitted_at_ms": 3.0}},
		{Record{Type: EnteredArea, Market: "girona", Courier: "van-3", TS: 5, Lat: 41.9, Lon: 2.8, Cell: 0x89394460cafffff},
			"entered_area|girona|van-3|5",
			map[string]any{"timestamp_ms": 5.0, "lat": 41.9, "lon": 2.8}},
		{Record{Type: DeadZone, Market: "girona", Start: 3600000, End: 7200000, Cell: 0x88394460cbfffff, EmittedAt: 9,
			Zone: &Zone{Warnings: 5, Couriers: 3, Restored: 4, SilenceMs: 400000, LongestMs: 190000}},
			"dead_zone|girona|88394460cbfffff|3600000",
			map[string]any{"window_start_ms": 3600000.0, "window_end_ms": 7200000.0, "cell": "88394460cbfffff", "warnings": 5.0,
				"couriers": 3.0, "restored": 4.0, "open": 1.0, "silence_ms": 400000.0, "longest_silence_ms": 190000.0, "emitted_at_ms": 9.0}},
		{Record{Type: Rejected, Market: "girona", Reason: "malformed_json", Raw: []byte("a\"b\xff<"), Line: 9},
			"rejected|girona|9",
			map[string]any{"reason": "malformed_json", "raw": "a\"b\ufffd<", "line": 9.0}},
	}
	for _, c := range cases {
		t.Run(c.r.Type.String(), func(t *testing.T) {
			if got := c.r.Key(); got != c.key {
				t.Fatalf("key: got %q, want %q", got, c.key)
			}
			var m map[string]any
			if err := json.Unmarshal(c.r.AppendJSON(nil), &m); err != nil {
				t.Fatalf("not JSON: %v: %s", err, c.r.AppendJSON(nil))
			}
			if m["type"] != c.r.Type.String() || m["market"] != "girona" || m["key"] != c.key {
				t.Fatalf("common fields: got %v", m)
			}
			for k, v := range c.want {
				if m[k] != v {
					t.Errorf("%s: got %v, want %v", k, m[k], v)
				}
			}
			if _, ok := m["end_of_input"]; ok && !c.r.EndOfInput {
				t.Errorf("end_of_input present though false")
			}
			if _, ok := m["insufficient_evidence"]; ok && !c.r.InsufficientEvidence {
				t.Errorf("insufficient_evidence present though false")
			}
		})
	}
}

func TestTruncateRaw(t *testing.T) {
	if got := TruncateRaw([]byte("short")); string(got) != "short" {
		t.Fatalf("got %q", got)
	}
	// A 3-byte rune straddling the 1 KiB limit is cut before it.
	p := []byte(strings.Repeat("a", RawLimit-1) + "€" + "tail")
	got := TruncateRaw(p)
	if len(got) != RawLimit-1 || !utf8.Valid(got) {
		t.Fatalf("got %d bytes (valid UTF-8 %v), want %d", len(got), utf8.Valid(got), RawLimit-1)
	}
}

// TestRecord_KeyAllocatesOnce guards the per-result cost: Key is called for
// every published result, as its Nats-Msg-Id.
func TestRecord_KeyAllocatesOnce(t *testing.T) {
	r := Record{Type: Distance, Market: "girona", Courier: "girona-c0001", Start: 1796140646288}
	if got, want := r.Key(), string(r.AppendKey(nil)); got != want {
		t.Fatalf("Key %q, AppendKey %q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { _ = r.Key() }); n > 1 {
		t.Errorf("Key makes %v allocations, want 1", n)
	}
}
