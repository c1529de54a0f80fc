package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a JetStream cluster of embedded nats-servers on loopback owned
// by one test: every node has a client port, a route port and a store of
// its own, and the same subject mappings. A node can be killed and started
// again on the same ports and store.
type Cluster struct {
	tb   testing.TB
	name string
	cfg  ClusterConfig

	mu    sync.Mutex
	nodes []*clusterNode
}

type clusterNode struct {
	name      string
	storeDir  string
	port      int // client
	routePort int
	mqttPort  int // 0: no MQTT listener
	srv       *server.Server
}

// ClusterConfig describes a test cluster.
type ClusterConfig struct {
	// Nodes is the number of servers (1 is a plain server). Default 3.
	Nodes int
	// Mappings are subject mappings (source → destination, nats-server
	// syntax such as "part.{{wildcard(1)}}.{{partition(4,2)}}.{{wildcard(2)}}")
	// of every node's global account.
	Mappings map[string]string
	// MQTT gives every node an MQTT listener (the gateway), its internal
	// streams replicated on every node (mqtt stream_replicas).
	MQTT bool
}

// StartCluster starts cfg.Nodes JetStream nodes clustered over loopback
// routes and returns once the cluster has a JetStream meta leader. It is
// shut down when the test ends.
func StartCluster(tb testing.TB, cfg ClusterConfig) *Cluster {
	tb.Helper()
	SkipShort(tb, "a NATS cluster")
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	c := &Cluster{tb: tb, name: "edgeproc-test", cfg: cfg}
	tb.Cleanup(c.Shutdown)
	// A port freePort found free can be taken, by another test's
	// listener or a connection's local port, before the node binds it:
	// the first start picks new ports and tries again.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = c.startAll(); err == nil {
			break
		}
		tb.Logf("cluster start, attempt %d: %v", attempt, err)
		c.Shutdown()
	}
	if err != nil {
		tb.Fatal(err)
	}
	c.WaitJetStream()
	return c
}

// startAll gives every node new ports and a new store and starts them
// all.
func (c *Cluster) startAll() error {
	nodes := make([]*clusterNode, c.cfg.Nodes)
	for i := range nodes {
		nodes[i] = &clusterNode{
			name: fmt.Sprintf("n%d", i+1), storeDir: c.tb.TempDir(),
			port: freePort(c.tb), routePort: freePort(c.tb),
		}
		if c.cfg.MQTT {
			nodes[i].mqttPort = freePort(c.tb)
		}
	}
	c.mu.Lock()
	c.nodes = nodes
	c.mu.Unlock()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() { errs[i] = c.start(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func (c *Cluster) start(i int) error {
	c.mu.Lock()
	nd := c.nodes[i]
	var routes []*url.URL
	for _, o := range c.nodes {
		if o != nd {
			routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", o.routePort)})
		}
	}
	c.mu.Unlock()
	opts := &server.Options{
		ServerName: nd.name,
		Host:       "127.0.0.1",
		Port:       nd.port,
		JetStream:  true,
		StoreDir:   nd.storeDir,
		NoSigs:     true,
		NoLog:      true,
	}
	if len(routes) > 0 { // a cluster of one is a plain server
		opts.Cluster = server.ClusterOpts{Name: c.name, Host: "127.0.0.1", Port: nd.routePort}
		opts.Routes = routes
	}
	if nd.mqttPort != 0 {
		opts.MQTT = server.MQTTOpts{Host: "127.0.0.1", Port: nd.mqttPort, StreamReplicas: len(c.nodes)}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("new nats node %s: %w", nd.name, err)
	}
	for src, dst := range c.cfg.Mappings {
		if err := srv.GlobalAccount().AddMapping(src, dst); err != nil {
			return fmt.Errorf("node %s: mapping %s: %w", nd.name, src, err)
		}
	}
	if err := startServer(srv, natsReadyTimeout); err != nil {
		return fmt.Errorf("nats node %s (client port %d, route port %d): %w", nd.name, nd.port, nd.routePort, err)
	}
	c.mu.Lock()
	nd.srv = srv
	c.mu.Unlock()
	return nil
}

// URL is every node's client URL, comma-separated, as a client's server
// list.
func (c *Cluster) URL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var urls []string
	for _, nd := range c.nodes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", nd.port))
	}
	return strings.Join(urls, ",")
}

// MQTTAddr is node i's MQTT listener, host:port (with ClusterConfig.MQTT).
func (c *Cluster) MQTTAddr(i int) string {
	return fmt.Sprintf("127.0.0.1:%d", c.nodes[i].mqttPort)
}

// Kill shuts node i down (its clients reconnect to another node) and waits
// until it has released its ports and store.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Restart starts node i again on its ports with its store.
func (c *Cluster) Restart(i int) {
	c.tb.Helper()
	c.Kill(i)
	if err := c.start(i); err != nil {
		c.tb.Fatal(err)
	}
}

// Shutdown stops every node. Shutting down twice is harmless.
func (c *Cluster) Shutdown() {
	for i := range c.nodes {
		c.Kill(i)
	}
}

// WaitJetStream waits until the running nodes answer JetStream requests
// (a meta leader is elected).
func (c *Cluster) WaitJetStream() {
	c.tb.Helper()
	nc, err := nats.Connect(c.URL())
	if err != nil {
		c.tb.Fatalf("cluster: connect: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		c.tb.Fatalf("cluster: jetstream: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("cluster: no JetStream meta leader within 30s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Connect opens a client connection to the cluster (any node) that
// reconnects forever, as edgeproc's does. It is closed when the test ends.
func (c *Cluster) Connect(tb testing.TB, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	return connect(tb, c.URL(), opts)
}

// StartNATSWithMappings starts one JetStream node, as StartCluster does
// for several: a cluster of one, with mappings, shut down when the test
// ends.
func StartNATSWithMappings(tb testing.TB, mappings map[string]string) *Cluster {
	tb.Helper()
	return StartCluster(tb, ClusterConfig{Nodes: 1, Mappings: mappings})
}
