package partition

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/internal/oracle"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/position"
)

// oddLevels are topic levels a phone may publish under: courier ids and
// names that are none (contract §2: 1-64 of [A-Za-z0-9._:-]).
var oddLevels = []string{
	"van-3", "jane.doe", "a.b.c", "bike:7", "Z-9_x", ".", "..", strings.Repeat("x", 64),
	"jane doe", "tab\tuser", "new\nline", "del\x7f", "a*b", "*", ">", "a>", "_tick", "ünïcödé", "東京",
	"x/20", "50%", "a/2F", strings.Repeat("y", 65), strings.Repeat("z", 300), strings.Repeat("é", 40),
}

// discard is a logger for parts built by hand.
var discard = slog.New(slog.DiscardHandler)

// bareRelay is the relay of a runner of cfg that is neither set up nor
// started: for its subjects (subjectOf).
func bareRelay(cfg config.Config) *relay {
	return newRelay(&Runner{env: env{cfg: cfg, log: discard}, lease: &relayLease{}})
}

// subjectOf is the subject a position on topic would have alone, as the
// gateway stores it: its courier's token in its partition (route). The
// relay stores it in its partition's batch under that token.
func (l *relay) subjectOf(topic string) string {
	part, token := l.route(topic)
	return l.prefix + l.numbers[part] + l.suffix + token
}

// validToken reports why tok is not one literal token of a NATS subject
// that edgeproc may write, or "".
func validToken(tok string) string {
	switch {
	case tok == "":
		return "empty"
	case len(tok) > maxToken:
		return fmt.Sprintf("%d bytes, more than %d", len(tok), maxToken)
	case strings.ContainsAny(tok, ".*>"):
		return "a '.', '*' or '>'"
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] >= 0x7f {
			return fmt.Sprintf("byte %#x", tok[i])
		}
	}
	return ""
}

// TestToken_RoundTrip: a topic level becomes one valid subject token
// (nothing that splits it, no wildcard, no space or control character,
// printable ASCII, bounded), a courier id's token is the gateway's ('.'
// as "//", nothing else changed), and the owner reads the level back from
// the subject: all of it, the first maxLevel bytes of a longer one, and
// "/" for the empty one (both are no courier id).
func TestToken_RoundTrip(t *testing.T) {
	levels := append([]string{""}, oddLevels...)
	for i := range 256 {
		if i != '/' {
			levels = append(levels, "c"+string(rune(i))+"c", string([]byte{byte(i)}))
		}
	}
	for _, level := range levels {
		tok := string(appendToken(nil, level))
		if why := validToken(tok); why != "" {
			t.Errorf("appendToken(%q) = %q: %s", level, tok, why)
		}
		want := level
		switch {
		case level == "":
			want = "/"
		case len(level) > maxLevel:
			want = level[:maxLevel]
		}
		if got := natsToMQTT("part.girona.3." + tok); got != "part/girona/3/"+want {
			t.Errorf("level %q: token %q reads back as topic %q, want part/girona/3/%s", level, tok, got, want)
		}
		if gateway := strings.ReplaceAll(level, ".", "//"); validCourier(level) && tok != gateway {
			t.Errorf("courier %q: token %q, the gateway's is %q", level, tok, gateway)
		}
	}
}

func validCourier(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	return strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-") == ""
}

// TestMaxLevel: a token keeps one byte more than a courier id may have,
// so that a longer level still reads back as no courier id.
func TestMaxLevel(t *testing.T) {
	if !position.ValidCourier([]byte(strings.Repeat("a", maxLevel-1))) || position.ValidCourier([]byte(strings.Repeat("a", maxLevel))) {
		t.Errorf("maxLevel %d: a courier id has at most %d bytes?", maxLevel, maxLevel-1)
	}
}

// FuzzToken is TestToken_RoundTrip's property for any level a topic can
// have (no '/'; UTF-8, as MQTT requires, or not).
func FuzzToken(f *testing.F) {
	for _, l := range oddLevels {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, level string) {
		_ = natsToMQTT(level) // any subject reads as some topic, without panicking
		if level == "" || strings.Contains(level, "/") {
			return
		}
		tok := string(appendToken(nil, level))
		if why := validToken(tok); why != "" {
			t.Fatalf("appendToken(%q) = %q: %s", level, tok, why)
		}
		want := level[:min(len(level), maxLevel)]
		if got := natsToMQTT(tok); got != want {
			t.Fatalf("level %q: token %q reads back as %q, want %q", level, tok, got, want)
		}
	})
}

// TestCourierLevel_RelayKeepsTheCourier: the relay keeps the level that
// names the courier (the topic's last with format edgeproc; USER or
// DEVICE with owntracks, whatever the other levels), in the partition the
// courier's token hashes to, so that a USER's two phones share one.
func TestCourierLevel_RelayKeepsTheCourier(t *testing.T) {
	for _, tt := range []struct {
		format, courier, topic, filter, subject string
	}{
		{"edgeproc", "", "km0/girona/positions/van-3", "km0/girona/positions/+", "van-3"},
		{"edgeproc", "", "km0/girona/positions/van.3", "km0/girona/positions/+", "van//3"},
		{"owntracks", "user", "owntracks/jane/phone", "owntracks/+/+", "jane"},
		{"owntracks", "user", "owntracks/jane/my tablet", "owntracks/+/+", "jane"},
		{"owntracks", "user", "owntracks/jane.doe/phone", "owntracks/+/+", "jane//doe"},
		{"owntracks", "user", "owntracks/jane doe/phone", "owntracks/+/+", "jane/20doe"},
		{"owntracks", "user", "owntracks//phone", "owntracks/+/+", "/"},
		{"owntracks", "user", "owntracks/jane/phone", "$share/g/owntracks/+/+", "jane"},
		{"owntracks", "user", "owntracks/jane/phone", "owntracks/+/phone", "jane"},
		{"owntracks", "device", "owntracks/jane/phone", "owntracks/+/+", "phone"},
		{"owntracks", "device", "owntracks/jane/a*b", "owntracks/+/+", "a/2Ab"},
		// Not the subscription's (no broker delivers it): the whole topic,
		// no courier id.
		{"owntracks", "user", "other/jane", "owntracks/+/+", "other/2Fjane"},
	} {
		t.Run(tt.format+" "+tt.courier+" "+tt.topic, func(t *testing.T) {
			cfg := testConfig(t, "nats://127.0.0.1:4222", 6)
			cfg.MQTT.Format, cfg.MQTT.Topic = tt.format, tt.filter
			if tt.courier != "" {
				cfg.MQTT.OwnTracksCourier = tt.courier
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			l := bareRelay(cfg)
			want := fmt.Sprintf("part.girona.%d.%s", PartitionOf(tt.subject, 6), tt.subject)
			if got := l.subjectOf(tt.topic); got != want {
				t.Errorf("subjectOf(%q) = %q, want %q", tt.topic, got, want)
			}
		})
	}
}

// TestOwnTracksSubject_JudgedAsOnTheMQTTTopic: a location published on
// owntracks/USER/DEVICE, stored by the relay and applied by the
// partition's owner (entryOf, EngineConfig), is judged as the MQTT
// source's engine judges it on the original topic: the same courier, or
// the same rejection, for courier ids and odd names alike, by USER and by
// DEVICE.
func TestOwnTracksSubject_JudgedAsOnTheMQTTTopic(t *testing.T) {
	for _, by := range config.OwnTracksCouriers {
		t.Run(by, func(t *testing.T) {
			cfg := testConfig(t, "nats://127.0.0.1:4222", 3)
			cfg.MQTT.Format, cfg.MQTT.Topic, cfg.MQTT.OwnTracksCourier = "owntracks", "owntracks/+/+", by
			l := bareRelay(cfg)
			var topics []string
			for _, name := range append([]string{""}, oddLevels...) {
				if !strings.ContainsAny(name, "\x00") && utf8.ValidString(name) {
					topics = append(topics, "owntracks/"+name+"/phone", "owntracks/jane/"+name)
				}
			}
			var partTopic []byte
			for i, topic := range topics {
				payload := []byte(fmt.Sprintf(`{"_type":"location","lat":41.98,"lon":2.82,"tst":%d,"tid":"x"}`, 1726308298+i))
				subject := l.subjectOf(topic)
				if why := validToken(subject[strings.LastIndexByte(subject, '.')+1:]); why != "" {
					t.Errorf("topic %q: subject %q: %s", topic, subject, why)
				}
				n := partitionOf(subject[strings.LastIndexByte(subject, '.')+1:], 3)
				var en entry.Entry
				_ = eachEntry(subject, nil, payload, 1, 1726308299000, &partTopic, func(_ uint64, e entry.Entry) { en = e })
				if en.Kind != entry.Position {
					t.Fatalf("topic %q: subject %q is no position", topic, subject)
				}
				got := judge(t, EngineConfig(cfg, n), en)
				ecfg := market.EngineConfig(cfg)
				ecfg.Topic = cfg.MQTT.Topic
				want := judge(t, ecfg, entry.Entry{Kind: entry.Position, Arrival: 1726308299000, Topic: topic, Payload: payload})
				if got != want {
					t.Errorf("topic %q (subject %q): the partition's owner %s, the MQTT source %s", topic, subject, got, want)
				}
			}
		})
	}
}

// judge applies one position to a new engine of ecfg and says what
// became of it: the courier it was accepted under, or the rejection.
func judge(t *testing.T, ecfg engine.Config, en entry.Entry) string {
	t.Helper()
	var courier string
	ecfg.Shards = 1
	ecfg.OnPosition = func(c []byte, _ int64, _, _ float64) { courier = string(c) }
	x := oracle.NewResults(nil, false)
	e := engine.New(ecfg, x.Sink)
	e.Apply(7, en)
	e.Stop()
	var out []string
	for k, r := range x.ByKey(t) {
		if !strings.HasPrefix(k, "dead_zone_part|") { // a partition's, not a judgement
			out = append(out, oracle.EmittedRe.ReplaceAllString(r, ""))
		}
	}
	if courier != "" {
		out = append(out, "courier "+courier)
	}
	return strings.Join(out, "; ")
}
