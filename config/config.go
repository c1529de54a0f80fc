package config

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxFileSize is the largest configuration file Parse reads, in bytes.
const MaxFileSize = 1 << 20

// Config is one market's configuration. Build it with Default, Parse or
// Load; a Config returned by Parse or Load without error has passed
// Validate.
type Config struct {
	// Market names the market in subjects, keys and defaults. Required,
	// [a-z0-9_-]{1,32}.
	Market string
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
	State     State
	HTTP      HTTP
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
}

// Sources are the accepted values of source.
var Sources = []string{"mqtt", "jetstream"}

// PartitionToken is the subject token of JetStream.Subject replaced by a
// partition's number.
const PartitionToken = "{partition}"

// MaxPartitions bounds jetstream.partitions: each partition is a consumer,
// an engine and a checkpoint.
const MaxPartitions = 1024

// JetStream is the partitioned stream source (yaml key jetstream), used
// when Source is "jetstream". Positions are read from the stream by one
// durable pull consumer per partition with the pinned_client priority
// policy, so that one running instance owns each partition; the stream is
// the log and checkpoints are kept in JetStream (see package partition).
// NATS.URL is the server for both the positions and the results.
type JetStream struct {
	// Stream holds the positions (yaml stream). Created with Replicas
	// replicas if missing. Default "POSITIONS_" + upper(MARKET), '-' -> '_'.
	Stream string
	// Subject is the subject pattern of one partition's positions (yaml
	// subject): dot-separated tokens, one of them exactly "{partition}"
	// (the partition number, 0 to Partitions-1) and the last one "*" (the
	// courier id). It must agree with the server's subject mapping, e.g.
	// "km0.*.positions.*": "part.{{wildcard(1)}}.{{partition(4,2)}}.{{wildcard(2)}}".
	// Default "part.MARKET.{partition}.*".
	Subject string
	// Partitions is the number of partitions, the N of the mapping's
	// partition(N, ...). Default 1; 1 to 1024. Changing it reassigns
	// couriers: start from empty checkpoints (see docs/scale-out.md).
	Partitions int
	// Consumer names the durable consumers (yaml consumer): partition n's is
	// CONSUMER-n. Default "edgeproc-MARKET".
	Consumer string
	// PinTTL is how long a partition's owner may go without asking for
	// messages before the server unpins it and another instance takes over
	// (yaml pin_ttl): the takeover delay after an owner dies. Default 10s;
	// at least 1s, whole milliseconds.
	PinTTL time.Duration
	// MaxOwned is the most partitions this instance owns at once (yaml
	// max_owned); at the limit it stops asking for the others, so that they
	// go to instances with room. The pinned_client policy does not balance
	// by itself: the first instance to ask gets a free partition. With I
	// instances, ceil(Partitions/(I-1)) spreads the partitions and still
	// lets the survivors own them all when one instance dies. Default 0:
	// no limit.
	MaxOwned int
	// Replicas of the positions stream (when created here), the results
	// stream and courier bucket, and the checkpoint bucket and object
	// store. Default 3; 1 to 5.
	Replicas int
	// Instance names this process in ownership records, logs and metrics;
	// it must differ between the instances of a market. Default empty:
	// the host name and process id.
	Instance string
}

// PartitionSubject is the filter subject of partition n's positions:
// Subject with "{partition}" replaced by n.
func (j JetStream) PartitionSubject(n int) string {
	return strings.Replace(j.Subject, PartitionToken, strconv.Itoa(n), 1)
}

// NATS is where results go (yaml key nats).
type NATS struct {
	// URL is the server: nats://HOST[:PORT] or tls://HOST[:PORT], several
	// separated by commas, or the literal "embedded". Credentials in the
	// URL are refused. Default "nats://127.0.0.1:4222".
	URL string
	// SubjectPrefix starts every subject (yaml subject_prefix), e.g.
	// "delivery" -> delivery.dashboard.MARKET.TYPE. Default "delivery".
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
	// is dropped. Default 10m; > 0.
	DuplicateWindow time.Duration
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
	// AllowedLateness is reserved (yaml allowed_lateness): only 0 is
	// accepted until re-emission of fired windows exists. Default 0s.
	AllowedLateness time.Duration
	// IdleTimeout is the processing-time silence after which the watermark
	// advances with the clock (yaml idle_timeout). Default 30s; >= 0,
	// 0 = never.
	IdleTimeout time.Duration
	// MaxFutureSkew is how far ahead of the processing clock a timestamp
	// may be before it is rejected (yaml max_future_skew). Default 1m; >= 0.
	MaxFutureSkew time.Duration
	// RestoreTTL is how long a closed session's marker is kept so that a
	// returning courier gets signal_restored (yaml restore_ttl).
	// Default 24h; > 0.
	RestoreTTL time.Duration
}

// WindowsMs is Windows in integer milliseconds, the unit the engine uses.
// AllowedLateness is left out: it is always 0.
type WindowsMs struct {
	Size, Slide, Gap, ToleratedDelay, IdleTimeout, MaxFutureSkew, RestoreTTL int64
}

// Millis returns the durations as integer milliseconds. Validate guarantees
// they are whole milliseconds, so nothing is lost.
func (w Windows) Millis() WindowsMs {
	return WindowsMs{
		Size:           w.Size.Milliseconds(),
		Slide:          w.Slide.Milliseconds(),
		Gap:            w.Gap.Milliseconds(),
		ToleratedDelay: w.ToleratedDelay.Milliseconds(),
		IdleTimeout:    w.IdleTimeout.Milliseconds(),
		MaxFutureSkew:  w.MaxFutureSkew.Milliseconds(),
		RestoreTTL:     w.RestoreTTL.Milliseconds(),
	}
}

// Distance holds the GPS jitter filter and the stopped threshold (yaml key
// distance), in metres and km/h; see contract §5. 0 turns a filter off.
type Distance struct {
	// MinMoveM: a move shorter than this many metres (or than the reported
	// accuracy) is jitter (yaml min_move_m). Default 10; finite, >= 0.
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
	// fsync per batch of up to 1024 entries or 2 ms), "always" (one fsync
	// per entry, ~1 ms each) or "none" (written to the OS without fsync:
	// survives kill -9, not a power cut). Default "batch".
	WALSync string
	// WALBatchInterval bounds how long a group commit waits to gather
	// entries before its fsync (yaml wal_batch_interval): the added ack
	// latency. Default 2ms; > 0.
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
}

// Default returns the configuration with every default of contract §6 set
// and Market empty. The market-derived values (mqtt.topic, mqtt.client_id,
// nats.stream, state.dir and the jetstream stream, subject and consumer)
// are left empty: Parse fills them once the market is known, where the file did not set them.
func Default() Config {
	return Config{
		Source: "mqtt",
		JetStream: JetStream{
			Partitions: 1,
			PinTTL:     10 * time.Second,
			Replicas:   3,
		},
		MQTT: MQTT{
			URL:           "mqtt://127.0.0.1:1883",
			SessionExpiry: 24 * time.Hour,
		},
		NATS: NATS{
			URL:             "nats://127.0.0.1:4222",
			SubjectPrefix:   "delivery",
			DuplicateWindow: 10 * time.Minute,
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
		Distance: Distance{MinMoveM: 10, MaxSpeedKmh: 150, StoppedBelowM: 50},
		Geo:      Geo{H3Resolution: 9},
		State:    State{CheckpointInterval: 10 * time.Second, WALSync: "batch", WALBatchInterval: 2 * time.Millisecond, WALBatchMax: 1024},
		HTTP:     HTTP{Listen: "127.0.0.1:9464"},
	}
}

// Parse reads one market's YAML from r: Default() overlaid with the file,
// market-derived defaults filled in, then Validate. file names the source
// in error messages. Parse has no side effects: it reads no environment
// variable and touches no file.
//
// On error it returns the zero Config and an error holding every problem
// found (errors.Join of *FieldError, see FieldErrors). Problems decoding the
// file (syntax, unknown keys, wrong types, bad durations) are reported
// alone; the value rules are checked only once the file decodes cleanly, so
// that a mistyped value does not also produce misleading follow-on errors.
func Parse(r io.Reader, file string) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return Config{}, fmt.Errorf("read %s: %w", file, err)
	}
	if len(data) > MaxFileSize {
		return Config{}, &FieldError{File: file, Err: ErrInvalid,
			Reason: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}
	}
	c := Default()
	d := decoder{lines: map[string]int{}}
	d.decode(bytes.NewReader(data), &c)
	if len(d.errs) > 0 {
		for _, fe := range d.errs {
			fe.File = file
		}
		return Config{}, joinFieldErrors(d.errs)
	}
	derived := c.fillMarketDefaults(d.lines)
	if fes := c.validate(); len(fes) > 0 {
		fes = dropDerived(fes, derived)
		for _, fe := range fes {
			fe.File = file
			fe.Line = d.lines[fe.Field]
		}
		return Config{}, joinFieldErrors(fes)
	}
	return c, nil
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
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("open config %s: %w", path, err)
	}
	defer f.Close()
	return Parse(f, path)
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
	fill("nats.stream", &c.NATS.Stream, "EDGEPROC_"+strings.ReplaceAll(strings.ToUpper(c.Market), "-", "_"))
	fill("state.dir", &c.State.Dir, "./state/"+c.Market)
	fill("jetstream.stream", &c.JetStream.Stream, "POSITIONS_"+strings.ReplaceAll(strings.ToUpper(c.Market), "-", "_"))
	fill("jetstream.subject", &c.JetStream.Subject, "part."+c.Market+"."+PartitionToken+".*")
	fill("jetstream.consumer", &c.JetStream.Consumer, "edgeproc-"+c.Market)
	return filled
}

// Password returns the MQTT password: the value of the environment variable
// named by PasswordEnv, read now, or "" when PasswordEnv is empty or the
// variable is unset.
func (m MQTT) Password() string {
	if m.PasswordEnv == "" {
		return ""
	}
	return os.Getenv(m.PasswordEnv)
}

// Creds returns the NATS user credentials (the text of a .creds file, JWT
// and seed): the value of the environment variable named by CredsEnv, read
// now, or "" when CredsEnv is empty or the variable is unset.
func (n NATS) Creds() string {
	if n.CredsEnv == "" {
		return ""
	}
	return os.Getenv(n.CredsEnv)
}
