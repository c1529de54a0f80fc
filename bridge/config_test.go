package bridge

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/defaults"
)

func TestConfig_Subject(t *testing.T) {
	tests := []struct {
		cfg  Config
		kind string
		want string
	}{
		{Config{Market: "girona"}, KindDistance, "delivery.dashboard.girona.distance"},
		{Config{Market: "girona"}, KindNoSignal, "delivery.dashboard.girona.no_signal"},
		{Config{Market: "girona"}, KindSignalRestored, "delivery.dashboard.girona.signal_restored"},
		{Config{Market: "girona"}, KindLate, "delivery.late.girona"},
		{Config{Market: "girona"}, KindRejected, "delivery.rejected.girona"},
		{Config{Market: "bcn-2", SubjectPrefix: "km0.out"}, KindDistance, "km0.out.dashboard.bcn-2.distance"},
		{Config{Market: "bcn-2", SubjectPrefix: "km0.out"}, KindLate, "km0.out.late.bcn-2"},
	}
	for _, tt := range tests {
		if got := tt.cfg.Subject(tt.kind); got != tt.want {
			t.Errorf("Config{Market: %q, SubjectPrefix: %q}.Subject(%q): got %q, want %q",
				tt.cfg.Market, tt.cfg.SubjectPrefix, tt.kind, got, tt.want)
		}
	}
}

func TestConfig_CoversSubject(t *testing.T) {
	cfg := Config{Market: "girona"}
	tests := []struct {
		subject string
		want    bool
	}{
		{"delivery.dashboard.girona.distance", true},
		{"delivery.dashboard.girona.no_signal", true},
		{"delivery.late.girona", true},
		{"delivery.rejected.girona", true},
		{"delivery.dashboard.girona", false},
		{"delivery.dashboard.girona.", false},
		{"delivery.dashboard.girona.a..b", false},
		{"delivery.dashboard.girona.*", false},
		{"delivery.dashboard.bcn.distance", false},
		{"delivery.late.girona.x", false},
		{"other.late.girona", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := cfg.coversSubject(tt.subject); got != tt.want {
			t.Errorf("coversSubject(%q): got %v, want %v", tt.subject, got, tt.want)
		}
	}
}

func TestConfig_Defaults(t *testing.T) {
	got := Config{Market: "bcn-2"}.withDefaults()
	want := Config{
		Market:          "bcn-2",
		SubjectPrefix:   "delivery",
		Stream:          "EDGEPROC_BCN_2", // the config's rule: '-' as '_'
		DuplicateWindow: 10 * time.Minute,
		MaxPending:      1024,
		KVBucket:        "edgeproc_couriers_bcn-2",
		KVInterval:      15 * time.Second,
		MaxCouriers:     200_000,
		AckTimeout:      5 * time.Second,
		MaxBackoff:      time.Second, // results go out about a second after NATS is back
		MaxAge:          24 * time.Hour,
		MaxBytes:        1 << 30,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults: got %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestConfig_Validate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring naming the field; "" = valid
	}{
		{"minimal", Config{Market: "girona"}, ""},
		{"no market", Config{}, "market"},
		{"upper-case market", Config{Market: "Girona"}, "market"},
		{"market with dot", Config{Market: "a.b"}, "market"},
		{"market too long", Config{Market: strings.Repeat("a", 33)}, "market"},
		{"prefix with wildcard", Config{Market: "g", SubjectPrefix: "a.*"}, "subject_prefix"},
		{"prefix with empty token", Config{Market: "g", SubjectPrefix: "a..b"}, "subject_prefix"},
		{"prefix with space", Config{Market: "g", SubjectPrefix: "a b"}, "subject_prefix"},
		{"stream with dot", Config{Market: "g", Stream: "a.b"}, "stream"},
		{"bucket with dot", Config{Market: "g", KVBucket: "a.b"}, "kv_bucket"},
		{"negative window", Config{Market: "g", DuplicateWindow: -time.Second}, "duplicate_window"},
		{"negative pending", Config{Market: "g", MaxPending: -1}, "max_pending"},
		{"negative kv interval", Config{Market: "g", KVInterval: -1}, "kv_interval"},
		{"negative couriers", Config{Market: "g", MaxCouriers: -1}, "max_couriers"},
		{"negative ack timeout", Config{Market: "g", AckTimeout: -1}, "ack_timeout"},
		{"negative backoff", Config{Market: "g", MaxBackoff: -1}, "max_backoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got no error, want one naming %q", tt.wantErr)
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("got %v, want it to wrap ErrConfig", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %q, want it to name %q", err, tt.wantErr)
			}
		})
	}
}

// kvKeyRe is nats.go's rule for the characters of a key.
var kvKeyRe = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

// validKVKey is nats.go's rule for a key.
func validKVKey(k string) bool {
	if k == "" || k[0] == '.' || k[len(k)-1] == '.' || strings.Contains(k, "..") {
		return false
	}
	return kvKeyRe.MatchString(k)
}

func TestCourierKey(t *testing.T) {
	tests := []struct {
		courier string
		want    string
	}{
		{"van-3", "van-3"},
		{"bike_7.a", "bike_7.a"},
		{"fleet:van:3", "fleet=van=3"},
		{".lead", "b64/LmxlYWQ"},
		{"trail.", "b64/dHJhaWwu"},
		{"a..b", "b64/YS4uYg"},
		{"a=b", "b64/YT1i"}, // not a valid id, but must not collide with "a:b"
		{"a:b", "a=b"},
	}
	for _, tt := range tests {
		got := CourierKey(tt.courier)
		if got != tt.want {
			t.Errorf("CourierKey(%q): got %q, want %q", tt.courier, got, tt.want)
		}
		if !validKVKey(got) {
			t.Errorf("CourierKey(%q) = %q is not a valid KV key", tt.courier, got)
		}
	}
}

func TestCourierKey_Distinct(t *testing.T) {
	ids := []string{"a:b", "a=b", "a/b", "b64/YTpi", ".a", "a.", "a..b", "a.b", "a-b", "a_b", "A", "a", "::", "=="}
	seen := map[string]string{}
	for _, id := range ids {
		k := CourierKey(id)
		if !validKVKey(k) {
			t.Errorf("CourierKey(%q) = %q is not a valid KV key", id, k)
		}
		if prev, ok := seen[k]; ok {
			t.Errorf("CourierKey(%q) = CourierKey(%q) = %q", id, prev, k)
		}
		seen[k] = id
	}
}

// FuzzCourierKey: every key is valid by nats.go's rule (the regexp here),
// and the loop that replaced the product's regexp agrees with it.
func FuzzCourierKey(f *testing.F) {
	for _, s := range []string{"c1", "a:b", "a=b", "a..b", ".x", "é", "a b", "b64/x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := kvKeyChars(s), kvKeyRe.MatchString(s) || s == ""; got != want {
			t.Errorf("kvKeyChars(%q) = %v, regexp says %v", s, got, want)
		}
		if k := CourierKey(s); !validKVKey(k) {
			t.Errorf("CourierKey(%q) = %q is not a valid KV key", s, k)
		}
	})
}

// TestKVBucket_IsTheMarketsDefault: a bridge opened without a bucket
// name uses the market's courier bucket.
func TestKVBucket_IsTheMarketsDefault(t *testing.T) {
	if got := (Config{Market: "bcn-2"}).withDefaults().KVBucket; got != defaults.CourierBucket("bcn-2") {
		t.Errorf("KVBucket %q, want the configuration's %q", got, defaults.CourierBucket("bcn-2"))
	}
}
