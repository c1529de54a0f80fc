package resultstream

import (
	"strings"
	"testing"

	"github.com/km0/edgeproc/bridge"
)

// Every filter handed to the server is one subject at most: nats-server 2.9
// (Debian's) refuses several.
func TestServerFilter(t *testing.T) {
	bc := bridge.Config{Market: "girona"}.Resolved()
	sub := bc.Subject
	tests := []struct {
		subjects []string
		want     string
	}{
		{[]string{sub(bridge.KindLate)}, "delivery.late.girona"},
		{[]string{sub(bridge.KindDistance), sub(bridge.KindNoSignal), sub(bridge.KindSignalRestored)}, "delivery.dashboard.girona.>"},
		{[]string{sub(bridge.KindSignalRestored), sub(bridge.KindDistance), sub(bridge.KindNoSignal)}, "delivery.dashboard.girona.>"},
		{[]string{sub(bridge.KindDistance), sub(bridge.KindLate)}, ""},
		{[]string{sub(bridge.KindDistance), sub(bridge.KindNoSignal), sub(bridge.KindLate)}, ""},
	}
	for _, tt := range tests {
		got := ServerFilter(bc, tt.subjects)
		if len(got) > 1 || strings.Join(got, "") != tt.want {
			t.Errorf("ServerFilter(%v) = %v, want %q", tt.subjects, got, tt.want)
		}
	}
}
