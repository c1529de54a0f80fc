package engine

import (
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/position"
)

// DefaultMaxCouriers is Config.MaxCouriers's default, the contract's.
const DefaultMaxCouriers = config.DefaultMaxCouriers

// ConfigFrom maps a market's configuration to the engine's, for a replay
// and the live service alike. Topic, Shards, ChunkSize, Log and
// OnPosition are left for the caller: a replay has no topic, and the live
// service sets its own.
func ConfigFrom(c config.Config) Config {
	w := c.Windows.Millis()
	format, _ := position.ParseFormat(c.MQTT.Format) // validated: edgeproc or owntracks
	level := 0
	if c.MQTT.OwnTracksCourier == "device" {
		level = 1
	}
	return Config{
		Format: format, CourierLevel: level,
		Market: c.Market,
		Size:   w.Size, Slide: w.Slide, Gap: w.Gap, ToleratedDelay: w.ToleratedDelay, AllowedLateness: w.AllowedLateness,
		IdleTimeout: w.IdleTimeout, MaxFutureSkew: w.MaxFutureSkew, RestoreTTL: w.RestoreTTL,
		MaxCouriers:   c.Limits.MaxCouriers,
		Filter:        geo.Filter{MinMoveM: c.Distance.MinMoveM, MaxSpeedKmh: c.Distance.MaxSpeedKmh},
		StoppedBelowM: c.Distance.StoppedBelowM,
		H3Resolution:  c.Geo.H3Resolution,

		DeadZoneWindow: c.DeadZones.Window.Milliseconds(), DeadZoneResolution: c.DeadZones.H3Resolution,
		DeadZoneCells: c.DeadZones.MaxCells,
		Area:          c.Geo.Area,
	}
}
