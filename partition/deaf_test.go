package partition

import (
	"context"
	"encoding/hex"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/internal/testenv"
)

// TestNATSOutage_IsNotSilence stops the NATS server for longer than gap +
// tolerated_delay while the fleet keeps sending: its phones keep each
// position (QoS 1) and deliver it once the server is back, and the owner's
// client buffers the ticks it tried to write meanwhile and sends them in a
// burst on reconnection. The outage must not be applied as silence: every
// courier's only no_signal is the one after the fleet's final silence,
// with its last position as last_seen, no position is late, and the
// results equal the replay of the partition's stream. Without the deaf-gap
// rule the buffered ticks, stored before the phones' positions, close
// every session at once.
func TestNATSOutage_IsNotSilence(t *testing.T) {
	ns := testenv.StartNATS(t)
	cfg := testConfig(t, ns.URL(), 1)
	cfg.Windows.Size, cfg.Windows.Slide = 4*time.Second, 2*time.Second
	cfg.Windows.Gap, cfg.Windows.ToleratedDelay, cfg.Windows.IdleTimeout = 3*time.Second, time.Second, time.Second
	a := startInstance(t, cfg, ns.Connect(t), "a", nil)
	testenv.WaitFor(t, 30*time.Second, "a ready", a.r.Ready)

	// The phones: a position every 250 ms each, kept until the server
	// stores it (a publish that fails is sent again, under its id).
	pub := ns.Connect(t, nats.ReconnectBufSize(-1)) // fail at once while the server is away
	js, err := jetstream.New(pub)
	if err != nil {
		t.Fatal(err)
	}
	const stopAt, restartAt = 12, 40 // of 56 rounds 250 ms apart: a 7 s outage, > gap + tolerated_delay
	queue := make(chan *nats.Msg, 1024)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for m := range queue {
			for {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := js.PublishMsg(ctx, m)
				cancel()
				if err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	last := testenv.LiveFleet("girona", 10, 56, 250*time.Millisecond, func(round int) {
		switch round {
		case stopAt:
			ns.Shutdown()
		case restartAt:
			ns.Restart()
		}
	}, func(topic string, payload []byte) {
		courier := topic[strings.LastIndexByte(topic, '/')+1:]
		queue <- &nats.Msg{Subject: strings.TrimSuffix(cfg.JetStream.PartitionSubject(0), "*") + courier, Data: payload,
			Header: nats.Header{jetstream.MsgIDHeader: []string{positionID(topic, payload)}}}
	})
	close(queue)
	<-sent
	testenv.WaitFinalSilence(t, ns.URL(), cfg.NATS.Stream, last, 60*time.Second)
	a.Stop()
	testenv.CheckOnlyFinalSilence(t, ns.URL(), cfg.NATS.Stream, last)
	equalsReplay(t, ns.URL(), cfg)
}

// positionID identifies a position for the stream's duplicate window, as
// the gateway's publisher here sends it: the same message twice has the
// same id.
func positionID(topic string, payload []byte) string {
	h := fnv.New128a()
	_, _ = h.Write([]byte(topic))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(payload)
	return hex.EncodeToString(h.Sum(nil))
}
