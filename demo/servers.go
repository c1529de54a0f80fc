package demo

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/nats-io/nats-server/v2/server"
)

// Broker limits of the embedded MQTT broker. mochi silently drops QoS 1
// messages to a subscriber once its in-flight or pending writes reach these
// (defaults 8192 each); raised so that a processor pausing for a checkpoint
// is slowed down, not robbed. Inflight drops are still counted and reported.
const (
	brokerMaxInflight      = 65535
	brokerMaxWritesPending = 65536
)

// broker is the embedded mochi MQTT broker.
type broker struct {
	srv  *mqtt.Server
	addr string // host:port it listens on
}

// startBroker starts mochi on 127.0.0.1:port (0 = a free port). Anyone on
// the machine may connect (auth.AllowHook): acceptable on loopback only.
func startBroker(port int, log *slog.Logger) (*broker, error) {
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumInflight = brokerMaxInflight
	caps.MaximumClientWritesPending = brokerMaxWritesPending
	srv := mqtt.New(&mqtt.Options{Logger: log, Capabilities: caps})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		return nil, fmt.Errorf("mqtt broker: add auth hook: %w", err)
	}
	l := listeners.NewTCP(listeners.Config{ID: "demo", Address: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
	if err := srv.AddListener(l); err != nil {
		return nil, fmt.Errorf("mqtt broker: listen on 127.0.0.1:%d: %w", port, err)
	}
	if err := srv.Serve(); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("mqtt broker: serve: %w", err)
	}
	return &broker{srv: srv, addr: l.Address()}, nil
}

// subscriptions is the number of active subscriptions.
func (b *broker) subscriptions() int64 { return atomic.LoadInt64(&b.srv.Info.Subscriptions) }

// dropped reports the QoS 1 messages the broker gave up on.
func (b *broker) dropped() (inflight, messages int64) {
	return atomic.LoadInt64(&b.srv.Info.InflightDropped), atomic.LoadInt64(&b.srv.Info.MessagesDropped)
}

func (b *broker) close() error { return b.srv.Close() }

// startNATS starts an embedded nats-server with JetStream on 127.0.0.1 and a
// free port, storing under dir.
func startNATS(dir string) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  filepath.Join(dir, "jetstream"),
		// The demo runs minutes, not months: a bounded store keeps a
		// forgotten demo from filling the disk. JetStream reserves each
		// stream's max_bytes against it when the stream is created, so it
		// must hold the stream's bound (demoMaxBytes, or the 1 GiB default
		// where that is not passed through) plus the courier bucket.
		JetStreamMaxStore:  2 << 30,
		JetStreamMaxMemory: 64 << 20,
		NoSigs:             true,
		NoLog:              true,
	})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("nats server: not ready within 10s")
	}
	return ns, nil
}
