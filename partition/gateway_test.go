package partition

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// TestMQTTGateway_EqualsReplay runs the deployment of docs/scale-out.md end
// to end: couriers publish MQTT 3.1.1 QoS 1 (mosquitto_pub, one client per
// courier, spread over the nodes) to nats-server's MQTT gateway on a
// 3-node cluster, the mapping puts each courier in one partition of an R3
// stream, two instances process it, and the results equal the replay of
// each partition.
func TestMQTTGateway_EqualsReplay(t *testing.T) {
	testenv.SkipShort(t, "a NATS cluster and mosquitto_pub")
	if _, err := exec.LookPath("mosquitto_pub"); err != nil {
		t.Fatal("mosquitto_pub not found: apt-get install mosquitto-clients (scripts/test.sh does)")
	}
	const partitions = 4
	cl := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3, Mappings: mapping(partitions), MQTT: true})
	cfg := testConfig(t, cl.URL(), partitions)
	ins := []*instance{
		startInstance(t, cfg, cl.Connect(t), "a", nil),
		startInstance(t, cfg, cl.Connect(t), "b", nil),
	}
	for _, in := range ins {
		testenv.WaitFor(t, 90*time.Second, "instance ready", in.r.Ready)
	}
	// Per courier, its payloads in publish order: one MQTT client each keeps
	// the courier's order, as a phone does.
	byTopic := map[string]*bytes.Buffer{}
	var topics []string
	total := 0
	for _, m := range testenv.FleetMessages("girona", 24, 6*time.Minute, 9, time.Now()) {
		if bytes.ContainsAny(m.Payload, "\r\n") || len(m.Payload) == 0 {
			continue // one payload per line for mosquitto_pub -l
		}
		b := byTopic[m.Topic]
		if b == nil {
			b = &bytes.Buffer{}
			byTopic[m.Topic] = b
			topics = append(topics, m.Topic)
		}
		b.Write(m.Payload)
		b.WriteByte('\n')
		total++
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(topics))
	for i, topic := range topics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			host, port, _ := strings.Cut(cl.MQTTAddr(i%3), ":")
			cmd := exec.Command("mosquitto_pub", "-V", "mqttv311", "-q", "1", "-h", host, "-p", port,
				"-i", fmt.Sprintf("courier-%d", i), "-t", topic, "-l")
			cmd.Stdin = byTopic[topic]
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("mosquitto_pub %s: %v: %s", topic, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	pub := cl.Connect(t)
	testenv.WaitFor(t, 30*time.Second, "every MQTT message in the stream", func() bool {
		n := 0
		for p := range partitions {
			n += len(testenv.ReadStored(t, cl.URL(), cfg.JetStream.Stream, cfg.JetStream.PartitionSubject(p)))
		}
		return n >= total
	})
	last := lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, 2*time.Minute, "every partition applied and recorded", func() bool { return settled(last, statuses(ins...)...) })
	// Each courier in exactly one partition.
	where := map[string]int{}
	for p := range partitions {
		for _, m := range testenv.ReadStored(t, cl.URL(), cfg.JetStream.Stream, cfg.JetStream.PartitionSubject(p)) {
			c := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
			if c == TickToken {
				continue // an owner's idle tick, not a courier
			}
			if q, ok := where[c]; ok && q != p {
				t.Errorf("courier %s in partitions %d and %d", c, q, p)
			}
			where[c] = p
		}
	}
	for _, in := range ins {
		in.Stop()
	}
	n := equalsReplay(t, cl.URL(), cfg)
	t.Logf("%d MQTT messages from %d couriers in %d partitions; %d results, as the replay", total, len(topics), partitions, n)
}
