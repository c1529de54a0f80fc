package mqtt

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/backoff"
	"github.com/km0/edgeproc/internal/testenv"
)

func TestConfig_Validate(t *testing.T) {
	valid := Config{URL: "mqtt://127.0.0.1:1883", Topic: "km0/girona/positions/+", ClientID: "edgeproc-girona"}
	tests := []struct {
		name    string
		edit    func(*Config)
		wantURL string // when no error is expected
		wantErr string // substring; empty = no error
	}{
		{name: "valid", edit: func(*Config) {}, wantURL: "mqtt://127.0.0.1:1883"},
		{name: "default mqtt port", edit: func(c *Config) { c.URL = "mqtt://broker.local" }, wantURL: "mqtt://broker.local:1883"},
		{name: "default mqtts port", edit: func(c *Config) { c.URL = "mqtts://broker.local" }, wantURL: "mqtts://broker.local:8883"},
		{name: "scheme case", edit: func(c *Config) { c.URL = "MQTT://127.0.0.1:1884" }, wantURL: "mqtt://127.0.0.1:1884"},
		{name: "ipv6", edit: func(c *Config) { c.URL = "mqtt://[::1]" }, wantURL: "mqtt://[::1]:1883"},
		{name: "trailing slash", edit: func(c *Config) { c.URL = "mqtt://127.0.0.1:1883/" }, wantURL: "mqtt://127.0.0.1:1883"},
		{name: "missing url", edit: func(c *Config) { c.URL = "" }, wantErr: "url: required"},
		{name: "bad scheme", edit: func(c *Config) { c.URL = "tcp://127.0.0.1:1883" }, wantErr: "scheme must be mqtt or mqtts"},
		{name: "embedded is resolved upstream", edit: func(c *Config) { c.URL = "embedded" }, wantErr: "scheme"},
		{name: "no host", edit: func(c *Config) { c.URL = "mqtt://:1883" }, wantErr: "missing host"},
		{name: "path", edit: func(c *Config) { c.URL = "mqtt://127.0.0.1:1883/x" }, wantErr: "unexpected path"},
		{name: "credentials in url", edit: func(c *Config) { c.URL = "mqtt://u:secret@127.0.0.1" }, wantErr: "not the URL"},
		{name: "missing topic", edit: func(c *Config) { c.Topic = "" }, wantErr: "topic: required"},
		{name: "missing client id", edit: func(c *Config) { c.ClientID = "" }, wantErr: "client_id: required"},
		{name: "negative expiry", edit: func(c *Config) { c.SessionExpiry = -time.Second }, wantErr: "session_expiry"},
		{name: "negative ack interval", edit: func(c *Config) { c.AckInterval = -time.Millisecond }, wantErr: "ack_interval"},
		{name: "backoff max below min", edit: func(c *Config) { c.ReconnectMin, c.ReconnectMax = time.Minute, time.Second }, wantErr: "reconnect_max"},
		{name: "ca file without tls", edit: func(c *Config) { c.CAFile = "/etc/ssl/ca.pem" }, wantErr: "not mqtts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.edit(&c)
			u, err := c.withDefaults().validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalidConfig) {
					t.Errorf("got error %v, want it to wrap ErrInvalidConfig", err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("error %q leaks the password", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if u.String() != tt.wantURL {
				t.Errorf("got URL %s, want %s", u, tt.wantURL)
			}
		})
	}
}

func TestConfig_Defaults(t *testing.T) {
	got := Config{}.withDefaults()
	want := Config{
		SessionExpiry:  24 * time.Hour,
		ReceiveMaximum: 1024,
		ConnectTimeout: 10 * time.Second,
		KeepAlive:      30 * time.Second,
		AckInterval:    5 * time.Millisecond,
		ReconnectMin:   250 * time.Millisecond,
		ReconnectMax:   time.Second, // back about a second after the broker returns
		MaxPayload:     1 << 20,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got defaults %+v, want %+v", got, want)
	}
	set := Config{SessionExpiry: time.Minute, ReceiveMaximum: 7}.withDefaults()
	if set.SessionExpiry != time.Minute || set.ReceiveMaximum != 7 {
		t.Errorf("got %v and %d, want explicit values kept (1m, 7)", set.SessionExpiry, set.ReceiveMaximum)
	}
}

func TestStart_RejectsBadInput(t *testing.T) {
	cfg := Config{URL: "mqtt://127.0.0.1:1", Topic: "t", ClientID: "c"}
	if _, err := Start(context.Background(), cfg, nil, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil handler: got %v, want ErrInvalidConfig", err)
	}
	cfg.URL = "http://127.0.0.1"
	if _, err := Start(context.Background(), cfg, nil, func(*Message) {}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("bad URL: got %v, want ErrInvalidConfig", err)
	}
	cfg.URL, cfg.CAFile = "mqtts://127.0.0.1", filepath.Join(t.TempDir(), "missing.pem")
	if _, err := Start(context.Background(), cfg, nil, func(*Message) {}); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("missing CA file: got %v, want an error naming the file", err)
	}
}

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	testenv.ServerCert(t, dir)
	caPath := filepath.Join(dir, "cert.pem")
	junkPath := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junkPath, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}

	sys, err := tlsConfig("")
	if err != nil {
		t.Fatalf("system pool: got error %v", err)
	}
	if sys.RootCAs != nil {
		t.Errorf("system pool: got RootCAs set, want nil (use the system pool)")
	}
	ca, err := tlsConfig(caPath)
	if err != nil {
		t.Fatalf("CA file: got error %v", err)
	}
	if ca.RootCAs == nil || ca.MinVersion < 0x0303 {
		t.Errorf("CA file: got RootCAs %v MinVersion %x, want a pool and TLS 1.2+", ca.RootCAs, ca.MinVersion)
	}
	if _, err := tlsConfig(junkPath); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("junk CA file: got %v, want ErrInvalidConfig", err)
	}
}

func TestDurationConversions(t *testing.T) {
	expiry := []struct {
		in   time.Duration
		want uint32
	}{
		{24 * time.Hour, 86400},
		{1500 * time.Millisecond, 1},
		{time.Millisecond, 1},                            // 0 would end the session on disconnect
		{200 * 365 * 24 * time.Hour, math.MaxUint32 - 1}, // MaxUint32 means "never expires"
	}
	for _, tt := range expiry {
		if got := expirySeconds(tt.in); got != tt.want {
			t.Errorf("expirySeconds(%v): got %d, want %d", tt.in, got, tt.want)
		}
	}
	keepAlive := []struct {
		in   time.Duration
		want uint16
	}{
		{30 * time.Second, 30},
		{100 * time.Millisecond, 1},
		{48 * time.Hour, math.MaxUint16},
	}
	for _, tt := range keepAlive {
		if got := keepAliveSeconds(tt.in); got != tt.want {
			t.Errorf("keepAliveSeconds(%v): got %d, want %d", tt.in, got, tt.want)
		}
	}
}

// TestConfig_ReconnectsWithinASecond: with the defaults no wait between
// two attempts exceeds a second, however many failed (a broker away for
// minutes), so edgeproc resubscribes about a second after it returns.
func TestConfig_ReconnectsWithinASecond(t *testing.T) {
	c := Config{}.withDefaults()
	for attempt := range 200 {
		if got := backoff.Delay(attempt, c.ReconnectMin, c.ReconnectMax); got > time.Second {
			t.Fatalf("attempt %d waits %v, want at most 1s", attempt, got)
		}
	}
}
