package engine

import (
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/geo"
)

// TestConfigFrom sets every key the engine takes (windows, distance, geo,
// dead zones, limits) to a value other than its default and checks each reaches its
// field; the sources (replay, the MQTT market, each partition) all build
// their engine from it.
func TestConfigFrom(t *testing.T) {
	c := config.Default()
	c.Market = "girona"
	c.Windows = config.Windows{Size: 6 * time.Minute, Slide: 90 * time.Second, Gap: 4 * time.Minute, ToleratedDelay: 20 * time.Second, AllowedLateness: 2 * time.Minute,
		IdleTimeout: 11 * time.Second, MaxFutureSkew: 2 * time.Minute, RestoreTTL: 3 * time.Hour}
	c.Distance = config.Distance{MinMoveM: 7, MaxSpeedKmh: 90, StoppedBelowM: 33}
	c.Geo.H3Resolution = 6
	c.Limits.MaxCouriers = 7
	c.DeadZones = config.DeadZones{Window: 20 * time.Minute, H3Resolution: 7, MaxCells: 12}
	got := ConfigFrom(c)
	want := Config{
		Market: "girona", Size: 360_000, Slide: 90_000, Gap: 240_000, ToleratedDelay: 20_000, AllowedLateness: 120_000,
		IdleTimeout: 11_000, MaxFutureSkew: 120_000, RestoreTTL: 3 * 3600_000, MaxCouriers: 7,
		Filter: geo.Filter{MinMoveM: 7, MaxSpeedKmh: 90}, StoppedBelowM: 33, H3Resolution: 6,
		DeadZoneWindow: 1_200_000, DeadZoneResolution: 7, DeadZoneCells: 12,
	}
	if got.OnPosition != nil || got.Market != want.Market || got.Size != want.Size || got.Slide != want.Slide ||
		got.Gap != want.Gap || got.ToleratedDelay != want.ToleratedDelay || got.AllowedLateness != want.AllowedLateness || got.IdleTimeout != want.IdleTimeout ||
		got.MaxFutureSkew != want.MaxFutureSkew || got.RestoreTTL != want.RestoreTTL || got.MaxCouriers != want.MaxCouriers ||
		got.Filter != want.Filter || got.StoppedBelowM != want.StoppedBelowM || got.H3Resolution != want.H3Resolution ||
		got.DeadZoneWindow != want.DeadZoneWindow || got.DeadZoneResolution != want.DeadZoneResolution || got.DeadZoneCells != want.DeadZoneCells ||
		got.Topic != "" || got.Shards != 0 || got.DeafGap != 0 {
		t.Errorf("ConfigFrom:\n got %+v\nwant %+v", got, want)
	}
}
