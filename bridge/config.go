package bridge

import (
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/internal/backoff"
)

// Defaults applied by Open to zero Config fields. Those a market's
// configuration also has are config's, named once there.
const (
	// DefaultSubjectPrefix is the first subject token of every output.
	DefaultSubjectPrefix = defaults.SubjectPrefix
	// DefaultDuplicateWindow is how long the stream remembers a Nats-Msg-Id.
	DefaultDuplicateWindow = defaults.DuplicateWindow
	// DefaultMaxPending is the number of results that may be unacknowledged
	// at once before Publish blocks.
	DefaultMaxPending = 1024
	// DefaultKVInterval is the minimum time between two KV writes of the
	// same courier when its status does not change (config nats.kv_interval).
	DefaultKVInterval = defaults.KVInterval
	// DefaultMaxCouriers caps the couriers the KV table holds (the
	// contract's limits.max_couriers default).
	DefaultMaxCouriers = defaults.MaxCouriers
	// DefaultAckTimeout is how long a publish waits for its ack before it is
	// retried, and the timeout of one KV write.
	DefaultAckTimeout = 5 * time.Second
	// DefaultMaxBackoff caps the delay between two attempts of one result:
	// about a second, so results go out about a second after NATS is back.
	DefaultMaxBackoff = backoff.Reconnect
	// DefaultMaxAge is how long the stream keeps a result (the default of
	// the config key nats.max_age).
	DefaultMaxAge = defaults.MaxAge
	// DefaultMaxBytes bounds the stream's size, 1 GiB (the default of the
	// config key nats.max_bytes).
	DefaultMaxBytes = defaults.MaxBytes
	// Unlimited, as Config.MaxAge or Config.MaxBytes, turns that bound off.
	Unlimited = -1
)

// Output kinds accepted by Config.Subject.
const (
	KindDistance       = "distance"
	KindNoSignal       = "no_signal"
	KindSignalRestored = "signal_restored"
	KindLate           = "late"
	KindRejected       = "rejected"
	KindDeadZone       = "dead_zone"
	KindLeftArea       = "left_area"
	KindEnteredArea    = "entered_area"
	// KindZonePart is the partitioned source's partitions' parts of the
	// market's dead zones (result.ZonePart), at PREFIX.zones.MARKET:
	// kept with the results, so a part is stored before the checkpoint
	// past it, and off the dashboard's subjects.
	KindZonePart = "dead_zone_part"
)

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid bridge config")

var (
	marketRe = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	// A subject token is anything but whitespace, '.', and the wildcards.
	tokenRe = regexp.MustCompile(`^[^\s.*>]+$`)
	// Stream names may not contain whitespace, '.', wildcards or path separators.
	streamRe = regexp.MustCompile(`^[^\s.*>/\\]{1,255}$`)
	bucketRe = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,255}$`)
)

// Config configures one market's Bridge. The zero value of every field but
// Market means its default.
type Config struct {
	// Market is the market name, [a-z0-9_-]{1,32}. Required.
	Market string
	// SubjectPrefix is the first token(s) of every subject, e.g. "delivery"
	// gives delivery.dashboard.MARKET.distance. Default "delivery".
	SubjectPrefix string
	// Stream is the JetStream stream that captures the market's subjects.
	// Default defaults.ResultStream(Market).
	Stream string
	// DuplicateWindow is the stream's Nats-Msg-Id dedup window. Default 10m;
	// at most MaxAge.
	DuplicateWindow time.Duration
	// MaxAge is the stream's retention: older results are deleted.
	// Default 24h; Unlimited (any negative value) keeps them forever.
	MaxAge time.Duration
	// MaxBytes bounds the stream's size in bytes: past it the oldest results
	// are deleted (discard old: publishing never fails for it). Default
	// 1 GiB; Unlimited (any negative value) means no bound.
	MaxBytes int64
	// MaxPending is how many results may await their ack at once; Publish
	// blocks beyond it. Default 1024.
	MaxPending int
	// KVBucket is the key-value bucket of courier state.
	// Default "edgeproc_couriers_" + Market.
	KVBucket string
	// KVInterval is the minimum time between two writes of one courier's
	// state while its status is unchanged: the bucket's position of a
	// courier is at most 1.25 KVInterval older than the newest one given.
	// Default 15s (config nats.kv_interval).
	KVInterval time.Duration
	// MaxCouriers caps the couriers the KV table holds; at the cap the least
	// recently updated courier makes room (counted in Stats.KVEvicted), so
	// every courier keeps being written. Set it to the market's
	// limits.max_couriers. Default 200000.
	MaxCouriers int
	// AckTimeout is how long one publish attempt waits for its ack, and the
	// timeout of one KV write. Default 5s.
	AckTimeout time.Duration
	// MaxBackoff caps the doubling delay between attempts. Default 5s.
	MaxBackoff time.Duration
	// ComputeCell makes the bridge compute the H3 cell (at CellResolution)
	// of a courier state written with an empty Cell, as UpdatePosition
	// leaves it. The cell is computed when the entry is written, at most
	// once per courier per KVInterval plus status changes, never per
	// position: an H3 lookup costs about 1.5 µs. Default false: the cell is
	// written as given.
	ComputeCell bool
	// OnAcked, if set, is called with the time from Publish accepting a
	// result to JetStream acknowledging it (retries included), once per
	// result: the service feeds its close-to-ack latency histogram with it.
	// It runs on nats.go's ack goroutine and must not block. By the time
	// Flush returns it has been called for every result acked so far.
	OnAcked func(time.Duration)
	// CellResolution is the H3 resolution (0..15) used by ComputeCell.
	// Default 0, so set it with ComputeCell (the contract's default is 9).
	CellResolution int
	// Replicas of the stream and the bucket on a JetStream cluster.
	// Default 0: the server's (1).
	Replicas int
}

// Resolved returns c with every default applied: the stream and bucket
// names a market gets, for a consumer that reads them (edgeproc tail).
func (c Config) Resolved() Config { return c.withDefaults() }

// withDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = DefaultSubjectPrefix
	}
	if c.Stream == "" {
		c.Stream = defaults.ResultStream(c.Market)
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.KVBucket == "" {
		// Market names are already valid bucket characters ('-' included).
		c.KVBucket = defaults.CourierBucket(c.Market)
	}
	if c.KVInterval == 0 {
		c.KVInterval = DefaultKVInterval
	}
	if c.MaxCouriers == 0 {
		c.MaxCouriers = DefaultMaxCouriers
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	return c
}

// Validate reports the first invalid field of c once defaults are applied.
// Every error wraps ErrConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: %s %v: %s", ErrConfig, field, v, why)
	}
	if !marketRe.MatchString(c.Market) {
		return bad("market", fmt.Sprintf("%q", c.Market), "must match [a-z0-9_-]{1,32}")
	}
	for _, tok := range strings.Split(c.SubjectPrefix, ".") {
		if !tokenRe.MatchString(tok) {
			return bad("subject_prefix", fmt.Sprintf("%q", c.SubjectPrefix), "must be dot-separated tokens without spaces or wildcards")
		}
	}
	if !streamRe.MatchString(c.Stream) {
		return bad("stream", fmt.Sprintf("%q", c.Stream), "must have no spaces, '.', '*', '>' or path separators")
	}
	if !bucketRe.MatchString(c.KVBucket) {
		return bad("kv_bucket", fmt.Sprintf("%q", c.KVBucket), "must match [a-zA-Z0-9_-]+")
	}
	if c.DuplicateWindow < 0 {
		return bad("duplicate_window", c.DuplicateWindow, "must be positive")
	}
	if c.MaxAge > 0 && c.DuplicateWindow > c.MaxAge {
		return bad("duplicate_window", c.DuplicateWindow, fmt.Sprintf("must not be longer than max_age %s", c.MaxAge))
	}
	if c.MaxPending < 0 {
		return bad("max_pending", c.MaxPending, "must be positive")
	}
	if c.KVInterval < 0 {
		return bad("kv_interval", c.KVInterval, "must be positive")
	}
	if c.MaxCouriers < 0 {
		return bad("max_couriers", c.MaxCouriers, "must be positive")
	}
	if c.AckTimeout < 0 {
		return bad("ack_timeout", c.AckTimeout, "must be positive")
	}
	if c.ComputeCell && (c.CellResolution < 0 || c.CellResolution > 15) {
		return bad("cell_resolution", c.CellResolution, "must be 0..15")
	}
	if c.MaxBackoff < 0 {
		return bad("max_backoff", c.MaxBackoff, "must be positive")
	}
	return nil
}

// Subject returns the subject of an output kind: KindDistance, KindNoSignal
// and KindSignalRestored go to PREFIX.dashboard.MARKET.KIND, KindLate to
// PREFIX.late.MARKET and KindRejected to PREFIX.rejected.MARKET. Any other
// kind is treated as a dashboard result type.
func (c Config) Subject(kind string) string {
	c = c.withDefaults()
	switch kind {
	case KindLate:
		return c.SubjectPrefix + ".late." + c.Market
	case KindRejected:
		return c.SubjectPrefix + ".rejected." + c.Market
	case KindZonePart:
		return c.SubjectPrefix + ".zones." + c.Market
	default:
		return c.SubjectPrefix + ".dashboard." + c.Market + "." + kind
	}
}

// streamConfig is the market's stream as Open creates it, or updates an
// existing one to: a stream made by an older edgeproc without bounds gets
// them at the next start.
func (c Config) streamConfig() jetstream.StreamConfig {
	c = c.withDefaults()
	sc := jetstream.StreamConfig{
		Name:        c.Stream,
		Description: "edgeproc results of market " + c.Market,
		Subjects:    c.streamSubjects(),
		Storage:     jetstream.FileStorage,
		Duplicates:  c.DuplicateWindow,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      max(c.MaxAge, 0), // JetStream's 0 is no age bound
		MaxBytes:    max(c.MaxBytes, -1),
		MaxMsgs:     -1,
		Replicas:    c.Replicas,
	}
	return sc
}

// streamSubjects lists the subjects the market's stream captures.
func (c Config) streamSubjects() []string {
	c = c.withDefaults()
	return []string{
		c.SubjectPrefix + ".dashboard." + c.Market + ".>",
		c.Subject(KindLate),
		c.Subject(KindRejected),
		c.Subject(KindZonePart),
	}
}

// coversSubject reports whether subject is captured by the market's stream,
// so a typo fails Publish instead of being retried forever.
func (c Config) coversSubject(subject string) bool {
	c = c.withDefaults()
	if subject == c.Subject(KindLate) || subject == c.Subject(KindRejected) || subject == c.Subject(KindZonePart) {
		return true
	}
	rest, ok := strings.CutPrefix(subject, c.SubjectPrefix+".dashboard."+c.Market+".")
	if !ok || rest == "" {
		return false
	}
	for _, tok := range strings.Split(rest, ".") {
		if !tokenRe.MatchString(tok) {
			return false
		}
	}
	return true
}

// kvKeyChars reports whether k holds only what a KV key may contain
// (nats.go's rule, [-/_=.a-zA-Z0-9]; ':' is not in it). A loop, not a
// regexp: it runs for every courier-state write.
func kvKeyChars(k string) bool {
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '/', c == '_', c == '=', c == '.':
		default:
			return false
		}
	}
	return true
}

// CourierKey returns the KV key of a courier id. Ids are
// [A-Za-z0-9._:-]{1,64}, but KV keys allow no ':' and no leading, trailing
// or doubled '.', so ':' becomes '=' (which no id contains); an id that is
// still not a valid key becomes "b64/" + its unpadded base64url form ('/'
// appears in no other key). Distinct ids always get distinct keys. The
// value stored under the key carries the original id.
func CourierKey(courier string) string {
	// An input that already holds '=' or '/' could collide with a mapped
	// or encoded key, so it is encoded too.
	if !strings.ContainsAny(courier, "=/") {
		k := strings.ReplaceAll(courier, ":", "=")
		if k != "" && k[0] != '.' && k[len(k)-1] != '.' && !strings.Contains(k, "..") && kvKeyChars(k) {
			return k
		}
	}
	return "b64/" + base64.RawURLEncoding.EncodeToString([]byte(courier))
}
