package partition

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/internal/testenv"
)

// BenchmarkIngest: what each way in (jetstream.ingest) costs per
// position. A city fleet's positions (2000 couriers, one every ~5 s each,
// 2 minutes: 48 k positions) go into a one-partition stream on one
// embedded NATS node, owned and processed by one instance in this
// process: "gateway" publishes them straight into the partition's
// subject, as the gateway's mapping stores them; "relay" publishes them
// to Mosquitto (8 publishers, QoS 1) and the instance relays them
// (ingest: mqtt). It reports positions/s until the instance has applied
// them all, and the CPU of this process per position: publisher, NATS
// server and instance (Mosquitto's own CPU is not in it). Run with
// -benchtime=1x.
func BenchmarkIngest(b *testing.B) {
	for _, mode := range []string{"gateway", "relay"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ns := testenv.StartNATS(b)
				mosq := testenv.StartMosquitto(b)
				cfg := testConfig(b, ns.URL(), 1)
				cfg.JetStream.Ingest, cfg.MQTT.URL = "mqtt", mosq.URL()
				msgs := testenv.FleetMessages("girona", 2000, 2*time.Minute, 5, time.Now())
				nc := ns.Connect(b)
				js, err := jetstream.New(nc)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				if mode == "gateway" {
					cfg.JetStream.Ingest = "gateway"
				}
				in := startInstance(b, cfg, ns.Connect(b), "a", nil)
				testenv.WaitFor(b, 30*time.Second, "a ready", func() bool { return in.r.NotReady() == "" })
				s, err := js.Stream(ctx, cfg.JetStream.Stream)
				if err != nil {
					b.Fatal(err)
				}
				base := stored(b, ctx, s)
				subject := strings.TrimSuffix(cfg.JetStream.PartitionSubject(0), "*")

				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime()
				if mode == "relay" {
					const pubs = 8
					var wg sync.WaitGroup
					for p := range pubs {
						pub := mosq.Publisher(b, "")
						wg.Go(func() {
							for i := p; i < len(msgs); i += pubs {
								if err := pub.Publish(ctx, msgs[i].Topic, msgs[i].Payload); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
				} else {
					for _, m := range msgs {
						if _, err := js.PublishAsync(subject+m.Topic[strings.LastIndexByte(m.Topic, '/')+1:], m.Payload); err != nil {
							b.Fatal(err)
						}
					}
					<-js.PublishAsyncComplete()
				}
				want := uint64(len(msgs))
				if mode == "relay" {
					// The fleet's own QoS 1 redeliveries are one position
					// to the relay (one message id).
					distinct := map[string]bool{}
					for _, m := range msgs {
						distinct[m.Topic+"\x00"+string(m.Payload)] = true
					}
					want = uint64(len(distinct))
				}
				for stored(b, ctx, s)-base < want {
					time.Sleep(10 * time.Millisecond)
				}
				last := lastSeqs(b, nc, cfg)
				testenv.WaitFor(b, 2*time.Minute, "every position applied", func() bool { return caughtUp(last, in.r.Status()) })
				took, cpu := time.Since(start), cpuTime()-cpu0
				b.StopTimer()
				b.ReportMetric(float64(len(msgs))/took.Seconds(), "positions/s")
				b.ReportMetric(float64(cpu.Microseconds())/float64(len(msgs)), "cpu-µs/position")
			}
		})
	}
}

// stored is how many positions (not ticks) the stream holds.
func stored(b *testing.B, ctx context.Context, s jetstream.Stream) uint64 {
	info, err := s.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return info.State.Msgs
}
