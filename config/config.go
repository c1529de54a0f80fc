package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/geo"
)

// MaxFileSize is the largest configuration file Parse reads, in bytes.
const MaxFileSize = 1 << 20

// Bounds of mqtt.max_packet_size, in bytes. The upper one leaves room under
// MQTT's 268435455-byte packet limit for the topic and headers.
const (
	MinMaxPacketSize = 1 << 10
	MaxMaxPacketSize = 256 << 20
)

// Config is one market's configuration. Build it with Default, Parse or
// Load; a Config returned by Parse or Load without error has passed
// Validate.
type Config struct {
	// Market names the market in subjects, keys and defaults. Required,
	// [a-z0-9_-]{1,32}.
	Market string
	// Timezone is the market's IANA time zone name (yaml timezone): its
	// calendar day for the lake's date partitions and `edgeproc daily`,
	// and the clock the fleet board shows. Default "UTC". See Location.
	Timezone string
	// Source is where positions come from (yaml source): "mqtt" (the
	// MQTT section, a local write-ahead log) or "jetstream" (a stream's
	// partition subjects, see JetStream). Default "mqtt".
	Source    string
	MQTT      MQTT
	JetStream JetStream
	NATS      NATS
	Windows   Windows
	Distance  Distance
	Geo       Geo
	DeadZones DeadZones
	State     State
	HTTP      HTTP
	Limits    Limits
	Lake      Lake
	Log       Log
}

// MQTT is where positions come from (yaml key mqtt).
type MQTT struct {
	// URL is the broker: mqtt://HOST[:PORT], mqtts://HOST[:PORT] (TLS), or
	// the literal "embedded". Credentials in the URL are refused.
	// Default "mqtt://127.0.0.1:1883".
	URL string
	// Topic is the MQTT topic filter subscribed to. Default
	// "km0/MARKET/positions/+".
	Topic string
	// ClientID is the persistent-session identity (yaml client_id).
	// Default "edgeproc-MARKET".
	ClientID string
	// Username is optional; empty means none.
	Username string
	// PasswordEnv names the environment variable holding the password
	// (yaml password_env); optional. The password itself is never in the
	// file: see Password.
	PasswordEnv string
	// CAFile is a PEM CA bundle for mqtts:// (yaml ca_file); optional,
	// the system pool is used when empty. Only allowed with mqtts://.
	CAFile string
	// SessionExpiry is how long the broker keeps the persistent session
	// while edgeproc is away (yaml session_expiry). Default 24h; > 0 and a
	// whole number of seconds (MQTT counts it in seconds).
	SessionExpiry time.Duration
	// MaxPacketSize is the largest payload edgeproc lets the broker deliver,
	// in bytes (yaml max_packet_size; an integer, or a size such as 1MiB,
	// 512KiB, 64kB). edgeproc announces it, plus room for the topic and
	// headers, as the Maximum Packet Size in CONNECT, so payloads up to it
	// arrive and are counted (too_large when over the engine's limit) and
	// dead-lettered; a broker drops larger ones unseen, so keep the
	// broker's message_size_limit at or below it. Default 1MiB; 1KiB to
	// 256MiB.
	MaxPacketSize int
	// Format is how a payload becomes a position (yaml format; contract §2,
	// Input formats): "edgeproc" (the contract's JSON object) or
	// "owntracks" (the OwnTracks app's location messages, the courier
	// taken from the topic). Default "edgeproc".
	Format string
	// OwnTracksCourier is which topic level of owntracks/USER/DEVICE names
	// the courier with format owntracks (yaml owntracks_courier): "user"
	// (the first + of Topic) or "device" (the second). Default "user".
	OwnTracksCourier string
}

// Formats are the accepted values of mqtt.format.
var Formats = []string{"edgeproc", "owntracks"}

// OwnTracksCouriers are the accepted values of mqtt.owntracks_courier.
var OwnTracksCouriers = []string{"user", "device"}

// Sources are the accepted values of source.
var Sources = []string{"mqtt", "jetstream"}

// NATS is where results go (yaml key nats).
type NATS struct {
	// URL is the server: nats://HOST[:PORT] or tls://HOST[:PORT], several
	// separated by commas, or the literal "embedded". Credentials in the
	// URL are refused. Default "nats://127.0.0.1:4222".
	URL string
	// SubjectPrefix starts every subject (yaml subject_prefix): with
	// "delivery", results go to delivery.dashboard.MARKET.TYPE. Default
	// "delivery".
	// Dot-separated tokens, each non-empty, with no spaces, '*' or '>'.
	SubjectPrefix string
	// CredsEnv names the environment variable holding the NATS user
	// credentials (yaml creds_env); optional. See Creds.
	CredsEnv string
	// Stream is the JetStream stream name (yaml stream). Default
	// "EDGEPROC_" + upper(MARKET) with '-' replaced by '_'.
	Stream string
	// DuplicateWindow is the stream's dedup window (yaml
	// duplicate_window): a result re-published within it with the same key
	// is dropped. Default 10m; > 0, and at most MaxAge when MaxAge is set.
	DuplicateWindow time.Duration
	// KVInterval bounds how stale a courier's position in the courier KV
	// bucket may be (yaml kv_interval): a courier's position is written at
	// most once per interval, its newest then; a status change (no_signal,
	// online) is written at once. Default 15s; > 0, whole milliseconds.
	KVInterval time.Duration
	// MaxAge bounds the stream's retention (yaml max_age): results older
	// than this are deleted. Default 24h (defaults.MaxAge); 0 = kept until
	// MaxBytes (or forever); whole seconds.
	MaxAge time.Duration
	// MaxBytes bounds the stream's size on disk, in bytes (yaml max_bytes;
	// an integer or a size such as 512MiB or 2GB): past it the oldest
	// results are deleted, never the new ones refused. Default 1 GiB
	// (defaults.MaxBytes); 0 = no size bound.
	MaxBytes int64
}

// Windows holds the event-time parameters (yaml key windows); see contract
// §3. Every duration is a whole number of milliseconds, because the engine
// works in integer milliseconds (see Millis).
type Windows struct {
	// Size is the sliding distance window length. Default 5m; > 0.
	Size time.Duration
	// Slide is the distance window step; windows start at multiples of it
	// since the epoch. Default 1m; > 0 and <= Size.
	Slide time.Duration
	// Gap is the session inactivity gap: a courier silent this long gets
	// no_signal. Default 3m; > 0.
	Gap time.Duration
	// ToleratedDelay is the bounded out-of-orderness: wm = max_ts -
	// ToleratedDelay (yaml tolerated_delay). Default 45s; >= 0.
	ToleratedDelay time.Duration
	// AllowedLateness is how long past its end a fired distance window
	// still takes late positions, re-emitted as a revision when they change
	// it (yaml allowed_lateness; contract §3, Allowed lateness). Default
	// 0s: a window fires once; >= 0, at most 10000 slides.
	AllowedLateness time.Duration
	// IdleTimeout is the processing-time silence after which the watermark
	// advances with the clock (yaml idle_timeout). Default 30s; >= 0,
	// 0 = never.
	IdleTimeout time.Duration
	// MaxFutureSkew is how far ahead of the processing clock a timestamp
	// may be before it is rejected (yaml max_future_skew). Default 1m; >= 0.
	MaxFutureSkew time.Duration
	// RestoreTTL is how long, in event time past its latest position, a
	// courier is tracked (yaml restore_ttl): until then a returning courier
	// gets signal_restored and continues its distance; after it, it is
	// forgotten (contract §3, Tracking and forgetting). Default 24h; at
	// least max(Size + AllowedLateness, Gap), so that a forgotten courier
	// has nothing open or retained.
	RestoreTTL time.Duration
}

// WindowsMs is Windows in integer milliseconds, the unit the engine uses.
type WindowsMs struct {
	Size, Slide, Gap, ToleratedDelay, AllowedLateness, IdleTimeout, MaxFutureSkew, RestoreTTL int64
}

// Millis returns the durations as integer milliseconds. Validate guarantees
// they are whole milliseconds, so nothing is lost.
func (w Windows) Millis() WindowsMs {
	return WindowsMs{
		Size:            w.Size.Milliseconds(),
		Slide:           w.Slide.Milliseconds(),
		Gap:             w.Gap.Milliseconds(),
		ToleratedDelay:  w.ToleratedDelay.Milliseconds(),
		AllowedLateness: w.AllowedLateness.Milliseconds(),
		IdleTimeout:     w.IdleTimeout.Milliseconds(),
		MaxFutureSkew:   w.MaxFutureSkew.Milliseconds(),
		RestoreTTL:      w.RestoreTTL.Milliseconds(),
	}
}

// Distance holds the GPS jitter filter and the stopped threshold (yaml key
// distance), in metres and km/h; see contract §5. 0 turns a filter off.
type Distance struct {
	// MinMoveM: the radius in metres within which movement from the
	// courier's anchor (or within the fix's reported accuracy) is jitter,
	// and an isolated fix out of it a spike (yaml min_move_m; rules in
	// docs/semantics.md). Default 15; finite, >= 0; 0 turns it off.
	MinMoveM float64
	// MaxSpeedKmh: a segment implying a higher speed is an outlier jump
	// (yaml max_speed_kmh). Default 150; finite, >= 0.
	MaxSpeedKmh float64
	// StoppedBelowM: a window with less distance is reported stopped
	// (yaml stopped_below_m). Default 50; finite, >= 0.
	StoppedBelowM float64
}

// Geo holds the spatial indexing (yaml key geo).
type Geo struct {
	// H3Resolution of the cell reported with results (yaml h3_resolution).
	// Default 9 (~174 m edge); 0..15.
	H3Resolution int
	// ServiceArea is a GeoJSON file of the market's service area (yaml
	// service_area; a Polygon or MultiPolygon, a Feature or a
	// FeatureCollection of them), relative to the configuration file's
	// directory unless absolute. Optional: without it no courier's side
	// is tracked, and no position costs an H3 lookup for it.
	ServiceArea string
	// Area is ServiceArea as loaded (at geo.AreaResolution) by Parse.
	Area *geo.Area
}

// DeadZones counts no_signal warnings by place (yaml key dead_zones; rules
// in docs/semantics.md, Dead zones).
type DeadZones struct {
	// Window is the tumbling event-time window warnings are counted over
	// (yaml window). Default 1h; 0 turns dead zones off; else a whole
	// number of milliseconds, > 0.
	Window time.Duration
	// H3Resolution of the cells warnings are counted in (yaml
	// h3_resolution). Default 8 (~461 m edge); 0..15.
	H3Resolution int
	// MaxCells bounds the cells of one window (yaml max_cells): a warning
	// in a further cell is counted as refused. Default 10000; > 0.
	MaxCells int
}

// State is where durable state lives (yaml key state).
type State struct {
	// Dir holds the WAL and checkpoints. Default "./state/MARKET".
	Dir string
	// CheckpointInterval is how often state is snapshotted (yaml
	// checkpoint_interval). Default 10s; > 0.
	CheckpointInterval time.Duration
	// WALSync is when a write-ahead-log entry counts as durable, hence when
	// its MQTT ack may go out (yaml wal_sync): "batch" (group commit: one
	// fsync per batch; see WALBatchInterval), "always" (one fsync
	// per entry, ~1 ms each) or "none" (written to the OS without fsync:
	// survives kill -9, not a power cut). Default "batch".
	WALSync string
	// WALBatchInterval bounds how long a group commit waits to gather
	// entries before its fsync (yaml wal_batch_interval): the most ack
	// latency it adds. It waits only under load (as long as the recent
	// rate needs to gather 256 entries), not at all below 16 entries per
	// interval (400/s at the default). Default 40ms; > 0.
	WALBatchInterval time.Duration
	// WALBatchMax starts a group commit's fsync as soon as this many entries
	// wait (yaml wal_batch_max). Default 1024; > 0.
	WALBatchMax int
}

// WALSyncModes are the accepted values of state.wal_sync.
var WALSyncModes = []string{"batch", "always", "none"}

// HTTP is the operations endpoint (yaml key http).
type HTTP struct {
	// Listen is the host:port for /metrics, /healthz and /readyz; the port
	// is numeric. Default "127.0.0.1:9464".
	Listen string
	// Board serves the fleet board, a read-only live page, at /board/ on
	// the same listener (yaml board). Default true.
	Board bool
	// BoardTiles is an optional map tile URL template for the board's
	// background, http(s)://… or /… with {z}, {x} and {y} (yaml
	// board_tiles), such as a tile server on the site's network. Default
	// empty: positions on a plain projected canvas with a scale.
	BoardTiles string
	// WebConfig is a web configuration file in the Prometheus exporters'
	// format (yaml web_config; github.com/prometheus/exporter-toolkit):
	// TLS (tls_server_config) and basic-auth users with bcrypt hashes
	// (basic_auth_users), guarding every endpoint of the listener:
	// /metrics, /healthz, /readyz, /board/ and its event stream,
	// /partitions/ and /debug/pprof/. It is read again for every request
	// and every TLS handshake, so users and certificates change without a
	// restart. Markets sharing http.listen must name the same file.
	// Default empty: plain HTTP, no authentication (keep the listener on
	// loopback then).
	WebConfig string
	// Pprof serves Go's profiler at /debug/pprof/ on the same listener
	// (yaml pprof), for taking a CPU or heap profile of the running
	// service. Default false. It shows stacks and can burn CPU on request:
	// keep it to a loopback or otherwise trusted listener.
	Pprof bool
}

// Limits bounds what input can make the service hold (yaml key limits).
type Limits struct {
	// MaxCouriers is how many couriers one market tracks at most (yaml
	// max_couriers); a position of a further courier takes the place of
	// the most idle tracked one or is rejected as courier_limit (contract
	// §3, Courier limit). Default 200000; > 0.
	MaxCouriers int
}

// Lake keeps every accepted position as Parquet files (yaml key lake;
// contract §7, The lake), for `edgeproc daily` and the data team.
type Lake struct {
	// Dir is the lake's root: positions go under
	// Dir/positions/market=MARKET/date=YYYY-MM-DD/, daily tables under
	// Dir/daily/. Default empty: no lake.
	Dir string
	// RollInterval is the longest a position waits in memory before its
	// file is written (yaml roll_interval). Default 10m; > 0.
	RollInterval time.Duration
	// Retention deletes date folders older than this (yaml retention).
	// Default 0: kept for ever; else a whole number of days (24h, 720h).
	Retention time.Duration
}

// Log is the process's logging (yaml key log). It is process-wide: with
// several markets, the most verbose level of their files applies (see
// LogLevel); `edgeproc run --log-level` overrides it. The format (text or
// JSON) is the command line's --log-format, not a market's setting.
type Log struct {
	// Level is the lowest level written: "debug", "info", "warn" or
	// "error". Default "info".
	Level string
}

// LogLevels are the accepted values of log.level, from the most verbose.
var LogLevels = []string{"debug", "info", "warn", "error"}

// Default returns the configuration with every default of contract §6 set
// and Market empty. The market-derived values (mqtt.topic, mqtt.client_id,
// nats.stream, state.dir and the jetstream stream, subject and consumer)
// are left empty: Parse fills them once the market is known, where the file did not set them.
func Default() Config {
	return Config{
		Source:   "mqtt",
		Timezone: defaults.Timezone,
		JetStream: JetStream{
			Partitions: defaults.Partitions,
			PinTTL:     defaults.PinTTL,
			Replicas:   defaults.Replicas,
			MaxAge:     defaults.PositionsMaxAge,
			Ingest:     "mqtt",
		},
		MQTT: MQTT{
			URL:              defaults.MQTTURL,
			SessionExpiry:    defaults.SessionExpiry,
			MaxPacketSize:    defaults.MaxPacketSize,
			Format:           "edgeproc",
			OwnTracksCourier: "user",
		},
		NATS: NATS{
			URL:             defaults.NATSURL,
			SubjectPrefix:   defaults.SubjectPrefix,
			DuplicateWindow: defaults.DuplicateWindow,
			KVInterval:      defaults.KVInterval,
			MaxAge:          defaults.MaxAge,
			MaxBytes:        defaults.MaxBytes,
		},
		Windows: Windows{
			Size:            5 * time.Minute,
			Slide:           time.Minute,
			Gap:             3 * time.Minute,
			ToleratedDelay:  45 * time.Second,
			AllowedLateness: 0,
			IdleTimeout:     30 * time.Second,
			MaxFutureSkew:   time.Minute,
			RestoreTTL:      24 * time.Hour,
		},
		Distance:  Distance{MinMoveM: 15, MaxSpeedKmh: 150, StoppedBelowM: 50},
		Geo:       Geo{H3Resolution: 9},
		DeadZones: DeadZones{Window: time.Hour, H3Resolution: 8, MaxCells: defaults.DeadZoneCells},
		State:     State{CheckpointInterval: 10 * time.Second, WALSync: "batch", WALBatchInterval: 40 * time.Millisecond, WALBatchMax: 1024},
		HTTP:      HTTP{Listen: defaults.Listen, Board: true},
		Limits:    Limits{MaxCouriers: defaults.MaxCouriers},
		Lake:      Lake{RollInterval: defaults.LakeRollInterval},
		Log:       Log{Level: "info"},
	}
}

// Parse reads one market's YAML from r: Default() overlaid with the file,
// market-derived defaults filled in, then Validate. file names the source
// in error messages. Parse has no side effects: it reads no environment
// variable and touches no file.
//
// On error it returns the zero Config and an error holding every problem
// found (errors.Join of *FieldError, see FieldErrors): problems decoding the
// file (unknown keys, wrong types, bad durations) and the value rules
// alike. A section with a value that did not decode (windows.size: 5 m)
// skips its value rules, whose cross-key checks would otherwise compare
// against the default it kept; a syntax error stops at the error.
func Parse(r io.Reader, file string) (Config, error) {
	c, _, err := parse(r, file)
	return c, err
}

func parse(r io.Reader, file string) (Config, map[string]int, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return Config{}, nil, fmt.Errorf("read %s: %w", file, err)
	}
	if len(data) > MaxFileSize {
		return Config{}, nil, &FieldError{File: file, Err: ErrInvalid,
			Reason: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}
	}
	c := Default()
	d := decoder{lines: map[string]int{}}
	d.decode(bytes.NewReader(data), &c)
	fes := d.errs
	if !d.fatal {
		derived := c.fillMarketDefaults(d.lines)
		for _, fe := range dropUndecoded(dropDerived(c.validate(), derived), d.errs) {
			fe.Line = d.lines[fe.Field]
			fes = append(fes, fe)
		}
	}
	if len(fes) == 0 && c.Geo.ServiceArea != "" {
		if fe := c.loadArea(file); fe != nil {
			fe.Line = d.lines[fe.Field]
			fes = append(fes, fe)
		}
	}
	if len(fes) > 0 {
		for _, fe := range fes {
			fe.File = file
		}
		return Config{}, nil, joinFieldErrors(fes)
	}
	return c, d.lines, nil
}

// loadArea loads geo.service_area, relative to the directory of file (the
// configuration's) unless it is absolute.
func (c *Config) loadArea(file string) *FieldError {
	path := c.Geo.ServiceArea
	if !filepath.IsAbs(path) && file != "" {
		path = filepath.Join(filepath.Dir(file), path)
	}
	a, err := geo.LoadArea(path, geo.AreaResolution)
	if err != nil {
		return &FieldError{Field: "geo.service_area", Value: c.Geo.ServiceArea, Reason: err.Error(), Err: ErrInvalid}
	}
	c.Geo.Area = a
	return nil
}

// dropUndecoded leaves out the value-rule errors of a section in which a
// value failed to decode: that value kept its default, so the section's
// rules would judge a value the file does not hold. Unknown and duplicate
// keys set nothing and leave the rules in force.
func dropUndecoded(fes, decodeErrs []*FieldError) []*FieldError {
	bad := map[string]bool{}
	for _, de := range decodeErrs {
		if !errors.Is(de, ErrUnknownKey) && !errors.Is(de, ErrDuplicateKey) {
			bad[section(de.Field)] = true
		}
	}
	return slices.DeleteFunc(fes, func(fe *FieldError) bool { return bad[section(fe.Field)] })
}

// section is the first token of a dotted key.
func section(key string) string {
	s, _, _ := strings.Cut(key, ".")
	return s
}

// dropDerived leaves out the errors of values derived from a market name
// that is itself reported invalid: they would only repeat that error.
func dropDerived(fes []*FieldError, derived []string) []*FieldError {
	if !slices.ContainsFunc(fes, func(fe *FieldError) bool { return fe.Field == "market" }) {
		return fes
	}
	return slices.DeleteFunc(fes, func(fe *FieldError) bool { return slices.Contains(derived, fe.Field) })
}

// Load opens path and Parses it; path names the file in error messages.
func Load(path string) (Config, error) {
	f, err := open(path)
	if err != nil {
		return Config{}, err
	}
	defer f.Close()
	return Parse(f, path)
}

// open opens a config file, naming the path once in the error: the
// PathError already names it, so only its cause is kept.
func open(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			err = pe.Err
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return f, nil
}

// fillMarketDefaults sets the defaults that depend on the market name, only
// for keys the file did not set (a key set to null counts as not set), and
// returns the keys it filled.
func (c *Config) fillMarketDefaults(set map[string]int) []string {
	var filled []string
	fill := func(key string, p *string, v string) {
		if _, ok := set[key]; !ok {
			*p = v
			filled = append(filled, key)
		}
	}
	fill("mqtt.topic", &c.MQTT.Topic, "km0/"+c.Market+"/positions/+")
	fill("mqtt.client_id", &c.MQTT.ClientID, "edgeproc-"+c.Market)
	fill("nats.stream", &c.NATS.Stream, defaults.ResultStream(c.Market))
	fill("state.dir", &c.State.Dir, "./state/"+c.Market)
	fill("jetstream.stream", &c.JetStream.Stream, defaults.PositionStream(c.Market))
	fill("jetstream.subject", &c.JetStream.Subject, "part."+c.Market+"."+PartitionToken+".*")
	fill("jetstream.consumer", &c.JetStream.Consumer, "edgeproc-"+c.Market)
	return filled
}

// Location is the market's time zone, Timezone loaded. Validate has
// checked that it loads; a Config that did not pass Validate gets UTC
// for a name it cannot load.
func (c Config) Location() *time.Location {
	loc, err := time.LoadLocation(c.Timezone)
	if err != nil || c.Timezone == "" {
		return time.UTC
	}
	return loc
}
