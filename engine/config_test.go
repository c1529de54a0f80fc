package engine

import (
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/geo"
)

func TestConfigFrom(t *testing.T) {
	c := config.Default()
	c.Market = "girona"
	c.Windows.Slide = 90 * time.Second
	c.Limits.MaxCouriers = 7
	got := ConfigFrom(c)
	want := Config{
		Market: "girona", Size: 300_000, Slide: 90_000, Gap: 180_000, ToleratedDelay: 45_000,
		IdleTimeout: 30_000, MaxFutureSkew: 60_000, RestoreTTL: 24 * 3600_000, MaxCouriers: 7,
		Filter: geo.Filter{MinMoveM: 15, MaxSpeedKmh: 150}, StoppedBelowM: 50, H3Resolution: 9,
	}
	if got.OnPosition != nil || got.Market != want.Market || got.Size != want.Size || got.Slide != want.Slide ||
		got.Gap != want.Gap || got.ToleratedDelay != want.ToleratedDelay || got.IdleTimeout != want.IdleTimeout ||
		got.MaxFutureSkew != want.MaxFutureSkew || got.RestoreTTL != want.RestoreTTL || got.MaxCouriers != want.MaxCouriers ||
		got.Filter != want.Filter || got.StoppedBelowM != want.StoppedBelowM || got.H3Resolution != want.H3Resolution ||
		got.Topic != "" || got.Shards != 0 {
		t.Errorf("ConfigFrom:\n got %+v\nwant %+v", got, want)
	}
}
