package config

import (
	"strings"
	"time"
)

// The defaults of contract §6 and of edgeproc's own keys, named once.
// Default builds the configuration from them, and the packages that take
// their own settings (bridge, engine, mqtt) fall back to them for a zero
// field, so a default is written here and nowhere else.
const (
	DefaultMQTTURL       = "mqtt://127.0.0.1:1883"
	DefaultSessionExpiry = 24 * time.Hour
	// DefaultMaxPacketSize is mqtt.max_packet_size's default, in bytes.
	DefaultMaxPacketSize = 1 << 20

	DefaultNATSURL = "nats://127.0.0.1:4222"
	// DefaultListen is http.listen: loopback.
	DefaultListen        = "127.0.0.1:9464"
	DefaultSubjectPrefix = "delivery"
	// DefaultDuplicateWindow is how long the results stream remembers a
	// key (nats.duplicate_window).
	DefaultDuplicateWindow = 10 * time.Minute
	// DefaultKVInterval is nats.kv_interval.
	DefaultKVInterval = 15 * time.Second
	// DefaultMaxAge is nats.max_age: a day of results, for a dashboard
	// that shows today (README, Sizing: how long max_bytes holds).
	DefaultMaxAge = 24 * time.Hour
	// DefaultMaxBytes is nats.max_bytes: 1 GiB.
	DefaultMaxBytes int64 = 1 << 30

	// DefaultMaxCouriers is limits.max_couriers, the contract's.
	DefaultMaxCouriers = 200_000
	// DefaultDeadZoneCells is dead_zones.max_cells: a city's cells at
	// resolution 8 number a few hundred.
	DefaultDeadZoneCells = 10_000

	// DefaultPartitions, DefaultPinTTL and DefaultReplicas are the
	// jetstream section's.
	DefaultPartitions = 1
	DefaultPinTTL     = 10 * time.Second
	DefaultReplicas   = 3
	// DefaultPositionsMaxAge is jetstream.max_age, how long the positions
	// stream keeps a position: far above any checkpoint interval, so a
	// new owner always finds every message after the checkpoint it
	// restores.
	DefaultPositionsMaxAge = 24 * time.Hour

	// DefaultTimezone is timezone: the market's calendar day.
	DefaultTimezone = "UTC"
	// DefaultLakeRollInterval is lake.roll_interval.
	DefaultLakeRollInterval = 10 * time.Minute

	// DefaultDrainTimeout bounds a shutdown's wait for the acks of the
	// results still on their way, in both sources.
	DefaultDrainTimeout = 10 * time.Second
)

// upperName is a market name as stream names spell it: upper case, '-' as
// '_' (a stream name may hold '-', but one rule keeps every name alike).
func upperName(market string) string {
	return strings.ReplaceAll(strings.ToUpper(market), "-", "_")
}

// ResultStream is the default nats.stream of a market: the JetStream
// stream of its results.
func ResultStream(market string) string { return "EDGEPROC_" + upperName(market) }

// PositionStream is the default jetstream.stream of a market: the
// partitioned stream of its positions.
func PositionStream(market string) string { return "POSITIONS_" + upperName(market) }

// CourierBucket is the key-value bucket of a market's courier states.
func CourierBucket(market string) string { return "edgeproc_couriers_" + market }
