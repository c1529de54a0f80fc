package market

import (
	"cmp"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/mqtt"
	"github.com/km0/edgeproc/position"
)

// The configuration file reaches the parts only through here: the engine,
// the bridge and the MQTT client take plain settings of their own and
// know nothing of YAML, so a key is mapped once, for every source and for
// a replay alike.

// EngineConfig maps a market's configuration to its engine's, for a
// replay and the live sources alike. Topic, Shards, ChunkSize, Log,
// OnPosition and OnForget are the caller's: a replay has no topic, and each source
// sets its own.
func EngineConfig(c config.Config) engine.Config {
	w := c.Windows.Millis()
	format, _ := position.ParseFormat(c.MQTT.Format) // validated: edgeproc or owntracks
	level := 0
	if c.MQTT.OwnTracksCourier == "device" {
		level = 1
	}
	return engine.Config{
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

// BridgeConfig maps a market's configuration to its bridge's, every key
// the bridge has: the nats section, limits.max_couriers (the courier
// table's bound), geo.h3_resolution (the bucket's cells) and, for the
// partitioned source, jetstream.replicas. The configuration's 0 for
// nats.max_age and nats.max_bytes is "no bound", the bridge's Unlimited.
// OnAcked is the caller's to set.
func BridgeConfig(c config.Config) bridge.Config {
	bc := bridge.Config{
		Market: c.Market, SubjectPrefix: c.NATS.SubjectPrefix, Stream: c.NATS.Stream,
		DuplicateWindow: c.NATS.DuplicateWindow,
		MaxAge:          cmp.Or(c.NATS.MaxAge, bridge.Unlimited),
		MaxBytes:        cmp.Or(c.NATS.MaxBytes, bridge.Unlimited),
		KVInterval:      c.NATS.KVInterval, MaxCouriers: c.Limits.MaxCouriers,
		ComputeCell: true, CellResolution: c.Geo.H3Resolution,
	}
	if c.Source == "jetstream" {
		bc.Replicas = c.JetStream.Replicas
	}
	return bc
}

// MQTTConfig maps a market's mqtt section to an MQTT source's, for the
// live service and its stand-ins alike. The URL is taken as written: the
// service replaces "embedded" with its embedded broker's address.
func MQTTConfig(c config.MQTT) mqtt.Config {
	return mqtt.Config{
		URL: c.URL, Topic: c.Topic, ClientID: c.ClientID,
		Username: c.Username, Password: c.Password(),
		CAFile: c.CAFile, SessionExpiry: c.SessionExpiry,
		MaxPayload: c.MaxPacketSize,
	}
}
