package market_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/mqtt"
)

// TestEngineConfig sets every key the engine takes (windows, distance, geo,
// dead zones, limits) to a value other than its default and checks each reaches its
// field; the sources (replay, the MQTT market, each partition) all build
// their engine from it.
func TestEngineConfig(t *testing.T) {
	c := config.Default()
	c.Market = "girona"
	c.Windows = config.Windows{Size: 6 * time.Minute, Slide: 90 * time.Second, Gap: 4 * time.Minute, ToleratedDelay: 20 * time.Second, AllowedLateness: 2 * time.Minute,
		IdleTimeout: 11 * time.Second, MaxFutureSkew: 2 * time.Minute, RestoreTTL: 3 * time.Hour}
	c.Distance = config.Distance{MinMoveM: 7, MaxSpeedKmh: 90, StoppedBelowM: 33}
	c.Geo.H3Resolution = 6
	c.Limits.MaxCouriers = 7
	c.DeadZones = config.DeadZones{Window: 20 * time.Minute, H3Resolution: 7, MaxCells: 12}
	got := market.EngineConfig(c)
	want := engine.Config{
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

// TestBridgeConfig_MapsEveryKey sets every key BridgeConfig maps to a value
// other than its default, in both sources, and checks each reaches its
// field; a zero nats.max_age or max_bytes (no bound) becomes bridge.Unlimited.
func TestBridgeConfig_MapsEveryKey(t *testing.T) {
	for _, source := range config.Sources {
		c := config.Default()
		c.Market, c.Source = "bcn-2", source
		c.NATS.SubjectPrefix, c.NATS.Stream = "acme.out", "RESULTS"
		c.NATS.DuplicateWindow, c.NATS.KVInterval = 3*time.Minute, time.Hour
		c.NATS.MaxAge, c.NATS.MaxBytes = 7*24*time.Hour, 100<<20
		c.Limits.MaxCouriers, c.Geo.H3Resolution, c.JetStream.Replicas = 3, 7, 5
		want := bridge.Config{
			Market: "bcn-2", SubjectPrefix: "acme.out", Stream: "RESULTS",
			DuplicateWindow: 3 * time.Minute, KVInterval: time.Hour,
			MaxAge: 7 * 24 * time.Hour, MaxBytes: 100 << 20, MaxCouriers: 3,
			ComputeCell: true, CellResolution: 7,
		}
		if source == "jetstream" {
			want.Replicas = 5
		}
		if got := market.BridgeConfig(c); !reflect.DeepEqual(got, want) {
			t.Errorf("source %s: got %+v, want %+v", source, got, want)
		}
		c.NATS.MaxAge, c.NATS.MaxBytes = 0, 0
		if got := market.BridgeConfig(c); got.MaxAge != bridge.Unlimited || got.MaxBytes != bridge.Unlimited {
			t.Errorf("source %s, no bounds: max_age %v, max_bytes %d; want both bridge.Unlimited", source, got.MaxAge, got.MaxBytes)
		}
	}
}

// TestBridgeConfig_MapsEveryField: every key of a market's configuration the
// bridge has reaches it, set to a non-default value, in both sources (the
// two run the same ConfigFrom); a Config field added without a key, or
// left to the caller, must be named here, so none is forgotten.
func TestBridgeConfig_MapsEveryField(t *testing.T) {
	c := config.Default()
	c.Market = "bcn-2"
	c.NATS = config.NATS{SubjectPrefix: "acme.dlv", Stream: "RESULTS_BCN", DuplicateWindow: 3 * time.Minute,
		KVInterval: time.Hour, MaxAge: 168 * time.Hour, MaxBytes: 100 << 20}
	c.Limits.MaxCouriers = 7
	c.Geo.H3Resolution = 6
	c.JetStream.Replicas = 3
	want := bridge.Config{
		Market: "bcn-2", SubjectPrefix: "acme.dlv", Stream: "RESULTS_BCN", DuplicateWindow: 3 * time.Minute,
		MaxAge: 168 * time.Hour, MaxBytes: 100 << 20, KVInterval: time.Hour, MaxCouriers: 7,
		ComputeCell: true, CellResolution: 6,
	}
	for _, source := range []string{"mqtt", "jetstream"} {
		c.Source = source
		got := market.BridgeConfig(c)
		w := want
		if source == "jetstream" {
			w.Replicas = 3 // the single process's stream has the server's default
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s:\n got %+v\nwant %+v", source, got, w)
		}
	}
	// No bound in the configuration is no bound in the bridge, not its
	// default one.
	c.NATS.MaxAge, c.NATS.MaxBytes = 0, 0
	if got := market.BridgeConfig(c); got.MaxAge != bridge.Unlimited || got.MaxBytes != bridge.Unlimited {
		t.Errorf("max_age 0, max_bytes 0 → %v, %d; want bridge.Unlimited", got.MaxAge, got.MaxBytes)
	}
	// Fields with no configuration key: the bridge's own defaults (or the
	// caller's, OnAcked). KVBucket is the configuration's rule, applied
	// by withDefaults.
	notKeys := map[string]bool{"MaxPending": true, "KVBucket": true, "AckTimeout": true, "MaxBackoff": true, "OnAcked": true}
	set := map[string]bool{}
	v := reflect.ValueOf(want)
	v3 := reflect.ValueOf(bridge.Config{Replicas: 1})
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if !v.Field(i).IsZero() || !v3.Field(i).IsZero() {
			set[name] = true
		}
	}
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if set[name] == notKeys[name] {
			t.Errorf("Config.%s: mapped %v, listed as without a key %v: map it in BridgeConfig or list it here", name, set[name], notKeys[name])
		}
	}
}

// TestMQTTConfig_MapsEveryField: the market's mqtt section reaches the
// Source whole, the password read from its environment variable.
func TestMQTTConfig_MapsEveryField(t *testing.T) {
	t.Setenv("TEST_MQTT_PASSWORD", "s3cret")
	got := market.MQTTConfig(config.MQTT{
		URL: "mqtts://broker:8883", Topic: "km0/g/positions/+", ClientID: "edgeproc-g",
		Username: "u", PasswordEnv: "TEST_MQTT_PASSWORD", CAFile: "/etc/ca.pem",
		SessionExpiry: 2 * time.Hour, MaxPacketSize: 4096,
	})
	want := mqtt.Config{
		URL: "mqtts://broker:8883", Topic: "km0/g/positions/+", ClientID: "edgeproc-g",
		Username: "u", Password: "s3cret", CAFile: "/etc/ca.pem",
		SessionExpiry: 2 * time.Hour, MaxPayload: 4096,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
