// Package defaults names, once, the defaults of contract §6 and of
// edgeproc's own keys. config.Default builds a market's configuration from
// them, and the packages that take their own settings (bridge, engine,
// mqtt) fall back to them for a zero field, so a default is written here
// and nowhere else, and none of those packages needs the configuration
// file's package to know it.
package defaults

import (
	"strings"
	"time"
)

// The defaults.
const (
	MQTTURL       = "mqtt://127.0.0.1:1883"
	SessionExpiry = 24 * time.Hour
	// MaxPacketSize is mqtt.max_packet_size's default, in bytes.
	MaxPacketSize = 1 << 20

	NATSURL = "nats://127.0.0.1:4222"
	// Listen is http.listen: loopback.
	Listen        = "127.0.0.1:9464"
	SubjectPrefix = "delivery"
	// DuplicateWindow is how long the results stream remembers a
	// key (nats.duplicate_window).
	DuplicateWindow = 10 * time.Minute
	// KVInterval is nats.kv_interval.
	KVInterval = 15 * time.Second
	// MaxAge is nats.max_age: a day of results, for a dashboard
	// that shows today (README, Sizing: how long max_bytes holds).
	MaxAge = 24 * time.Hour
	// MaxBytes is nats.max_bytes: 1 GiB.
	MaxBytes int64 = 1 << 30

	// MaxCouriers is limits.max_couriers, the contract's.
	MaxCouriers = 200_000
	// DeadZoneCells is dead_zones.max_cells: a city's cells at
	// resolution 8 number a few hundred.
	DeadZoneCells = 10_000

	// Partitions, DefaultPinTTL and DefaultReplicas are the
	// jetstream section's.
	Partitions = 1
	PinTTL     = 10 * time.Second
	Replicas   = 3
	// PositionsMaxAge is jetstream.max_age, how long the positions
	// stream keeps a position: far above any checkpoint interval, so a
	// new owner always finds every message after the checkpoint it
	// restores.
	PositionsMaxAge = 24 * time.Hour

	// Timezone is timezone: the market's calendar day.
	Timezone = "UTC"
	// LakeRollInterval is lake.roll_interval.
	LakeRollInterval = 10 * time.Minute

	// DrainTimeout bounds a shutdown's wait for the acks of the
	// results still on their way, in both sources.
	DrainTimeout = 10 * time.Second
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
