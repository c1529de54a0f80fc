package partition

import (
	"testing"
	"time"

	"github.com/km0/edgeproc/entry"
	"github.com/nats-io/nats.go"
)

// BenchmarkRelaySubject is the relay's per-position work before the
// publish: the courier's level and token, its partition, the subject; for
// each format, half of the couriers with a '.' (escaped).
func BenchmarkRelaySubject(b *testing.B) {
	for _, bb := range []struct {
		format string
		topics [2]string
	}{
		{"edgeproc", [2]string{"km0/girona/positions/girona-c0042", "km0/girona/positions/van.3"}},
		{"owntracks", [2]string{"owntracks/girona-c0042/phone", "owntracks/van.3/phone"}},
	} {
		b.Run(bb.format, func(b *testing.B) {
			cfg := testConfig(b, "nats://127.0.0.1:4222", 6)
			if bb.format == "owntracks" {
				cfg.MQTT.Format, cfg.MQTT.Topic = "owntracks", "owntracks/+/+"
			}
			l := bareRelay(cfg)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if l.subjectOf(bb.topics[i&1]) == "" {
					b.Fatal("no subject")
				}
			}
		})
	}
}

// BenchmarkEntryOf is the owner's per-position work before the engine
// (eachEntry):
// the message's kind and the topic rebuilt from its subject.
func BenchmarkEntryOf(b *testing.B) {
	subjects := []string{"part.girona.3.girona-c0042", "part.girona.3.van//3"}
	data := []byte(`{"courier":"girona-c0042","lat":41.98,"lon":2.82,"timestamp_ms":1726308298000}`)
	hdr := nats.Header{"Nats-Msg-Id": []string{"x"}}
	ms := time.Now().UnixMilli()
	var topic []byte
	b.ReportAllocs()
	n := 0
	for i := 0; b.Loop(); i++ {
		_ = eachEntry(subjects[i&1], hdr, data, uint64(i), ms, &topic, func(uint64, entry.Entry) { n++ })
	}
	if n == 0 {
		b.Fatal("no position")
	}
}
