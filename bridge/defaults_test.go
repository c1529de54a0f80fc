package bridge_test

import (
	"testing"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
)

// The bridge's own retention defaults (used when a caller leaves them zero)
// are the configuration's: one bound whichever way the bridge is opened.
func TestRetentionDefaultsMatchConfig(t *testing.T) {
	d := config.Default().NATS
	if d.MaxAge != bridge.DefaultMaxAge || d.MaxBytes != bridge.DefaultMaxBytes {
		t.Errorf("config defaults max_age %v max_bytes %d, bridge defaults %v and %d",
			d.MaxAge, d.MaxBytes, bridge.DefaultMaxAge, bridge.DefaultMaxBytes)
	}
}
