package partition

import (
	"context"
	"encoding/json"
	"fmt"
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
	const couriers, rounds = 10, 56  // 14 s
	const stopAt, restartAt = 12, 40 // a 7 s outage, > gap + tolerated_delay
	queue := make(chan *nats.Msg, couriers*rounds)
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
	lastTS := map[string]int64{}
	for round := range rounds {
		switch round {
		case stopAt:
			ns.Shutdown()
		case restartAt:
			ns.Restart()
		}
		for c := range couriers {
			courier := fmt.Sprintf("c%d", c)
			ts := time.Now().UnixMilli()
			payload := fmt.Appendf(nil, `{"courier":%q,"lat":41.98,"lon":%.5f,"timestamp_ms":%d}`, courier, 2.82+float64(round)*1e-4, ts)
			queue <- &nats.Msg{Subject: cfg.JetStream.PartitionSubject(0)[:len(cfg.JetStream.PartitionSubject(0))-1] + courier, Data: payload,
				Header: nats.Header{jetstream.MsgIDHeader: []string{courier + "|" + fmt.Sprint(ts)}}}
			lastTS[courier] = ts
		}
		time.Sleep(250 * time.Millisecond)
	}
	close(queue)
	<-sent

	read := func() (noSignal map[string][]int64, late int) {
		noSignal = map[string][]int64{}
		for _, m := range testenv.ReadStream(t, ns.URL(), cfg.NATS.Stream) {
			var r struct {
				Type     string `json:"type"`
				Courier  string `json:"courier"`
				LastSeen int64  `json:"last_seen_ms"`
			}
			if json.Unmarshal(m.Data, &r) != nil {
				continue
			}
			switch r.Type {
			case "no_signal":
				noSignal[r.Courier] = append(noSignal[r.Courier], r.LastSeen)
			case "late":
				late++
			}
		}
		return noSignal, late
	}
	testenv.WaitFor(t, 60*time.Second, "every courier's final no_signal", func() bool {
		n, _ := read()
		return len(n) == couriers
	})
	a.Stop()
	noSignal, late := read()
	for courier, seen := range noSignal {
		if len(seen) != 1 || seen[0] != lastTS[courier] {
			t.Errorf("courier %s: no_signal with last_seen %v, want one, at its last position %d", courier, seen, lastTS[courier])
		}
	}
	if late != 0 {
		t.Errorf("%d late records, want none: the positions the phones kept during the outage are not late", late)
	}
	equalsReplay(t, ns.URL(), cfg)
}
