package mqtt

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/internal/backoff"
)

// Defaults applied by Start to zero-valued Config fields.
const (
	DefaultSessionExpiry  = defaults.SessionExpiry
	DefaultReceiveMaximum = 1024
	DefaultConnectTimeout = 10 * time.Second
	DefaultKeepAlive      = 30 * time.Second
	DefaultAckInterval    = 5 * time.Millisecond
	DefaultReconnectMin   = 250 * time.Millisecond
	// DefaultReconnectMax keeps the reconnect attempts about a second
	// apart however long the broker was away, so edgeproc is back within
	// about a second of it (a refused connection costs the broker little;
	// the jitter keeps a fleet of edge nodes out of lockstep).
	DefaultReconnectMax = backoff.Reconnect
	DefaultMaxPayload   = defaults.MaxPacketSize
	// PacketOverhead is what the announced Maximum Packet Size adds to
	// MaxPayload: the fixed header (5), the longest topic (2+65535), the
	// packet identifier (2) and room for properties (4 KiB), so that every
	// payload up to MaxPayload is delivered whatever its topic.
	PacketOverhead = 5 + 2 + 65535 + 2 + 4<<10
	// maxPacket is MQTT's largest packet (the Remaining Length limit).
	maxPacket = 268435455
)

// ErrInvalidConfig is wrapped by every configuration error Start returns.
var ErrInvalidConfig = errors.New("invalid mqtt config")

// Config describes one MQTT connection. Start does not modify it.
type Config struct {
	// URL of the broker: mqtt://host[:port] (default port 1883) or
	// mqtts://host[:port] (TLS, default port 8883). Required.
	URL string
	// Topic is the subscription filter, subscribed with QoS 1, e.g.
	// "km0/girona/positions/+". Required.
	Topic string
	// ClientID names the persistent session on the broker; two processes
	// with the same ClientID steal the session from each other. Required.
	ClientID string
	// Username and Password are sent in CONNECT when non-empty. The password
	// comes from the environment upstream; this package never logs it.
	Username, Password string
	// CAFile is a PEM bundle of CAs trusted for mqtts://. Empty means the
	// system pool. Ignored for mqtt://.
	CAFile string
	// SessionExpiry is how long the broker keeps the session (subscription
	// and queued QoS 1 messages) while edgeproc is disconnected. Sent in
	// whole seconds, capped at 2^32-2 s. Default 24h.
	SessionExpiry time.Duration
	// ReceiveMaximum is the number of QoS 1 messages the broker may have in
	// flight to us, unacknowledged. It bounds the memory held for received
	// but unacked messages (at most ReceiveMaximum × MaxPayload: 1 GiB with
	// both defaults, if every message were as large as allowed) and, with
	// AckInterval, the throughput: about ReceiveMaximum per (AckInterval +
	// time to make a message durable). Default 1024.
	ReceiveMaximum uint16
	// ConnectTimeout bounds one connection attempt (TCP, TLS and CONNACK).
	// Default 10s.
	ConnectTimeout time.Duration
	// KeepAlive is the MQTT keep-alive, rounded down to whole seconds (at
	// least 1 s). Default 30s.
	KeepAlive time.Duration
	// AckInterval is how long a PUBACK may wait to be written with the
	// others that follow it, so that a burst of acks costs one write.
	// Default 5ms.
	AckInterval time.Duration
	// ReconnectMin and ReconnectMax bound the reconnect backoff: the first
	// retry waits ReconnectMin, each further one doubles up to ReconnectMax,
	// with ±20 % jitter, never above ReconnectMax. Defaults 250ms and 1s.
	ReconnectMin, ReconnectMax time.Duration
	// MaxPayload is the largest payload the broker may deliver, in bytes:
	// CONNECT announces MaxPayload+PacketOverhead as the Maximum Packet Size.
	// Payloads up to it reach the handler, so one above the 4 KiB position
	// limit is counted and dead-lettered as too_large upstream; the broker
	// discards larger ones for this client unseen, so set the broker's
	// message_size_limit at or below it. Default 1 MiB; at most
	// 268435455-PacketOverhead.
	MaxPayload int
	// OnListening, if set, is called each time the subscription is granted
	// on a new connection, with the time of the SUBACK: from then on, what
	// is published reaches this Source. OnDeaf, if set, is called when that
	// connection goes down (or at Close), with the time it was noticed.
	// Calls alternate strictly, starting with OnListening, and never
	// overlap; they come from the Source's goroutines and must not block
	// or call Close. No message of the connection reaches the handler after
	// its OnDeaf. The service runs its idle rule only in between.
	OnListening func(at time.Time)
	OnDeaf      func(at time.Time)
	// MayConnect, if set, is asked before each connection attempt; an
	// error skips the attempt (logged like a failed one, and backed off).
	// A client that shares its ClientID with others one at a time (the
	// partitioned source's relay, under a lease) uses it not to take the
	// session back from its successor once it no longer may have it.
	MayConnect func() error
}

// withDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.SessionExpiry == 0 {
		c.SessionExpiry = DefaultSessionExpiry
	}
	if c.ReceiveMaximum == 0 {
		c.ReceiveMaximum = DefaultReceiveMaximum
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.AckInterval == 0 {
		c.AckInterval = DefaultAckInterval
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = DefaultReconnectMin
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = DefaultReconnectMax
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	return c
}

// validate checks a defaulted Config and returns the parsed broker URL.
func (c Config) validate() (*url.URL, error) {
	u, err := parseBrokerURL(c.URL)
	if err != nil {
		return nil, err
	}
	if c.Topic == "" {
		return nil, fmt.Errorf("%w: topic: required", ErrInvalidConfig)
	}
	if c.ClientID == "" {
		return nil, fmt.Errorf("%w: client_id: required", ErrInvalidConfig)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"session_expiry", c.SessionExpiry},
		{"connect_timeout", c.ConnectTimeout},
		{"keep_alive", c.KeepAlive},
		{"ack_interval", c.AckInterval},
		{"reconnect_min", c.ReconnectMin},
		{"reconnect_max", c.ReconnectMax},
	} {
		if d.v < 0 {
			return nil, fmt.Errorf("%w: %s: %s is negative", ErrInvalidConfig, d.name, d.v)
		}
	}
	if c.MaxPayload < 0 || c.MaxPayload > maxPacket-PacketOverhead {
		return nil, fmt.Errorf("%w: max_payload %d: must be between 0 and %d bytes", ErrInvalidConfig, c.MaxPayload, maxPacket-PacketOverhead)
	}
	if c.ReconnectMax < c.ReconnectMin {
		return nil, fmt.Errorf("%w: reconnect_max %s is below reconnect_min %s", ErrInvalidConfig, c.ReconnectMax, c.ReconnectMin)
	}
	if c.CAFile != "" && u.Scheme != "mqtts" {
		return nil, fmt.Errorf("%w: ca_file is set but %q is not mqtts://", ErrInvalidConfig, u.Redacted())
	}
	return u, nil
}

// parseBrokerURL accepts mqtt:// and mqtts:// URLs with a host and fills in
// the default port. User info in the URL is rejected so that a password can
// never end up in logs through the URL.
func parseBrokerURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: url: required", ErrInvalidConfig)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: url: %w", ErrInvalidConfig, err)
	}
	var port string
	switch strings.ToLower(u.Scheme) {
	case "mqtt":
		port = "1883"
	case "mqtts":
		port = "8883"
	default:
		return nil, fmt.Errorf("%w: url %q: scheme must be mqtt or mqtts", ErrInvalidConfig, u.Redacted())
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: url %q: credentials belong in username/password, not the URL", ErrInvalidConfig, u.Redacted())
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%w: url %q: missing host", ErrInvalidConfig, raw)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("%w: url %q: unexpected path or query", ErrInvalidConfig, raw)
	}
	out := &url.URL{Scheme: strings.ToLower(u.Scheme), Host: u.Host}
	if u.Port() == "" {
		out.Host = net.JoinHostPort(u.Hostname(), port)
	}
	return out, nil
}

// tlsConfig builds the client TLS configuration for mqtts://: the system pool,
// or only the CAs in caFile when it is set.
func tlsConfig(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read ca_file %s: %w", caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: ca_file %s: no PEM certificate found", ErrInvalidConfig, caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// expirySeconds converts the session expiry to the CONNECT property. 2^32-1
// means "never expires" in MQTT v5, which a finite duration must not become.
func expirySeconds(d time.Duration) uint32 {
	s := d / time.Second
	if s < 1 {
		return 1
	}
	if s >= math.MaxUint32 {
		return math.MaxUint32 - 1
	}
	return uint32(s)
}

// keepAliveSeconds converts the keep-alive to whole seconds in [1, 65535].
func keepAliveSeconds(d time.Duration) uint16 {
	s := d / time.Second
	if s < 1 {
		return 1
	}
	if s > math.MaxUint16 {
		return math.MaxUint16
	}
	return uint16(s)
}
