package partition

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/testenv"
)

// TestProcesses_SIGSTOPIsNotSilence stops the only `edgeproc run` of a
// one-partition market (the idle rule on) with SIGSTOP for longer than
// gap + tolerated_delay while the fleet keeps publishing into the stream:
// its pin lapses, and after SIGCONT it takes the partition back from its
// checkpoint and replays the stream. The positions stored meanwhile have
// their own stream timestamps, so nothing of the pause is silence: every
// courier's only no_signal is the one after the fleet's final silence, at
// its last position, no position is late, and the results equal the
// replay of the partition's stream.
func TestProcesses_SIGSTOPIsNotSilence(t *testing.T) {
	bin := testenv.BuildEdgeproc(t)
	ns := testenv.StartNATS(t)
	listen := testenv.FreeAddr(t)
	y := strings.Replace(testYAML(ns.URL(), 1, listen, "  instance: a\n"),
		"windows:\n  idle_timeout: 0s\n", "windows:\n  size: 4s\n  slide: 2s\n  gap: 3s\n  tolerated_delay: 1s\n  idle_timeout: 1s\n", 1)
	cfg, err := config.Parse(strings.NewReader(y), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "a.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &proc{name: "a", listen: listen, p: testenv.StartProc(t, "a", bin, "run", "--config", path)}
	testenv.WaitFor(t, 60*time.Second, "a ready", a.ready)

	js, err := jetstream.New(ns.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const stopAt, contAt = 12, 40 // of 56 rounds 250 ms apart: a 7 s pause, > gap + tolerated_delay
	subject := strings.TrimSuffix(cfg.JetStream.PartitionSubject(0), "*")
	last := testenv.LiveFleet("girona", 10, 56, 250*time.Millisecond, func(round int) {
		switch round {
		case stopAt:
			if err := a.p.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		case contAt:
			if err := a.p.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
	}, func(topic string, payload []byte) {
		if _, err := js.Publish(ctx, subject+topic[strings.LastIndexByte(topic, '/')+1:], payload); err != nil {
			t.Fatal(err)
		}
	})
	testenv.WaitFinalSilence(t, ns.URL(), cfg.NATS.Stream, last, 60*time.Second)
	if err := a.p.Stop(30 * time.Second); err != nil {
		t.Errorf("a after SIGTERM: %v", err)
	}
	testenv.CheckOnlyFinalSilence(t, ns.URL(), cfg.NATS.Stream, last)
	equalsReplay(t, ns.URL(), cfg)
}
