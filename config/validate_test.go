package config

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// wantOneFieldError parses src and checks it fails with exactly one
// FieldError for field, wrapping sentinel, naming the file.
func wantOneFieldError(t *testing.T, src, field string, sentinel error) *FieldError {
	t.Helper()
	_, err := Parse(strings.NewReader(src), "girona.yaml")
	if err == nil {
		t.Fatalf("Parse succeeded, want %s error %v", field, sentinel)
	}
	fes := FieldErrors(err)
	if len(fes) != 1 {
		t.Fatalf("got %d errors (%v), want 1", len(fes), err)
	}
	fe := fes[0]
	if fe.Field != field {
		t.Errorf("got Field %q, want %q (error: %v)", fe.Field, field, err)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("got %v, want errors.Is(err, %v)", err, sentinel)
	}
	if !strings.HasPrefix(err.Error(), "girona.yaml") {
		t.Errorf("got %q, want it to start with the file name", err)
	}
	if field != "" && !strings.Contains(err.Error(), field) {
		t.Errorf("got %q, want it to name %q", err, field)
	}
	return fe
}

func TestValidate_Rules(t *testing.T) {
	const m = "market: girona\n"
	const j = m + "source: jetstream\n"
	tests := []struct {
		name, src, field string
		err              error
	}{
		// market
		{"market missing", "mqtt:\n  url: embedded\n", "market", ErrRequired},
		{"market empty", "market: ''\n", "market", ErrRequired},
		{"market upper case", "market: Girona\n", "market", ErrInvalid},
		{"market too long", "market: " + strings.Repeat("a", 33) + "\n", "market", ErrInvalid},
		{"market with space", "market: 'gi rona'\n", "market", ErrInvalid},
		{"market with dot", "market: gi.rona\n", "market", ErrInvalid},

		// source and jetstream
		{"source unknown", m + "source: kafka\n", "source", ErrInvalid},
		{"subject without partition", j + "jetstream:\n  subject: part.girona.*\n", "jetstream.subject", ErrInvalid},
		{"subject with two partitions", j + "jetstream:\n  subject: p.{partition}.{partition}.*\n", "jetstream.subject", ErrInvalid},
		{"subject not ending in courier wildcard", j + "jetstream:\n  subject: part.{partition}.x\n", "jetstream.subject", ErrInvalid},
		{"subject partition inside a token", j + "jetstream:\n  subject: part.p{partition}.*\n", "jetstream.subject", ErrInvalid},
		{"subject empty token", j + "jetstream:\n  subject: part..{partition}.*\n", "jetstream.subject", ErrInvalid},
		{"subject inner wildcard", j + "jetstream:\n  subject: part.*.{partition}.*\n", "jetstream.subject", ErrInvalid},
		{"partitions zero", j + "jetstream:\n  partitions: 0\n", "jetstream.partitions", ErrOutOfRange},
		{"partitions too many", j + "jetstream:\n  partitions: 1025\n", "jetstream.partitions", ErrOutOfRange},
		{"consumer with dot", j + "jetstream:\n  consumer: a.b\n", "jetstream.consumer", ErrInvalid},
		{"stream with space", j + "jetstream:\n  stream: 'a b'\n", "jetstream.stream", ErrInvalid},
		{"pin_ttl zero", j + "jetstream:\n  pin_ttl: 0s\n", "jetstream.pin_ttl", ErrNotPositive},
		{"pin_ttl below a second", j + "jetstream:\n  pin_ttl: 500ms\n", "jetstream.pin_ttl", ErrOutOfRange},
		{"max_owned negative", j + "jetstream:\n  max_owned: -1\n", "jetstream.max_owned", ErrOutOfRange},
		{"replicas zero", j + "jetstream:\n  replicas: 0\n", "jetstream.replicas", ErrOutOfRange},
		{"replicas six", j + "jetstream:\n  replicas: 6\n", "jetstream.replicas", ErrOutOfRange},
		{"instance with control character", j + "jetstream:\n  instance: \"a\\tb\"\n", "jetstream.instance", ErrInvalid},
		{"positions max_age negative", j + "jetstream:\n  max_age: -1h\n", "jetstream.max_age", ErrNegative},
		{"positions max_age fraction of a second", j + "jetstream:\n  max_age: 2h500ms\n", "jetstream.max_age", ErrInvalid},
		{"positions max_age under an hour", j + "jetstream:\n  max_age: 59m\n", "jetstream.max_age", ErrOutOfRange},
		{"positions max_age under 10 checkpoints", j + "jetstream:\n  max_age: 2h\nstate:\n  checkpoint_interval: 15m\n", "jetstream.max_age", ErrOutOfRange},
		{"ingest unknown", j + "jetstream:\n  ingest: kafka\n", "jetstream.ingest", ErrInvalid},
		{"positions max_bytes negative", j + "jetstream:\n  max_bytes: -1\n", "jetstream.max_bytes", ErrBadSize},

		// windows
		{"size zero", m + "windows:\n  size: 0s\n", "windows.size", ErrNotPositive},
		{"size negative", m + "windows:\n  size: -5m\n", "windows.size", ErrNotPositive},
		{"slide zero", m + "windows:\n  slide: 0\n", "windows.slide", ErrNotPositive},
		{"slide larger than size", m + "windows:\n  size: 1m\n  slide: 2m\n", "windows.slide", ErrOutOfRange},
		{"slide larger than default size", m + "windows:\n  slide: 6m\n", "windows.slide", ErrOutOfRange},
		{"too many windows per position", m + "windows:\n  size: 1h\n  slide: 1ms\n", "windows.slide", ErrOutOfRange},
		{"gap zero", m + "windows:\n  gap: 0s\n", "windows.gap", ErrNotPositive},
		{"tolerated_delay negative", m + "windows:\n  tolerated_delay: -1s\n", "windows.tolerated_delay", ErrNegative},
		{"allowed_lateness negative", m + "windows:\n  allowed_lateness: -10s\n", "windows.allowed_lateness", ErrNegative},
		{"allowed_lateness sub-millisecond", m + "windows:\n  allowed_lateness: 1500us\n", "windows.allowed_lateness", ErrInvalid},
		{"allowed_lateness over 10000 slides", m + "windows:\n  slide: 1s\n  allowed_lateness: 10001s\n  restore_ttl: 48h\n", "windows.allowed_lateness", ErrOutOfRange},
		{"restore_ttl below size + allowed_lateness", m + "windows:\n  allowed_lateness: 2m\n  restore_ttl: 6m\n", "windows.restore_ttl", ErrOutOfRange},
		{"default restore_ttl below size + allowed_lateness", m + "windows:\n  allowed_lateness: 24h\n", "windows.restore_ttl", ErrOutOfRange},
		{"idle_timeout negative", m + "windows:\n  idle_timeout: -1s\n", "windows.idle_timeout", ErrNegative},
		{"max_future_skew negative", m + "windows:\n  max_future_skew: -1m\n", "windows.max_future_skew", ErrNegative},
		{"restore_ttl zero", m + "windows:\n  restore_ttl: 0s\n", "windows.restore_ttl", ErrNotPositive},
		{"size sub-millisecond", m + "windows:\n  size: 5m500us\n", "windows.size", ErrInvalid},
		{"slide sub-millisecond", m + "windows:\n  slide: 1500us\n", "windows.slide", ErrInvalid},
		{"gap sub-millisecond", m + "windows:\n  gap: 1ns\n", "windows.gap", ErrInvalid},
		{"tolerated_delay sub-millisecond", m + "windows:\n  tolerated_delay: 1.5ms\n", "windows.tolerated_delay", ErrInvalid},
		{"idle_timeout sub-millisecond", m + "windows:\n  idle_timeout: 10us\n", "windows.idle_timeout", ErrInvalid},
		{"max_future_skew sub-millisecond", m + "windows:\n  max_future_skew: 1000001us\n", "windows.max_future_skew", ErrInvalid},
		{"restore_ttl sub-millisecond", m + "windows:\n  restore_ttl: 1h1ns\n", "windows.restore_ttl", ErrInvalid},
		{"restore_ttl 1 ms below size", m + "windows:\n  restore_ttl: 299999ms\n", "windows.restore_ttl", ErrOutOfRange},
		{"restore_ttl 1 ms below gap", m + "windows:\n  size: 1m\n  gap: 10m\n  restore_ttl: 599999ms\n", "windows.restore_ttl", ErrOutOfRange},

		// limits
		{"max_couriers zero", m + "limits:\n  max_couriers: 0\n", "limits.max_couriers", ErrNotPositive},
		{"max_couriers negative", m + "limits:\n  max_couriers: -1\n", "limits.max_couriers", ErrNotPositive},
		{"max_couriers fraction", m + "limits:\n  max_couriers: 1.5\n", "limits.max_couriers", ErrWrongType},

		// distance
		{"min_move_m negative", m + "distance:\n  min_move_m: -1\n", "distance.min_move_m", ErrNegative},
		{"max_speed_kmh negative", m + "distance:\n  max_speed_kmh: -0.5\n", "distance.max_speed_kmh", ErrNegative},
		{"stopped_below_m negative", m + "distance:\n  stopped_below_m: -50\n", "distance.stopped_below_m", ErrNegative},
		{"min_move_m NaN", m + "distance:\n  min_move_m: .nan\n", "distance.min_move_m", ErrInvalid},
		{"max_speed_kmh infinite", m + "distance:\n  max_speed_kmh: .inf\n", "distance.max_speed_kmh", ErrInvalid},
		{"stopped_below_m -infinite", m + "distance:\n  stopped_below_m: -.inf\n", "distance.stopped_below_m", ErrInvalid},

		// geo
		{"h3 negative", m + "geo:\n  h3_resolution: -1\n", "geo.h3_resolution", ErrOutOfRange},
		{"h3 16", m + "geo:\n  h3_resolution: 16\n", "geo.h3_resolution", ErrOutOfRange},
		{"dead zone h3 16", m + "dead_zones:\n  h3_resolution: 16\n", "dead_zones.h3_resolution", ErrOutOfRange},
		{"dead zone window negative", m + "dead_zones:\n  window: -1h\n", "dead_zones.window", ErrOutOfRange},
		{"dead zone window of microseconds", m + "dead_zones:\n  window: 1500us\n", "dead_zones.window", ErrOutOfRange},
		{"dead zone cells 0", m + "dead_zones:\n  max_cells: 0\n", "dead_zones.max_cells", ErrNotPositive},

		// mqtt
		{"mqtt url empty", m + "mqtt:\n  url: ''\n", "mqtt.url", ErrRequired},
		{"mqtt url tcp scheme", m + "mqtt:\n  url: tcp://127.0.0.1:1883\n", "mqtt.url", ErrInvalid},
		{"mqtt url nats scheme", m + "mqtt:\n  url: nats://127.0.0.1:4222\n", "mqtt.url", ErrInvalid},
		{"mqtt url no scheme", m + "mqtt:\n  url: 127.0.0.1:1883\n", "mqtt.url", ErrInvalid},
		{"mqtt url no host", m + "mqtt:\n  url: 'mqtt://:1883'\n", "mqtt.url", ErrInvalid},
		{"mqtt url bad port", m + "mqtt:\n  url: 'mqtt://127.0.0.1:port'\n", "mqtt.url", ErrInvalid},
		{"mqtt url port too big", m + "mqtt:\n  url: 'mqtt://127.0.0.1:70000'\n", "mqtt.url", ErrInvalid},
		{"mqtt url Embedded", m + "mqtt:\n  url: Embedded\n", "mqtt.url", ErrInvalid},
		{"mqtt url with password", m + "mqtt:\n  url: 'mqtt://u:hunter2@127.0.0.1:1883'\n", "mqtt.url", ErrInvalid},
		{"topic empty", m + "mqtt:\n  topic: ''\n", "mqtt.topic", ErrRequired},
		{"topic plus inside level", m + "mqtt:\n  topic: km0/gi+/positions\n", "mqtt.topic", ErrInvalid},
		{"topic hash not last", m + "mqtt:\n  topic: km0/#/positions\n", "mqtt.topic", ErrInvalid},
		{"topic hash inside level", m + "mqtt:\n  topic: km0/positions#\n", "mqtt.topic", ErrInvalid},
		{"topic NUL", m + "mqtt:\n  topic: \"km0/\\0/x\"\n", "mqtt.topic", ErrInvalid},
		{"client_id empty", m + "mqtt:\n  client_id: ''\n", "mqtt.client_id", ErrRequired},
		{"client_id control char", m + "mqtt:\n  client_id: \"a\\tb\"\n", "mqtt.client_id", ErrInvalid},
		{"password_env is a secret", m + "mqtt:\n  password_env: 'hunter2!'\n", "mqtt.password_env", ErrInvalid},
		{"password_env starts with digit", m + "mqtt:\n  password_env: 1PW\n", "mqtt.password_env", ErrInvalid},
		{"ca_file without mqtts", m + "mqtt:\n  ca_file: /etc/ca.pem\n", "mqtt.ca_file", ErrInvalid},
		{"session_expiry zero", m + "mqtt:\n  session_expiry: 0s\n", "mqtt.session_expiry", ErrNotPositive},
		{"session_expiry fraction of second", m + "mqtt:\n  session_expiry: 1500ms\n", "mqtt.session_expiry", ErrInvalid},
		{"session_expiry too long", m + "mqtt:\n  session_expiry: 2000000h\n", "mqtt.session_expiry", ErrOutOfRange},

		// nats
		{"nats url empty", m + "nats:\n  url: ''\n", "nats.url", ErrRequired},
		{"nats url mqtt scheme", m + "nats:\n  url: mqtt://127.0.0.1:1883\n", "nats.url", ErrInvalid},
		{"nats url bad entry in list", m + "nats:\n  url: nats://127.0.0.1:4222,http://127.0.0.1:4223\n", "nats.url", ErrInvalid},
		{"nats url empty entry in list", m + "nats:\n  url: 'nats://127.0.0.1:4222,'\n", "nats.url", ErrInvalid},
		{"nats url with token", m + "nats:\n  url: 'nats://tok@127.0.0.1:4222'\n", "nats.url", ErrInvalid},
		{"subject_prefix empty", m + "nats:\n  subject_prefix: ''\n", "nats.subject_prefix", ErrRequired},
		{"subject_prefix space", m + "nats:\n  subject_prefix: 'de livery'\n", "nats.subject_prefix", ErrInvalid},
		{"subject_prefix star", m + "nats:\n  subject_prefix: 'a.*'\n", "nats.subject_prefix", ErrInvalid},
		{"subject_prefix gt", m + "nats:\n  subject_prefix: 'a.>'\n", "nats.subject_prefix", ErrInvalid},
		{"subject_prefix trailing dot", m + "nats:\n  subject_prefix: 'delivery.'\n", "nats.subject_prefix", ErrInvalid},
		{"subject_prefix double dot", m + "nats:\n  subject_prefix: 'a..b'\n", "nats.subject_prefix", ErrInvalid},
		{"creds_env bad name", m + "nats:\n  creds_env: 'my-creds'\n", "nats.creds_env", ErrInvalid},
		{"stream empty", m + "nats:\n  stream: ''\n", "nats.stream", ErrRequired},
		{"stream with dot", m + "nats:\n  stream: A.B\n", "nats.stream", ErrInvalid},
		{"stream with space", m + "nats:\n  stream: 'A B'\n", "nats.stream", ErrInvalid},
		{"duplicate_window zero", m + "nats:\n  duplicate_window: 0s\n", "nats.duplicate_window", ErrNotPositive},

		// state, http
		{"state dir empty", m + "state:\n  dir: ''\n", "state.dir", ErrRequired},
		{"checkpoint_interval zero", m + "state:\n  checkpoint_interval: 0s\n", "state.checkpoint_interval", ErrNotPositive},
		{"checkpoint_interval negative", m + "state:\n  checkpoint_interval: -10s\n", "state.checkpoint_interval", ErrNotPositive},
		{"wal_sync unknown", m + "state:\n  wal_sync: sometimes\n", "state.wal_sync", ErrInvalid},
		{"wal_sync empty", m + "state:\n  wal_sync: ''\n", "state.wal_sync", ErrInvalid},
		{"wal_sync upper case", m + "state:\n  wal_sync: Batch\n", "state.wal_sync", ErrInvalid},
		{"wal_batch_interval zero", m + "state:\n  wal_batch_interval: 0s\n", "state.wal_batch_interval", ErrNotPositive},
		{"wal_batch_max zero", m + "state:\n  wal_batch_max: 0\n", "state.wal_batch_max", ErrNotPositive},
		{"listen empty", m + "http:\n  listen: ''\n", "http.listen", ErrRequired},
		{"listen no port", m + "http:\n  listen: 127.0.0.1\n", "http.listen", ErrInvalid},
		{"listen named port", m + "http:\n  listen: 'localhost:http'\n", "http.listen", ErrInvalid},
		{"listen port too big", m + "http:\n  listen: '127.0.0.1:65536'\n", "http.listen", ErrInvalid},
		{"board_tiles no placeholders", m + "http:\n  board_tiles: 'http://tiles.local/a.png'\n", "http.board_tiles", ErrInvalid},
		{"board_tiles no y", m + "http:\n  board_tiles: 'http://tiles.local/{z}/{x}.png'\n", "http.board_tiles", ErrInvalid},
		{"board_tiles scheme", m + "http:\n  board_tiles: 'ftp://tiles.local/{z}/{x}/{y}.png'\n", "http.board_tiles", ErrInvalid},
		{"board_tiles relative", m + "http:\n  board_tiles: 'tiles/{z}/{x}/{y}.png'\n", "http.board_tiles", ErrInvalid},
		{"board_tiles protocol-relative", m + "http:\n  board_tiles: '//tiles.local/{z}/{x}/{y}.png'\n", "http.board_tiles", ErrInvalid},
		{"board_tiles credentials", m + "http:\n  board_tiles: 'http://u:p@tiles.local/{z}/{x}/{y}.png'\n", "http.board_tiles", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantOneFieldError(t, tt.src, tt.field, tt.err)
		})
	}
}

func TestValidate_Accepts(t *testing.T) {
	const m = "market: girona\n"
	tests := []struct{ name, src string }{
		{"market edge characters", "market: a_b-9\n"},
		{"market 32 chars", "market: " + strings.Repeat("z", 32) + "\n"},
		{"slide equals size", m + "windows:\n  size: 2m\n  slide: 2m\n"},
		{"size not a multiple of slide", m + "windows:\n  size: 5m\n  slide: 2m\n"},
		{"zero tolerated_delay idle_timeout max_future_skew", m + "windows:\n  tolerated_delay: 0\n  idle_timeout: 0\n  max_future_skew: 0s\n"},
		{"whole milliseconds", m + "windows:\n  slide: 1500ms\n  gap: 1m0.001s\n"},
		{"max windows per position", m + "windows:\n  size: 10s\n  slide: 1ms\n"},
		{"distance all off", m + "distance:\n  min_move_m: 0\n  max_speed_kmh: 0\n  stopped_below_m: 0\n"},
		{"distance floats", m + "distance:\n  min_move_m: 7.5\n  max_speed_kmh: 1e2\n"},
		{"restore_ttl exactly size", m + "windows:\n  restore_ttl: 5m\n"},
		{"restore_ttl exactly gap", m + "windows:\n  size: 1m\n  gap: 10m\n  restore_ttl: 10m\n"},
		{"max_couriers 1", m + "limits:\n  max_couriers: 1\n"},
		{"positions max_age unbounded", m + "source: jetstream\njetstream:\n  max_age: 0s\n"},
		{"positions max_age exactly an hour", m + "source: jetstream\njetstream:\n  max_age: 1h\n"},
		{"positions max_age exactly 10 checkpoints", m + "source: jetstream\njetstream:\n  max_age: 150m\nstate:\n  checkpoint_interval: 15m\n"},
		{"h3 bounds low", m + "geo:\n  h3_resolution: 0\n"},
		{"h3 bounds high", m + "geo:\n  h3_resolution: 15\n"},
		{"mqtt embedded", m + "mqtt:\n  url: embedded\n"},
		{"mqtts with ca_file", m + "mqtt:\n  url: mqtts://127.0.0.1\n  ca_file: ca.pem\n"},
		{"mqtt ipv6", m + "mqtt:\n  url: 'mqtt://[::1]:1883'\n"},
		{"topic hash last", m + "mqtt:\n  topic: 'km0/girona/#'\n"},
		{"topic only hash", m + "mqtt:\n  topic: '#'\n"},
		{"topic plus levels", m + "mqtt:\n  topic: '+/girona/+/+'\n"},
		{"topic shared subscription", m + "mqtt:\n  topic: '$share/g/km0/girona/positions/+'\n"},
		{"client_id number", m + "mqtt:\n  client_id: 12345\n"},
		{"session_expiry whole seconds", m + "mqtt:\n  session_expiry: 90s\n"},
		{"nats tls", m + "nats:\n  url: tls://127.0.0.1:4443\n"},
		{"nats embedded", m + "nats:\n  url: embedded\n"},
		{"nats list", m + "nats:\n  url: 'nats://127.0.0.1:4222, nats://127.0.0.1:4223'\n"},
		{"subject_prefix dotted", m + "nats:\n  subject_prefix: km0.prod.delivery\n"},
		{"env names", m + "mqtt:\n  password_env: _PW_1\nnats:\n  creds_env: creds\n"},
		{"listen all interfaces", m + "http:\n  listen: ':9464'\n"},
		{"listen ipv6", m + "http:\n  listen: '[::1]:9464'\n"},
		{"board off", m + "http:\n  board: false\n"},
		{"board_tiles http", m + "http:\n  board_tiles: 'http://10.0.0.5:8080/{z}/{x}/{y}.png'\n"},
		{"board_tiles path", m + "http:\n  board_tiles: '/tiles/{z}/{x}/{y}.png'\n"},
		{"jetstream source", m + "source: jetstream\njetstream:\n  subject: km0.{partition}.girona.*\n  partitions: 1024\n  pin_ttl: 1s\n  replicas: 1\n  instance: edgeproc-a\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustParse(t, tt.src)
		})
	}
}

func TestValidate_ReportsEveryProblemInKeyOrder(t *testing.T) {
	c := contractGirona()
	c.Market = "BAD"
	c.Windows.Gap = 0
	c.Windows.AllowedLateness = 1500 * time.Microsecond
	c.Distance.MinMoveM = math.NaN()
	c.HTTP.Listen = "nowhere"
	c.NATS.KVInterval = time.Microsecond
	c.Log.Level = "verbose"
	fes := FieldErrors(c.Validate())
	want := []struct {
		field string
		err   error
	}{
		{"market", ErrInvalid},
		{"nats.kv_interval", ErrInvalid},
		{"windows.gap", ErrNotPositive},
		{"windows.allowed_lateness", ErrInvalid},
		{"distance.min_move_m", ErrInvalid},
		{"http.listen", ErrInvalid},
		{"log.level", ErrInvalid},
	}
	if len(fes) != len(want) {
		t.Fatalf("got %d errors %v, want %d", len(fes), fes, len(want))
	}
	for i, w := range want {
		if fes[i].Field != w.field || !errors.Is(fes[i], w.err) {
			t.Errorf("error %d: got %s (%v), want %s (%v)", i, fes[i].Field, fes[i].Err, w.field, w.err)
		}
		if fes[i].File != "" || fes[i].Line != 0 {
			t.Errorf("error %d: got File %q Line %d from Validate, want none", i, fes[i].File, fes[i].Line)
		}
	}
}

func TestValidate_ContractConfigIsValid(t *testing.T) {
	if err := contractGirona().Validate(); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
}

func TestValidate_Messages(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"example from the brief", "market: girona\nwindows:\n  gap: 0s\n",
			`girona.yaml:3: windows.gap = "0s": must be positive`},
		{"restore_ttl names allowed_lateness", "market: girona\nwindows:\n  allowed_lateness: 2m\n  restore_ttl: 6m\n",
			`girona.yaml:4: windows.restore_ttl = "6m0s": must be at least max(windows.size + windows.allowed_lateness, windows.gap) (7m0s), since windows.allowed_lateness is 2m0s`},
		{"slide larger than size names both", "market: girona\nwindows:\n  size: 1m\n  slide: 2m\n",
			`girona.yaml:4: windows.slide = "2m0s": must not be larger than windows.size (1m0s)`},
		{"required has no value", "market: ''\n",
			`girona.yaml:1: market: is required`},
		{"missing market has no line", "geo:\n  h3_resolution: 9\n",
			`girona.yaml: market: is required`},
		{"credentials never echoed", "market: girona\nnats:\n  url: 'nats://user:hunter2@127.0.0.1:4222'\n",
			`girona.yaml:3: nats.url: credentials must not be in the URL: secrets come only from the environment`},
		{"wrong scheme redacts password", "market: girona\nmqtt:\n  url: 'http://user:hunter2@127.0.0.1'\n",
			`girona.yaml:3: mqtt.url = "http://user:xxxxx@127.0.0.1": must be mqtt://, mqtts:// or "embedded"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.src), "girona.yaml")
			if err == nil || err.Error() != tt.want {
				t.Errorf("got  %v\nwant %s", err, tt.want)
			}
		})
	}
}

func TestValidate_Retention(t *testing.T) {
	tests := []struct {
		name  string
		set   func(*Config)
		field string
		err   error
	}{
		{"negative max_age", func(c *Config) { c.NATS.MaxAge = -time.Hour }, "nats.max_age", ErrNegative},
		{"max_age not whole seconds", func(c *Config) { c.NATS.MaxAge = 1500 * time.Millisecond }, "nats.max_age", ErrInvalid},
		{"dedup window outlives max_age", func(c *Config) { c.NATS.MaxAge = 5 * time.Minute }, "nats.duplicate_window", ErrOutOfRange},
		{"negative max_bytes", func(c *Config) { c.NATS.MaxBytes = -1 }, "nats.max_bytes", ErrNegative},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := contractGirona()
			tt.set(&c)
			fes := FieldErrors(c.Validate())
			if len(fes) != 1 || fes[0].Field != tt.field || !errors.Is(fes[0], tt.err) {
				t.Fatalf("got %v, want one %s error on %s", fes, tt.err, tt.field)
			}
		})
	}
	c := contractGirona()
	c.NATS.MaxAge, c.NATS.MaxBytes = 0, 0 // unbounded, as JetStream's own default
	if err := c.Validate(); err != nil {
		t.Fatalf("unbounded retention: got %v, want nil", err)
	}
}

func TestJetStream_PartitionSubject(t *testing.T) {
	j := JetStream{Subject: "part.girona.{partition}.*"}
	for n, want := range map[int]string{0: "part.girona.0.*", 3: "part.girona.3.*", 1023: "part.girona.1023.*"} {
		if got := j.PartitionSubject(n); got != want {
			t.Errorf("PartitionSubject(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestValidate_JetStreamSectionOnlyForItsSource(t *testing.T) {
	c := Default() // built in code: no market-derived jetstream names
	c.Market, c.MQTT.Topic, c.MQTT.ClientID, c.NATS.Stream, c.State.Dir = "girona", "km0/girona/positions/+", "edgeproc-girona", "EDGEPROC_GIRONA", "./state/girona"
	if err := c.Validate(); err != nil {
		t.Fatalf("mqtt source with an empty jetstream section: %v", err)
	}
	c.Source = "jetstream"
	fes := FieldErrors(c.Validate())
	if len(fes) == 0 || fes[0].Field != "jetstream.stream" {
		t.Fatalf("jetstream source with an empty jetstream section: %v", fes)
	}
}

func TestValidate_TimezoneFormatLake(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Config)
		field string // "" = valid
	}{
		{"madrid", func(c *Config) { c.Timezone = "Europe/Madrid" }, ""},
		{"unknown zone", func(c *Config) { c.Timezone = "Europe/Girona" }, "timezone"},
		{"empty zone", func(c *Config) { c.Timezone = "" }, "timezone"},
		{"owntracks by device", func(c *Config) {
			c.MQTT.Format, c.MQTT.OwnTracksCourier, c.MQTT.Topic = "owntracks", "device", "owntracks/+/+"
		}, ""},
		{"owntracks by user", func(c *Config) { c.MQTT.Format, c.MQTT.Topic = "owntracks", "owntracks/+/phone" }, ""},
		{"owntracks by device, one level", func(c *Config) {
			c.MQTT.Format, c.MQTT.OwnTracksCourier, c.MQTT.Topic = "owntracks", "device", "owntracks/+/phone"
		}, "mqtt.topic"},
		{"owntracks without a level", func(c *Config) { c.MQTT.Format, c.MQTT.Topic = "owntracks", "owntracks/#" }, "mqtt.topic"},
		{"owntracks shared", func(c *Config) { c.MQTT.Format, c.MQTT.Topic = "owntracks", "$share/edge/owntracks/+/+" }, ""},
		{"owntracks partitioned", func(c *Config) {
			c.MQTT.Format, c.MQTT.Topic, c.Source, c.JetStream = "owntracks", "owntracks/+/+", "jetstream", jetStreamDefaults("GIRONA", "girona")
		}, ""},
		{"owntracks partitioned by device", func(c *Config) {
			c.MQTT.Format, c.MQTT.OwnTracksCourier, c.MQTT.Topic = "owntracks", "device", "owntracks/+/+"
			c.Source, c.JetStream = "jetstream", jetStreamDefaults("GIRONA", "girona")
		}, ""},
		{"owntracks partitioned by device, one level", func(c *Config) {
			c.MQTT.Format, c.MQTT.OwnTracksCourier, c.MQTT.Topic = "owntracks", "device", "owntracks/+/phone"
			c.Source, c.JetStream = "jetstream", jetStreamDefaults("GIRONA", "girona")
		}, "mqtt.topic"},
		{"unknown format", func(c *Config) { c.MQTT.Format = "traccar" }, "mqtt.format"},
		{"unknown level", func(c *Config) { c.MQTT.OwnTracksCourier = "tid" }, "mqtt.owntracks_courier"},
		{"lake kept 30 days", func(c *Config) { c.Lake.Dir, c.Lake.Retention = "/lake", 720*time.Hour }, ""},
		{"retention of hours", func(c *Config) { c.Lake.Retention = 36 * time.Hour }, "lake.retention"},
		{"negative retention", func(c *Config) { c.Lake.Retention = -24 * time.Hour }, "lake.retention"},
		{"no roll", func(c *Config) { c.Lake.RollInterval = 0 }, "lake.roll_interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := contractGirona()
			tt.edit(&c)
			fes := FieldErrors(c.Validate())
			switch {
			case tt.field == "" && len(fes) > 0:
				t.Fatalf("got %v, want valid", fes)
			case tt.field != "" && (len(fes) != 1 || fes[0].Field != tt.field):
				t.Fatalf("got %v, want one error on %s", fes, tt.field)
			}
		})
	}
}

func TestLocation(t *testing.T) {
	c := contractGirona()
	c.Timezone = "Europe/Madrid"
	// 2026-03-29 01:30 UTC is 03:30 in Madrid: the daylight-saving change.
	if got := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC).In(c.Location()).Hour(); got != 3 {
		t.Errorf("got hour %d in Madrid, want 3", got)
	}
}
