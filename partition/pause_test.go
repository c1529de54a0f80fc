package partition

import (
	"context"
	"errors"
	"fmt"
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

// TestProcesses_RelayPausedPastItsLease stops the relaying `edgeproc
// run` (ingest mqtt) with SIGSTOP while phones publish to Mosquitto,
// until another instance has taken the relay lease and the market's
// session, then wakes it. Woken, its lease has lapsed by its own clock:
// it must store none of the batches it held (the broker gives those
// positions to its successor) and not take the session back. Every
// position the broker acked is stored exactly once; the pause of the
// relay and of an owner is no silence (every courier's only no_signal is
// its final one, nothing late) and the results equal the replay.
func TestProcesses_RelayPausedPastItsLease(t *testing.T) {
	bin := testenv.BuildEdgeproc(t)
	ns := testenv.StartNATS(t)
	mosq := testenv.StartMosquitto(t)
	windows := "windows:\n  size: 4s\n  slide: 2s\n  gap: 3s\n  tolerated_delay: 1s\n  idle_timeout: 2s\n"
	edit := func(y string) string {
		y = strings.Replace(y, "  ingest: gateway\n", "  ingest: mqtt\n", 1)
		y = strings.Replace(y, "windows:\n  idle_timeout: 0s\n", windows, 1)
		return y + fmt.Sprintf("mqtt:\n  url: %q\n", mosq.URL())
	}
	cfg, err := config.Parse(strings.NewReader(edit(testYAML(ns.URL(), 3, "127.0.0.1:0", ""))), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps := startProcsEdit(t, bin, ns.URL(), 3, 2, edit, "a", "b", "c")
	for _, p := range ps {
		testenv.WaitFor(t, 90*time.Second, p.name+" ready", p.ready)
	}
	relayOf := func(among []*proc) *proc {
		for _, p := range among {
			if v, _ := metricSum(p.listen, "edgeproc_relay_active{"); v == 1 {
				return p
			}
		}
		return nil
	}
	var paused *proc
	testenv.WaitFor(t, 30*time.Second, "an instance relaying", func() bool { paused = relayOf(ps); return paused != nil })
	var others []*proc
	for _, p := range ps {
		if p != paused {
			others = append(others, p)
		}
	}
	t.Logf("instance %s relays (owns %v)", paused.name, paused.owned())

	const couriers, rounds, stopAt = 20, 60, 10 // rounds 200 ms apart
	ph := startPhones(mosq.Addr(), couriers, rounds)
	// The pause runs beside the fleet, which goes on publishing.
	woken := make(chan error, 1)
	last := testenv.LiveFleet("girona", couriers, rounds, 200*time.Millisecond, func(round int) {
		if round != stopAt {
			return
		}
		go func() {
			// Into the round: the relay holds some of it in open batches
			// (20 ms linger), unacked.
			time.Sleep(10 * time.Millisecond)
			if err := paused.p.Signal(syscall.SIGSTOP); err != nil {
				woken <- err
				return
			}
			at := time.Now()
			var next *proc
			for deadline := time.Now().Add(time.Minute); next == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				next = relayOf(others)
			}
			took := time.Since(at)
			time.Sleep(time.Second) // the successor has the broker's queue a while
			err := paused.p.Signal(syscall.SIGCONT)
			if next == nil {
				err = errors.Join(errors.New("no other instance relays within a minute of the SIGSTOP"), err)
			} else {
				t.Logf("instance %s relays %v after the SIGSTOP; SIGCONT after %v", next.name, took.Round(10*time.Millisecond), time.Since(at).Round(10*time.Millisecond))
			}
			woken <- err
		}()
	}, ph.send)
	if err := <-woken; err != nil {
		t.Fatal(err)
	}
	acked := ph.stop()
	stored, _ := storedOnce(t, ns.URL(), cfg.JetStream.Stream, acked)
	t.Logf("%d positions acked by the broker, %d stored", sumCounts(acked), len(stored))
	if v, _ := metricSum(paused.listen, "edgeproc_relay_active{"); v == 1 {
		t.Errorf("instance %s relays again after its pause", paused.name)
	}
	testenv.WaitFinalSilence(t, ns.URL(), cfg.NATS.Stream, last, 60*time.Second)
	for _, p := range ps {
		if err := p.p.Stop(30 * time.Second); err != nil {
			t.Errorf("%s after SIGTERM: %v", p.name, err)
		}
	}
	testenv.CheckOnlyFinalSilence(t, ns.URL(), cfg.NATS.Stream, last)
	equalsReplay(t, ns.URL(), cfg)
}
