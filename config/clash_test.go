package config

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckClashes(t *testing.T) {
	girona, valencia := contractGirona(), contractGirona()
	valencia.Market = "valencia"
	valencia.MQTT.ClientID, valencia.NATS.Stream, valencia.State.Dir = "edgeproc-valencia", "EDGEPROC_VALENCIA", "./state/valencia"
	tests := []struct {
		name string
		edit func(v *Config)
		want []string // one clash message fragment each, in order
	}{
		{"distinct markets sharing a listener", func(*Config) {}, nil},
		{"same market twice", func(v *Config) { *v = girona }, []string{
			`same market "girona"`, `same mqtt client_id`, `same nats stream`, `same state dir "state/girona"`}},
		{"same client id on one broker", func(v *Config) { v.MQTT.ClientID = "edgeproc-girona" }, []string{"same mqtt client_id"}},
		{"same client id on another broker is fine", func(v *Config) {
			v.MQTT.ClientID, v.MQTT.URL = "edgeproc-girona", "mqtt://127.0.0.2:1883"
		}, nil},
		{"same state dir written differently", func(v *Config) { v.State.Dir = "state/girona/" }, []string{"same state dir"}},
		{"port under two addresses", func(v *Config) { v.HTTP.Listen = "0.0.0.0:9464" }, []string{"uses the port of"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := valencia
			tt.edit(&v)
			err := CheckClashes([]Config{girona, v})
			lines := []string{}
			if err != nil {
				lines = strings.Split(err.Error(), "\n")
				if !errors.Is(err, ErrClash) {
					t.Errorf("errors.Is(err, ErrClash) = false: %v", err)
				}
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d clashes %q, want %d", len(lines), lines, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("clash %d: got %q, want it to contain %q", i, lines[i], w)
				}
			}
		})
	}
}

func TestWarnings_TopicNamingAnotherMarket(t *testing.T) {
	cfg := func(market, topic string) Config {
		c := contractGirona()
		c.Market, c.MQTT.Topic = market, topic
		return c
	}
	tests := []struct {
		name string
		cfgs []Config
		want []string
	}{
		{"own topic", []Config{cfg("girona", "km0/girona/positions/+")}, nil},
		{"any market", []Config{cfg("girona", "km0/+/positions/+")}, nil},
		{"custom layout", []Config{cfg("girona", "fleet/gi/+")}, nil},
		{"default layout, other market", []Config{cfg("girona", "km0/valencia/positions/+")},
			[]string{`market girona: mqtt.topic "km0/valencia/positions/+" names market valencia`}},
		{"custom layout naming a configured market", []Config{cfg("girona", "fleet/valencia/+"), cfg("valencia", "fleet/valencia/+")},
			[]string{`market girona: mqtt.topic "fleet/valencia/+" names market valencia`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Warnings(tt.cfgs)
			if len(got) != len(tt.want) {
				t.Fatalf("got %q, want %d warnings", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("warning %d: got %q, want prefix %q", i, got[i], w)
				}
			}
		})
	}
}

func TestLogLevel_MostVerboseWins(t *testing.T) {
	with := func(levels ...string) []Config {
		var cs []Config
		for _, l := range levels {
			c := Default()
			c.Log.Level = l
			cs = append(cs, c)
		}
		return cs
	}
	for _, tt := range []struct {
		cfgs []Config
		want string
	}{
		{nil, "info"},
		{with("error"), "error"},
		{with("warn", "debug", "info"), "debug"},
		{with("info", "warn"), "info"},
	} {
		if got := LogLevel(tt.cfgs); got != tt.want {
			t.Errorf("LogLevel(%d configs) = %q, want %q", len(tt.cfgs), got, tt.want)
		}
	}
}
