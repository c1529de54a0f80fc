package partition

import (
	"context"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// TestRelay_BrokerOutageIsNotSilence stops the market's MQTT broker (the
// relay's source, jetstream.ingest: mqtt) for longer than gap +
// tolerated_delay while the phones keep their positions and deliver them
// once it is back. The owner must not tick while its relay cannot hear
// the broker, so the outage is a gap in the stream, deafness, not
// silence: every courier's only no_signal is the one after the fleet's
// final silence, no position is late, and the results equal the replay.
func TestRelay_BrokerOutageIsNotSilence(t *testing.T) {
	ns := testenv.StartNATS(t)
	mosq := testenv.StartMosquitto(t)
	cfg := testConfig(t, ns.URL(), 1)
	cfg.JetStream.Ingest = "mqtt"
	cfg.MQTT.URL = mosq.URL()
	cfg.Windows.Size, cfg.Windows.Slide = 4*time.Second, 2*time.Second
	cfg.Windows.Gap, cfg.Windows.ToleratedDelay, cfg.Windows.IdleTimeout = 3*time.Second, time.Second, 2*time.Second
	a := startInstance(t, cfg, ns.Connect(t), "a", nil)
	testenv.WaitFor(t, 60*time.Second, "a ready", func() bool { return a.r.NotReady() == "" })

	// The phones: each position kept until the broker acks it, sent again
	// on a new connection while the broker is away.
	type position struct{ topic, payload string }
	queue := make(chan position, 1024)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		var pub *testenv.Publisher
		for p := range queue {
			for {
				if pub == nil {
					var err error
					if pub, err = testenv.DialPublisher(mosq.Addr(), "relay-phones"); err != nil {
						time.Sleep(100 * time.Millisecond)
						continue
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := pub.Publish(ctx, p.topic, []byte(p.payload))
				cancel()
				if err == nil {
					break
				}
				pub.Close()
				pub = nil
			}
		}
		if pub != nil {
			pub.Close()
		}
	}()
	const stopAt, restartAt = 12, 40 // of 56 rounds 250 ms apart: a 7 s outage
	last := testenv.LiveFleet("girona", 10, 56, 250*time.Millisecond, func(round int) {
		switch round {
		case stopAt:
			mosq.Stop()
		case restartAt:
			mosq.Restart()
		}
	}, func(topic string, payload []byte) { queue <- position{topic, string(payload)} })
	close(queue)
	<-sent
	testenv.WaitFinalSilence(t, ns.URL(), cfg.NATS.Stream, last, 60*time.Second)
	a.Stop()
	testenv.CheckOnlyFinalSilence(t, ns.URL(), cfg.NATS.Stream, last)
	equalsReplay(t, ns.URL(), cfg)
}
