package partition

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/km0/edgeproc/config"
)

// TestExample_ServerConfigAgreesWithInstances checks the scale-out example:
// the nats-server configuration parses, keeps the MQTT streams R3, and its
// mapping sends every courier, always to the same one, to a partition
// subject the instances read.
func TestExample_ServerConfigAgreesWithInstances(t *testing.T) {
	opts, err := server.ProcessConfigFile("../examples/scale-out/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	if opts.MQTT.StreamReplicas != 3 {
		t.Errorf("mqtt stream_replicas %d, want 3", opts.MQTT.StreamReplicas)
	}
	cfg, err := config.Load("../examples/scale-out/girona-a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Only the mapping is under test: one node, no cluster, MQTT or store.
	opts.Port, opts.Cluster, opts.Routes, opts.MQTT = -1, server.ClusterOpts{}, nil, server.MQTTOpts{}
	opts.JetStream, opts.StoreDir, opts.NoSigs, opts.NoLog = false, "", true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	prefix := strings.TrimSuffix(cfg.JetStream.Subject, config.PartitionToken+".*")
	sub, err := nc.SubscribeSync(prefix + "*.*")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{} // courier -> partition token
	for round := 0; round < 2; round++ {
		for i := range 50 {
			courier := "van-" + strconv.Itoa(i)
			if err := nc.Publish("km0.girona.positions."+courier, nil); err != nil {
				t.Fatal(err)
			}
			m, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("%s: no message on %s*.*: %v", courier, prefix, err)
			}
			tok := strings.Split(strings.TrimPrefix(m.Subject, prefix), ".")
			n, err := strconv.Atoi(tok[0])
			if err != nil || n < 0 || n >= cfg.JetStream.Partitions || tok[1] != courier {
				t.Fatalf("%s mapped to %s: not one of %d partitions of %s", courier, m.Subject, cfg.JetStream.Partitions, cfg.JetStream.Subject)
			}
			if prev, ok := got[courier]; ok && prev != tok[0] {
				t.Fatalf("%s mapped to partitions %s and %s", courier, prev, tok[0])
			}
			got[courier] = tok[0]
		}
	}
	used := map[string]bool{}
	for _, p := range got {
		used[p] = true
	}
	if len(used) != cfg.JetStream.Partitions {
		t.Errorf("50 couriers used %d partitions, want all %d", len(used), cfg.JetStream.Partitions)
	}
}
