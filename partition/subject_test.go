package partition

import "testing"

func TestNATSToMQTT(t *testing.T) {
	for _, tt := range []struct{ subject, topic string }{
		{"part.girona.3.van-3", "part/girona/3/van-3"},
		{"part.girona.3.van//3", "part/girona/3/van.3"},
		{"part.girona.3.", "part/girona/3/"},
		{"a", "a"},
		{"a.b//c//d.e", "a/b.c.d/e"},
		{"x/y", "x/y"},
	} {
		if got := natsToMQTT(tt.subject); got != tt.topic {
			t.Errorf("natsToMQTT(%q) = %q, want %q", tt.subject, got, tt.topic)
		}
	}
}
