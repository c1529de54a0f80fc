package bridge_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/internal/testenv"
)

// TestOpen_RefusedConfigurationIsRefused: the configurations a server
// refuses whatever the number of attempts (a stream edgeproc would have to
// move to another storage, subjects another stream holds, replicas a
// single server cannot give) are Refused, so that a market dies of them
// at once instead of retrying for ever; a server that is merely
// unreachable is not.
func TestOpen_RefusedConfigurationIsRefused(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	js := mustJS(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EDGEPROC_MEMORY", Subjects: []string{"mem.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"taken.>"}}); err != nil {
		t.Fatal(err)
	}
	open := func(cfg bridge.Config) error {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		b, err := bridge.Open(octx, nc, cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			_ = b.Close(octx)
		}
		return err
	}
	for _, c := range []struct {
		name string
		cfg  bridge.Config
	}{
		{"another storage", bridge.Config{Market: "girona", Stream: "EDGEPROC_MEMORY", SubjectPrefix: "mem"}},
		{"subjects of another stream", bridge.Config{Market: "girona", Stream: "EDGEPROC_GIRONA", SubjectPrefix: "taken"}},
		{"replicas on one server", bridge.Config{Market: "girona", Stream: "EDGEPROC_R3", SubjectPrefix: "r3", Replicas: 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := open(c.cfg)
			if err == nil || !bridge.Refused(err) {
				t.Fatalf("Open: %v; want an error Refused reports", err)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		cfg := bridge.Config{Market: "girona", Stream: "EDGEPROC_GIRONA", SubjectPrefix: "ok"}
		srv.Shutdown()
		err := open(cfg)
		if err == nil || bridge.Refused(err) {
			t.Fatalf("Open with the server down: %v; want an error Refused does not report", err)
		}
	})
}
