package service

import (
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/geo"
)

// Embedded is the URL value (mqtt.url, nats.url) meaning that the caller
// provides the server: see Deps.MQTTURL and Deps.NATS.
const Embedded = "embedded"

// EngineConfig maps a market's configuration to the engine's. The MQTT topic
// is left out (a replay has none); the live service sets it.
func EngineConfig(c config.Config) engine.Config {
	w := c.Windows.Millis()
	return engine.Config{
		Market: c.Market,
		Size:   w.Size, Slide: w.Slide, Gap: w.Gap, ToleratedDelay: w.ToleratedDelay,
		IdleTimeout: w.IdleTimeout, MaxFutureSkew: w.MaxFutureSkew, RestoreTTL: w.RestoreTTL,
		Filter:        geo.Filter{MinMoveM: c.Distance.MinMoveM, MaxSpeedKmh: c.Distance.MaxSpeedKmh},
		StoppedBelowM: c.Distance.StoppedBelowM,
		H3Resolution:  c.Geo.H3Resolution,
	}
}

// ErrClash is wrapped by the error Run returns when two configurations of
// one process would share what must be a market's own (config.CheckClashes).
var ErrClash = config.ErrClash
