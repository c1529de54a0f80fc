package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// mustParse parses src named file, failing the test on error.
func mustParse(tb testing.TB, src string) Config {
	tb.Helper()
	c, err := Parse(strings.NewReader(src), "test.yaml")
	if err != nil {
		tb.Fatalf("Parse: %v", err)
	}
	return c
}

// jetStreamDefaults is the jetstream section a file without one gets.
func jetStreamDefaults(upper, market string) JetStream {
	return JetStream{
		Stream: "POSITIONS_" + upper, Subject: "part." + market + ".{partition}.*", Partitions: 1,
		Consumer: "edgeproc-" + market, PinTTL: 10 * time.Second, Replicas: 3, MaxAge: 24 * time.Hour, Ingest: "mqtt",
	}
}

// contractGirona is contract §6 with the project's distance defaults.
func contractGirona() Config {
	return Config{
		Market:    "girona",
		Timezone:  "UTC",
		Source:    "mqtt",
		JetStream: jetStreamDefaults("GIRONA", "girona"),
		MQTT: MQTT{
			URL:           "mqtt://127.0.0.1:1883",
			Topic:         "km0/girona/positions/+",
			ClientID:      "edgeproc-girona",
			SessionExpiry: 24 * time.Hour,
			MaxPacketSize: 1 << 20, // the project's: 1 MiB
			Format:        "edgeproc",
			// the project's: the first + of owntracks/+/+
			OwnTracksCourier: "user",
		},
		NATS: NATS{
			URL:             "nats://127.0.0.1:4222",
			SubjectPrefix:   "delivery",
			Stream:          "EDGEPROC_GIRONA",
			DuplicateWindow: 10 * time.Minute,
			KVInterval:      15 * time.Second, // the project's
			MaxAge:          24 * time.Hour,
			MaxBytes:        1 << 30,
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
		DeadZones: DeadZones{Window: time.Hour, H3Resolution: 8, MaxCells: 10000},
		State:     State{Dir: "./state/girona", CheckpointInterval: 10 * time.Second, WALSync: "batch", WALBatchInterval: 40 * time.Millisecond, WALBatchMax: 1024},
		HTTP:      HTTP{Listen: "127.0.0.1:9464", Board: true},
		Limits:    Limits{MaxCouriers: 200_000},
		Lake:      Lake{RollInterval: 10 * time.Minute},
		Log:       Log{Level: "info"},
	}
}

func TestDefault_MatchesContract(t *testing.T) {
	want := contractGirona()
	want.Market = ""
	want.MQTT.Topic, want.MQTT.ClientID, want.NATS.Stream, want.State.Dir = "", "", "", ""
	want.JetStream.Stream, want.JetStream.Subject, want.JetStream.Consumer = "", "", ""
	if got := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("Default():\n got %+v\nwant %+v", got, want)
	}
}

func TestDefault_IsFresh(t *testing.T) {
	a := Default()
	a.Windows.Size = time.Hour
	if got := Default().Windows.Size; got != 5*time.Minute {
		t.Errorf("Default().Windows.Size after mutating a copy = %v, want 5m", got)
	}
}

func TestParse_OnlyMarketGetsAllDefaults(t *testing.T) {
	tests := []struct {
		name, src string
		want      func() Config
	}{
		{"girona", "market: girona\n", contractGirona},
		{"dash in market", "market: costa-brava\n", func() Config {
			c := contractGirona()
			c.Market = "costa-brava"
			c.MQTT.Topic = "km0/costa-brava/positions/+"
			c.MQTT.ClientID = "edgeproc-costa-brava"
			c.NATS.Stream = "EDGEPROC_COSTA_BRAVA"
			c.State.Dir = "./state/costa-brava"
			c.JetStream = jetStreamDefaults("COSTA_BRAVA", "costa-brava")
			return c
		}},
		{"null sections and null keys keep defaults", "market: girona\nmqtt:\nwindows: ~\nnats:\n  stream:\n", contractGirona},
		{"file overrides market-derived defaults", "market: girona\nmqtt:\n  topic: a/b/+\n  client_id: c1\nnats:\n  stream: S\nstate:\n  dir: /var/lib/x\n", func() Config {
			c := contractGirona()
			c.MQTT.Topic, c.MQTT.ClientID, c.NATS.Stream, c.State.Dir = "a/b/+", "c1", "S", "/var/lib/x"
			return c
		}},
		{"document marker and comments", "# market file\n---\nmarket: girona # here\n...\n", contractGirona},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := mustParse(t, tt.src), tt.want(); !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestLoad_Testdata(t *testing.T) {
	girona := contractGirona()
	girona.MQTT.Username = "edgeproc"
	girona.MQTT.PasswordEnv = "EDGEPROC_MQTT_PASSWORD"
	girona.NATS.CredsEnv = "EDGEPROC_NATS_CREDS"
	girona.Distance.MinMoveM, girona.Distance.MaxSpeedKmh = 0, 0

	valencia := Config{
		Market:    "valencia",
		Timezone:  "Europe/Madrid",
		Source:    "mqtt",
		JetStream: jetStreamDefaults("VALENCIA", "valencia"),
		MQTT: MQTT{
			URL:           "mqtts://127.0.0.1:8883",
			Topic:         "owntracks/+/+",
			ClientID:      "edgeproc-valencia",
			Username:      "edgeproc-valencia",
			PasswordEnv:   "VALENCIA_MQTT_PASSWORD",
			CAFile:        "/etc/edgeproc/km0-ca.pem",
			SessionExpiry: 24 * time.Hour,
			MaxPacketSize: 256 << 10,
			Format:        "owntracks", OwnTracksCourier: "device",
		},
		NATS: NATS{URL: "embedded", SubjectPrefix: "km0.delivery", Stream: "EDGEPROC_VALENCIA", DuplicateWindow: 10 * time.Minute, KVInterval: 5 * time.Second,
			MaxAge: 12 * time.Hour, MaxBytes: 2 << 30},
		Windows: Windows{
			Size: 10 * time.Minute, Slide: 2 * time.Minute, Gap: 4 * time.Minute,
			ToleratedDelay: 90 * time.Second, IdleTimeout: 0, MaxFutureSkew: 2 * time.Minute, RestoreTTL: 24 * time.Hour,
		},
		Distance:  Distance{MinMoveM: 15, MaxSpeedKmh: 120, StoppedBelowM: 80},
		Geo:       Geo{H3Resolution: 8},
		DeadZones: DeadZones{Window: 30 * time.Minute, H3Resolution: 7, MaxCells: 500},
		State:     State{Dir: "./state/valencia", CheckpointInterval: 30 * time.Second, WALSync: "always", WALBatchInterval: 40 * time.Millisecond, WALBatchMax: 1024},
		HTTP:      HTTP{Listen: "127.0.0.1:9465", Board: false, BoardTiles: "http://tiles.valencia.lan/{z}/{x}/{y}.png", Pprof: true},
		Limits:    Limits{MaxCouriers: 200_000},
		Lake:      Lake{Dir: "/var/lib/edgeproc/lake", RollInterval: 5 * time.Minute, Retention: 90 * 24 * time.Hour},
		Log:       Log{Level: "debug"},
	}
	for _, tt := range []struct {
		file string
		want Config
	}{
		{"girona.yaml", girona},
		{"valencia.yaml", valencia},
	} {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Load(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestLoad_MissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(p)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want an error wrapping os.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), p) {
		t.Errorf("got %q, want the path in the message", err)
	}
}

func TestLoad_ErrorNamesFileAndLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "girona.yaml")
	if err := os.WriteFile(p, []byte("market: girona\nwindows:\n  gap: 0s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	want := p + `:3: windows.gap = "0s": must be positive`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

func TestWindows_Millis(t *testing.T) {
	w := Windows{
		Size: 5 * time.Minute, Slide: 1500 * time.Millisecond, Gap: 3 * time.Minute, ToleratedDelay: 45 * time.Second,
		IdleTimeout: 0, MaxFutureSkew: time.Minute, RestoreTTL: 24 * time.Hour,
	}
	want := WindowsMs{Size: 300000, Slide: 1500, Gap: 180000, ToleratedDelay: 45000, IdleTimeout: 0, MaxFutureSkew: 60000, RestoreTTL: 86400000}
	if got := w.Millis(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestSecrets_ReadFromEnvironmentAtCallTime(t *testing.T) {
	c := mustParse(t, "market: girona\nmqtt:\n  password_env: EDGEPROC_TEST_PW\nnats:\n  creds_env: EDGEPROC_TEST_CREDS\n")
	if got := c.MQTT.Password(); got != "" {
		t.Errorf("Password() with variable unset = %q, want empty", got)
	}
	// Set after parsing: the value must be read when asked for, not cached.
	t.Setenv("EDGEPROC_TEST_PW", "s3cret")
	t.Setenv("EDGEPROC_TEST_CREDS", "-----BEGIN NATS USER JWT-----")
	if got := c.MQTT.Password(); got != "s3cret" {
		t.Errorf("Password() = %q, want %q", got, "s3cret")
	}
	if got := c.NATS.Creds(); got != "-----BEGIN NATS USER JWT-----" {
		t.Errorf("Creds() = %q, want the variable's value", got)
	}
	var empty Config
	if got := empty.MQTT.Password() + empty.NATS.Creds(); got != "" {
		t.Errorf("Password()+Creds() with no env names = %q, want empty", got)
	}
}

func TestParse_Sizes(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"65536", 65536},
		{"1MiB", 1 << 20},
		{"512KiB", 512 << 10},
		{"64kB", 64000},
		{"64KB", 64000},
		{"2MB", 2_000_000},
		{"1024B", 1024},
		{"256 MiB", 256 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			c := mustParse(t, "market: girona\nmqtt:\n  max_packet_size: "+tt.in+"\n")
			if c.MQTT.MaxPacketSize != tt.want {
				t.Errorf("got %d, want %d", c.MQTT.MaxPacketSize, tt.want)
			}
		})
	}
	for _, bad := range []struct {
		in  string
		err error
	}{
		{"1.5MiB", ErrBadSize}, {"1 mb", ErrBadSize}, {"MiB", ErrBadSize}, {"-1", ErrBadSize}, {"1TiB", ErrOutOfRange},
		{"3GiB", ErrOutOfRange}, {"99999999999999999999", ErrBadSize},
		{"1023", ErrOutOfRange}, {"257MiB", ErrOutOfRange}, {"0", ErrOutOfRange},
	} {
		t.Run("bad "+bad.in, func(t *testing.T) {
			fe := wantOneFieldError(t, "market: girona\nmqtt:\n  max_packet_size: "+bad.in+"\n", "mqtt.max_packet_size", bad.err)
			if fe.Line != 3 {
				t.Errorf("got line %d, want 3", fe.Line)
			}
		})
	}
}

func TestLoadLive_UnsetSecretIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "girona.yaml")
	src := "market: girona\nmqtt:\n  password_env: EDGEPROC_TEST_MQTT_PW\nnats:\n  creds_env: EDGEPROC_TEST_NATS_CREDS\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Fatalf("Load (no secrets needed): %v", err)
	}
	t.Setenv("EDGEPROC_TEST_NATS_CREDS", "")
	_, err := LoadLive(path)
	fes := FieldErrors(err)
	if len(fes) != 2 || !errors.Is(err, ErrEnvUnset) {
		t.Fatalf("LoadLive with both unset: got %v, want two ErrEnvUnset", err)
	}
	for i, want := range []struct {
		field, env, reason string
		line               int
	}{
		{"mqtt.password_env", "EDGEPROC_TEST_MQTT_PW", "is not set", 3},
		{"nats.creds_env", "EDGEPROC_TEST_NATS_CREDS", "is set but empty", 5},
	} {
		fe := fes[i]
		if fe.Field != want.field || fe.Value != want.env || fe.Line != want.line || fe.File != path ||
			!strings.Contains(fe.Error(), want.env+" "+want.reason) {
			t.Errorf("error %d: got %+v (%q), want %s naming %s at %s:%d", i, fe, fe, want.field, want.env, path, want.line)
		}
	}
	t.Setenv("EDGEPROC_TEST_MQTT_PW", "pw")
	t.Setenv("EDGEPROC_TEST_NATS_CREDS", "creds")
	if c, err := LoadLive(path); err != nil || c.MQTT.Password() != "pw" {
		t.Fatalf("LoadLive with both set: %v", err)
	}
}

// TestLoad_ServiceArea: geo.service_area is read relative to the
// configuration's directory and loaded; a file that is not an area is
// refused naming the key, the file and what is wrong.
func TestLoad_ServiceArea(t *testing.T) {
	dir := t.TempDir()
	area, err := os.ReadFile("../demo/girona-area.geojson")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("girona.geojson", string(area))
	write("bad.geojson", `{"type":"Polygon","coordinates":[[[2.8,41.9],[2.9,41.9],[2.9,42.0]]]}`)
	c, err := Load(write("ok.yaml", "market: girona\ngeo:\n  service_area: girona.geojson\n"))
	if err != nil || c.Geo.Area == nil || c.Geo.Area.Len() == 0 || c.Geo.ServiceArea != "girona.geojson" {
		t.Fatalf("got %+v, %v; want the area loaded", c.Geo, err)
	}
	_, err = Load(write("bad.yaml", "market: girona\ngeo:\n  service_area: bad.geojson\n"))
	for _, want := range []string{"bad.yaml:3", "geo.service_area", "bad.geojson", "ring 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error naming %q", err, want)
		}
	}
	if _, err := Load(write("none.yaml", "market: girona\ngeo:\n  service_area: none.geojson\n")); err == nil || !strings.Contains(err.Error(), "none.geojson") {
		t.Errorf("got %v, want an error naming the missing file", err)
	}
}
