package partition

import (
	"testing"

	"github.com/nats-io/nats.go"
)

func TestNATSToMQTT(t *testing.T) {
	for _, tt := range []struct{ subject, topic string }{
		{"part.girona.3.van-3", "part/girona/3/van-3"},
		{"part.girona.3.van//3", "part/girona/3/van.3"},
		{"part.girona.3.", "part/girona/3/"},
		{"a", "a"},
		{"a.b//c//d.e", "a/b.c.d/e"},
		{"x/y", "x/y"},
		// Escapes of odd levels (appendToken); a lone '/' (the gateway's
		// empty level) and one without two upper-case hex digits stay.
		{"part.girona.3.jane/20doe", "part/girona/3/jane doe"},
		{"part.girona.3./2A", "part/girona/3/*"},
		{"part.girona.3./", "part/girona/3//"},
		{"part.girona.3.a/2", "part/girona/3/a/2"},
		{"part.girona.3.a/2f", "part/girona/3/a/2f"},
		{"part.girona.3.////", "part/girona/3/.."},
		{"part.girona.3.///20", "part/girona/3/. "},
	} {
		if got := natsToMQTT(tt.subject); got != tt.topic {
			t.Errorf("natsToMQTT(%q) = %q, want %q", tt.subject, got, tt.topic)
		}
	}
}

func TestKindOf(t *testing.T) {
	tick := nats.Header{TickHeader: []string{"1"}}
	wake := nats.Header{TickHeader: []string{WakeValue}}
	for _, tt := range []struct {
		subject string
		hdr     nats.Header
		want    msgKind
	}{
		{"part.girona.3." + TickToken, tick, msgTick},
		{"part.girona.3." + TickToken, wake, msgWake},
		{"part.girona.3." + TickToken, nil, msgPosition},   // a courier cannot be named _tick, but no header: a position
		{"part.girona.3.van-3", tick, msgPosition},         // a header on a courier's subject does not make a tick
		{"part.girona.3.van-3", wake, msgPosition},         // nor a wake-up
		{"part.girona.3.x" + TickToken, tick, msgPosition}, // the whole last token
		{"part.girona.3." + TickToken, nats.Header{"X": []string{"1"}}, msgPosition},
		{"part.girona.3." + BatchToken, nil, msgBatch},
		{"part.girona.3.x" + BatchToken, nil, msgPosition},
	} {
		if got := kindOf(tt.subject, tt.hdr); got != tt.want {
			t.Errorf("kindOf(%q, %v) = %d, want %d", tt.subject, tt.hdr, got, tt.want)
		}
	}
}
