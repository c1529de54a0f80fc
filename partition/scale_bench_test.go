package partition

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/internal/testenv"
)

// BenchmarkScaleOut is the scale-out's cost, all real processes on this
// machine: nats-server (built from the module's version), Mosquitto, and
// `edgeproc run`. The same fleet each case, 15 000 couriers each sending
// every 5 s (3 000 positions/s) for scaleFor, published by this process
// (8 MQTT 3.1.1 QoS 1 connections, pipelined), its event time from
// fleetStart (a minute of it holds one firing of every courier's
// window); once every position is
// applied it reports the CPU (utime + stime) of each server per position:
// edgeproc (all instances), nats-server (all nodes), Mosquitto. The cases
// (scaleCases):
//
//   - mqtt: one `source: mqtt` process.
//   - jetstream-N: N instances of `source: jetstream` (6 partitions,
//     ingest mqtt: one relay reading Mosquitto), one nats-server node, R1.
//   - jetstream-3-r3: 3 instances on a 3-node cluster (three nats-server
//     processes on loopback routes, each its own store), replicas 3.
//   - gateway-N, gateway-3-r3: ingest gateway, the fleet publishing to
//     nats-server's MQTT listener (spread over the nodes) and its
//     partition mapping; no Mosquitto.
//
// With instances relaying (ingest mqtt, N > 1) it also reports the relay
// holder's CPU apart from the mean of the other instances'. Run with
// -benchtime=1x (about 10 minutes):
//
//	go test -run '^$' -bench 'ScaleOut$' -benchtime 1x -timeout 30m ./partition
func BenchmarkScaleOut(b *testing.B) {
	bin := testenv.BuildEdgeproc(b)
	natsBin := buildNATSServer(b)
	for _, c := range scaleCases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				scaleRun(b, bin, natsBin, c)
			}
		})
	}
}

// BenchmarkScaleOutIdle is what an instance costs with nothing to do:
// the CPU each process uses over -scale.for with no position published
// (the warm-up's 600 couriers only, their partitions owned and ticked by
// the idle rule), N = 1 and 3, no board page open. The CPU that N
// instances add to one's at the same rate is mostly this, paid N times:
//
//	go test -run '^$' -bench 'ScaleOutIdle' -benchtime 1x ./partition
func BenchmarkScaleOutIdle(b *testing.B) {
	bin := testenv.BuildEdgeproc(b)
	natsBin := buildNATSServer(b)
	for _, c := range []scaleCase{{"jetstream-1", 1, 1, 1, "mqtt"}, {"jetstream-3", 3, 1, 1, "mqtt"}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				env := startScale(b, bin, natsBin, c, fleetStart(), 0)
				cpu0, t0 := env.cpu(b), time.Now()
				b.StartTimer()
				time.Sleep(*scaleFor) // the measurement: CPU used over a span of wall time
				b.StopTimer()
				d, took := env.cpu(b).sub(cpu0), time.Since(t0)
				perMin := func(c time.Duration) float64 { return c.Seconds() / took.Minutes() * 1000 }
				b.ReportMetric(perMin(d.edgeproc())/float64(len(d.inst)), "ms/min/instance")
				b.ReportMetric(perMin(d.nats), "nats-ms/min")
				b.Logf("%s idle for %v: CPU edgeproc %v (relay: instance %d), nats-server %v, mosquitto %v; load average %s",
					c.name, took.Round(time.Millisecond), d.inst, relayHolder(env.listens), d.nats, d.mosq, testenv.LoadAvg())
				env.stop()
			}
		})
	}
}

// scaleCase is one deployment of the scale-out benchmarks.
type scaleCase struct {
	name      string
	instances int    // 0: one `source: mqtt` process
	nodes     int    // nats-server processes: 1, or 3 clustered
	replicas  int    // jetstream.replicas
	ingest    string // jetstream.ingest: mqtt or gateway
}

var scaleCases = []scaleCase{
	{"mqtt", 0, 1, 1, ""},
	{"jetstream-1", 1, 1, 1, "mqtt"},
	{"jetstream-2", 2, 1, 1, "mqtt"},
	{"jetstream-3", 3, 1, 1, "mqtt"},
	{"jetstream-3-r3", 3, 3, 3, "mqtt"},
	{"gateway-1", 1, 1, 1, "gateway"},
	{"gateway-3", 3, 1, 1, "gateway"},
	{"gateway-3-r3", 3, 3, 3, "gateway"},
}

// scaleProfile is where BenchmarkScaleOut writes each instance's CPU
// profile of the middle of its run.
var scaleProfile = flag.String("scale.profile", "", "BenchmarkScaleOut: a directory for each instance's CPU profile (CASE-eN.pprof) of the middle half of the fleet's run")

// profile takes a CPU profile of each instance over the middle half of
// the fleet's run into -scale.profile, if set; the returned func waits
// for them.
func (env *scaleEnv) profile(b *testing.B, name string) func() {
	if *scaleProfile == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for i, l := range env.listens {
		wg.Go(func() {
			time.Sleep(*scaleFor / 4)
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", l, int((*scaleFor / 2).Seconds()))
			res, err := http.Get(url)
			if err != nil {
				b.Errorf("profile instance %d: %v", i, err)
				return
			}
			defer res.Body.Close()
			data, err := io.ReadAll(res.Body)
			if err == nil && res.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s", url, res.Status)
			}
			if err == nil {
				err = os.WriteFile(filepath.Join(*scaleProfile, fmt.Sprintf("%s-e%d.pprof", name, i)), data, 0o644)
			}
			if err != nil {
				b.Errorf("profile instance %d: %v", i, err)
			}
		})
	}
	return wg.Wait
}

// scaleProcs is each edgeproc's GOMAXPROCS: 1 as deploy/systemd's unit
// runs it; 0 leaves the runtime's default (the machine's cores).
var scaleProcs = flag.Int("scale.gomaxprocs", 0, "the scale-out benchmarks: GOMAXPROCS of each edgeproc process (1: as the systemd unit runs it; 0: the runtime's default)")

// scaleFor is how long the fleet publishes.
var scaleFor = flag.Duration("scale.for", 60*time.Second, "BenchmarkScaleOut: how long the fleet publishes")

// scaleEnv is one case's running servers and instances.
type scaleEnv struct {
	nats    *natsCluster
	mosq    *testenv.Mosquitto // nil with the gateway
	procs   []*testenv.Proc
	limits  []*testenv.CPULimit // each instance's, with -scale.cpu
	listens []string
	// pubAddrs is where the fleet publishes: Mosquitto, or every node's
	// MQTT listener.
	pubAddrs []string
}

// startScale starts c's servers and instances and returns once every
// instance is ready, has received a first position of other couriers,
// stamped before fleet, and every partition is owned. couriers above
// the default limits.max_couriers (200 000) raise it.
func startScale(b *testing.B, bin, natsBin string, c scaleCase, fleet time.Time, couriers int) *scaleEnv {
	dir := b.TempDir()
	env := &scaleEnv{}
	env.nats = startNATSCluster(b, natsBin, dir, c.nodes, c.ingest == "gateway")
	if c.ingest == "gateway" {
		env.pubAddrs = env.nats.mqttAddrs
	} else {
		env.mosq = testenv.StartMosquitto(b)
		env.pubAddrs = []string{env.mosq.Addr()}
	}
	if *scaleProcs > 0 {
		// The instances only: nats-server has started.
		b.Setenv("GOMAXPROCS", strconv.Itoa(*scaleProcs))
	}
	n := max(c.instances, 1)
	for i := range n {
		listen := testenv.FreeAddr(b)
		conf := filepath.Join(dir, fmt.Sprintf("e%d.yaml", i))
		y := fmt.Sprintf(`market: girona
nats: {url: %q}
windows: {size: 5m, slide: 1m}
http: {listen: %s, pprof: true}
`, env.nats.url(), listen)
		if env.mosq != nil {
			y += fmt.Sprintf("mqtt: {url: %q}\n", env.mosq.URL())
		}
		if couriers > 200000 {
			y += fmt.Sprintf("limits: {max_couriers: %d}\n", couriers+1000)
		}
		if c.instances == 0 {
			y += fmt.Sprintf("state: {dir: %q}\n", filepath.Join(dir, "state"))
		} else {
			y += fmt.Sprintf("source: jetstream\njetstream: {partitions: 6, replicas: %d, instance: i%d, max_owned: %d, ingest: %s}\n",
				c.replicas, i, (6+n-1)/n, c.ingest)
		}
		if err := os.WriteFile(conf, []byte(y), 0o600); err != nil {
			b.Fatal(err)
		}
		p := testenv.StartProc(b, fmt.Sprintf("e%d", i), bin, "run", "--config", conf)
		if *scaleCores > 0 {
			env.limits = append(env.limits, testenv.LimitCPU(b, p.Pid(), *scaleCores))
		}
		env.procs = append(env.procs, p)
		env.listens = append(env.listens, listen)
	}
	for _, l := range env.listens {
		testenv.WaitFor(b, 2*time.Minute, "edgeproc ready", func() bool { return httpOK("http://" + l + "/readyz") })
	}
	// A first position of a few other couriers in every partition: a
	// partition that has a message is pinned at once, where an empty
	// one waits for a wake-up (pin_ttl).
	var warm []testenv.Message
	for _, m := range testenv.FleetMessages("warm", 600, 5*time.Second, 2, fleet.Add(-time.Second)) {
		if m.Topic = strings.Replace(m.Topic, "/warm/", "/girona/", 1); len(warm) < 600 {
			warm = append(warm, m)
		}
	}
	if _, err := publishMQTT(env.pubAddrs, warm, time.Second, nil); err != nil {
		b.Fatal(err)
	}
	first := distinctCount(warm)
	testenv.WaitFor(b, 2*time.Minute, "the first positions received", func() bool { return receivedPositions(env.listens) >= first })
	if c.instances > 0 {
		testenv.WaitFor(b, 2*time.Minute, "every partition owned", func() bool { return ownedPartitions(env.listens) == 6 })
	}
	return env
}

// stop stops the instances gracefully, all at once.
func (env *scaleEnv) stop() {
	var wg sync.WaitGroup
	for _, p := range env.procs {
		wg.Go(func() { _ = p.Stop(30 * time.Second) })
	}
	wg.Wait()
}

// throttled is how long each instance has been held back by its CPU
// quota (nil without -scale.cpu).
func (env *scaleEnv) throttled(b *testing.B) []time.Duration {
	if len(env.limits) == 0 {
		return nil
	}
	out := make([]time.Duration, len(env.limits))
	for i, l := range env.limits {
		d, err := l.Throttled()
		if err != nil {
			b.Fatal(err)
		}
		out[i] = d
	}
	return out
}

// scaleCPU is the CPU time each process has used.
type scaleCPU struct {
	inst       []time.Duration // each edgeproc
	nats, mosq time.Duration   // all nodes; Mosquitto (0 with the gateway)
	self       time.Duration   // this process: the publisher
}

func (env *scaleEnv) cpu(b *testing.B) scaleCPU {
	var s scaleCPU
	for _, p := range env.procs {
		c, err := p.CPU()
		if err != nil {
			b.Fatal(err)
		}
		s.inst = append(s.inst, c)
	}
	for _, pid := range env.nats.pids {
		c, err := testenv.CPUOf(pid)
		if err != nil {
			b.Fatal(err)
		}
		s.nats += c
	}
	if env.mosq != nil {
		c, err := testenv.CPUOf(env.mosq.PID())
		if err != nil {
			b.Fatal(err)
		}
		s.mosq = c
	}
	c, err := testenv.CPUOf(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	s.self = c
	return s
}

// sub is s − o.
func (s scaleCPU) sub(o scaleCPU) scaleCPU {
	d := scaleCPU{nats: s.nats - o.nats, mosq: s.mosq - o.mosq, self: s.self - o.self}
	for i := range s.inst {
		d.inst = append(d.inst, s.inst[i]-o.inst[i])
	}
	return d
}

func (s scaleCPU) edgeproc() time.Duration {
	var e time.Duration
	for _, c := range s.inst {
		e += c
	}
	return e
}

// relaySplit is the relay holder's CPU and the mean of the other
// instances' (ok only with an instance relaying and at least one other).
func (s scaleCPU) relaySplit(relay int) (holder, others time.Duration, ok bool) {
	if relay < 0 || len(s.inst) < 2 {
		return 0, 0, false
	}
	for i, c := range s.inst {
		if i != relay {
			others += c
		}
	}
	return s.inst[relay], others / time.Duration(len(s.inst)-1), true
}

// scaleRun is one case of BenchmarkScaleOut.
func scaleRun(b *testing.B, bin, natsBin string, c scaleCase) {
	b.StopTimer()
	start := fleetStart()
	env := startScale(b, bin, natsBin, c, start, 15000)
	defer env.stop()
	msgs := scaleFleet(15000, *scaleFor, start)
	// An exact duplicate the fleet sends (a phone's resend) may never
	// reach the engine: alone in a batch, the batch is the same as the
	// one before and the stream drops it. The distinct positions do.
	base := receivedPositions(env.listens)
	results0, kv0 := sumMetric(env.listens, "edgeproc_results_total{"), sumMetric(env.listens, "edgeproc_kv_writes_total{")
	want := distinctCount(msgs)
	cpu0 := env.cpu(b)
	t0 := time.Now()
	b.StartTimer()
	profiled := env.profile(b, c.name)
	if _, err := publishMQTT(env.pubAddrs, msgs, *scaleFor, nil); err != nil {
		b.Fatal(err)
	}
	var got uint64
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if got = receivedPositions(env.listens) - base; got >= want {
			break
		}
		if time.Now().After(deadline) {
			for i, p := range env.procs {
				b.Logf("instance %d log (tail):\n%s", i, tail(p.Logs(), 3000))
			}
			b.Fatalf("%d of %d distinct positions received within 3 minutes", got, want)
		}
	}
	b.StopTimer()
	profiled()
	took := time.Since(t0)
	d := env.cpu(b).sub(cpu0)
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(len(msgs)) }
	b.ReportMetric(per(d.edgeproc()), "edgeproc-µs/pos")
	b.ReportMetric(per(d.nats), "nats-µs/pos")
	if env.mosq != nil {
		b.ReportMetric(per(d.mosq), "mosquitto-µs/pos")
	}
	b.ReportMetric(float64(len(msgs))/took.Seconds(), "pos/s")
	relay := relayHolder(env.listens)
	// Results and courier-bucket writes are read when every position is
	// in, before the last windows may have fired: a lower bound.
	results, kv := sumMetric(env.listens, "edgeproc_results_total{")-results0, sumMetric(env.listens, "edgeproc_kv_writes_total{")-kv0
	if holder, others, ok := d.relaySplit(relay); ok {
		b.ReportMetric(per(holder), "relay-inst-µs/pos")
		b.ReportMetric(per(others), "other-inst-µs/pos")
	}
	b.Logf("%s: %d positions published, %d received, in %v (%.0f results, %.0f courier-bucket writes); CPU edgeproc %v %v (relay: instance %d), nats-server %v, mosquitto %v, publisher %v; load average %s",
		c.name, len(msgs), got, took.Round(time.Millisecond), results, kv, d.edgeproc(), d.inst, relay, d.nats, d.mosq, d.self, testenv.LoadAvg())
}

// distinctCount is the number of distinct messages (topic and payload).
func distinctCount(msgs []testenv.Message) uint64 {
	distinct := make(map[uint64]struct{}, len(msgs))
	for _, m := range msgs {
		h := fnv.New64a()
		h.Write([]byte(m.Topic))
		h.Write([]byte{0})
		h.Write(m.Payload)
		distinct[h.Sum64()] = struct{}{}
	}
	return uint64(len(distinct))
}

// fleetStart is when the fleet's event time starts: 5 s before a
// minute, at most a minute ago. The engine's watermark is the newest
// position's time less windows.tolerated_delay (45 s), so with the
// default windows (slide 1 m) the windows ending 5 s after the start
// fire 50 s into it, for every courier (each sends within its first
// 5 s): a minute of the fleet holds one firing of every courier's
// window, as a minute of a city does, wherever the run falls on the
// clock. Event time stays behind the clock (windows.max_future_skew).
func fleetStart() time.Time {
	return time.Now().Truncate(time.Minute).Add(-5 * time.Second)
}

// scaleFleet is couriers couriers (one position every 5 s each) over
// span of event time from start, their ids six digits wide whatever
// their number (girona-c000001), so that fleets of different sizes
// share their couriers.
func scaleFleet(couriers int, span time.Duration, start time.Time) []testenv.Message {
	msgs := testenv.FleetMessages("girona", couriers, span, 1, start.Add(span))
	for i, m := range msgs {
		id := m.Topic[strings.LastIndexByte(m.Topic, '/')+1:]
		num, ok := strings.CutPrefix(id, "girona-c")
		if !ok || len(num) >= 6 {
			continue
		}
		wide := "girona-c" + strings.Repeat("0", 6-len(num)) + num
		msgs[i].Topic = m.Topic[:len(m.Topic)-len(id)] + wide
		msgs[i].Payload = bytes.Replace(m.Payload, []byte(`"`+id+`"`), []byte(`"`+wide+`"`), 1)
	}
	return msgs
}

// publishConns is the number of MQTT connections the fleet publishes
// on, each courier's positions on one of them, in order.
const publishConns = 8

// publishMQTT publishes msgs evenly over d on publishConns MQTT 3.1.1
// connections (connection k to addrs[k % len(addrs)]), QoS 1, each with
// up to 256 publishes awaiting their PUBACK, and returns once the
// brokers have acked them all: how long that took from the first
// publish; acked (if not nil) counts the PUBACKs as they come. A broker
// slower than the pace holds the publishers back (the window fills), so
// the time is longer than d.
func publishMQTT(addrs []string, msgs []testenv.Message, d time.Duration, acked *atomic.Int64) (time.Duration, error) {
	shares := make([][]testenv.Message, publishConns)
	for _, m := range msgs {
		h := fnv.New32a()
		h.Write([]byte(m.Topic))
		k := h.Sum32() % publishConns
		shares[k] = append(shares[k], m)
	}
	pubs := make([]*mqttPub, publishConns)
	for k := range pubs {
		p, err := dialMQTTPub(addrs[k%len(addrs)], fmt.Sprintf("scale-pub-%d-%d", k, time.Now().UnixNano()), acked)
		if err != nil {
			for _, p := range pubs[:k] {
				p.close()
			}
			return 0, err
		}
		pubs[k] = p
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, publishConns)
	for k, share := range shares {
		wg.Go(func() {
			defer pubs[k].close()
			if err := pubs[k].publishPaced(share, start, d); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	return took, errors.Join(collect(errs)...)
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

// mqttPub is a minimal MQTT 3.1.1 QoS 1 publisher (the gateway speaks
// 3.1.1 only) that keeps a window of publishes in flight, so that a
// connection's rate is not bound by its round trip.
type mqttPub struct {
	conn   net.Conn
	w      *bufio.Writer
	window chan struct{} // one token per publish awaiting its PUBACK
	done   chan error    // the PUBACK reader's end
	id     uint16
	acked  *atomic.Int64 // nil: not counted
}

const mqttPubWindow = 256

func dialMQTTPub(addr, clientID string, acked *atomic.Int64) (*mqttPub, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	// CONNECT: protocol MQTT level 4, clean session, keep-alive 600 s.
	var vh []byte
	vh = appendMQTTString(vh, "MQTT")
	vh = append(vh, 4, 0x02, 0x02, 0x58)
	vh = appendMQTTString(vh, clientID)
	pkt := appendMQTTLen([]byte{0x10}, len(vh))
	if _, err := conn.Write(append(pkt, vh...)); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ack [4]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connack from %s: %w", addr, err)
	}
	if ack[0] != 0x20 || ack[3] != 0 {
		conn.Close()
		return nil, fmt.Errorf("connect to %s refused: % x", addr, ack)
	}
	_ = conn.SetReadDeadline(time.Time{})
	p := &mqttPub{conn: conn, w: bufio.NewWriterSize(conn, 64<<10), window: make(chan struct{}, mqttPubWindow), done: make(chan error, 1), acked: acked}
	go p.readAcks()
	return p, nil
}

// readAcks frees a window slot per PUBACK (the broker acks in order).
func (p *mqttPub) readAcks() {
	r := bufio.NewReader(p.conn)
	for {
		h, err := r.ReadByte()
		if err != nil {
			p.done <- err
			return
		}
		n, err := readMQTTLen(r)
		if err != nil {
			p.done <- err
			return
		}
		if _, err := r.Discard(n); err != nil {
			p.done <- err
			return
		}
		if h>>4 == 4 { // PUBACK
			<-p.window
			if p.acked != nil {
				p.acked.Add(1)
			}
		}
	}
}

// publishPaced sends msgs, message i due at start + (i+1)·d/len(msgs),
// and returns once every one is acked.
func (p *mqttPub) publishPaced(msgs []testenv.Message, start time.Time, d time.Duration) error {
	for i := 0; i < len(msgs); {
		due := min(len(msgs), int(float64(time.Since(start))/float64(d)*float64(len(msgs))))
		if due <= i {
			// Until message i is due, at most 5 ms.
			next := start.Add(time.Duration(float64(d) * float64(i+1) / float64(len(msgs))))
			time.Sleep(min(max(time.Until(next), 100*time.Microsecond), 5*time.Millisecond))
			continue
		}
		for ; i < due; i++ {
			if err := p.publish(msgs[i]); err != nil {
				return err
			}
		}
		if err := p.w.Flush(); err != nil {
			return err
		}
	}
	if err := p.w.Flush(); err != nil {
		return err
	}
	for range mqttPubWindow { // every slot back: every publish acked
		select {
		case p.window <- struct{}{}:
		case err := <-p.done:
			return fmt.Errorf("publisher: %w", err)
		case <-time.After(2 * time.Minute):
			return errors.New("publisher: PUBACKs missing after 2 minutes")
		}
	}
	for range mqttPubWindow {
		<-p.window
	}
	return nil
}

func (p *mqttPub) publish(m testenv.Message) error {
	select {
	case p.window <- struct{}{}:
	default:
		// The window is full: send what is buffered, then wait.
		if err := p.w.Flush(); err != nil {
			return err
		}
		select {
		case p.window <- struct{}{}:
		case err := <-p.done:
			return fmt.Errorf("publisher: %w", err)
		}
	}
	if p.id++; p.id == 0 {
		p.id = 1
	}
	var hdr [8]byte
	b := appendMQTTLen(append(hdr[:0], 0x32), 2+len(m.Topic)+2+len(m.Payload))
	b = appendMQTTString(b, m.Topic)
	b = binary.BigEndian.AppendUint16(b, p.id)
	if _, err := p.w.Write(b); err != nil {
		return err
	}
	_, err := p.w.Write(m.Payload)
	return err
}

func (p *mqttPub) close() {
	_, _ = p.conn.Write([]byte{0xe0, 0}) // DISCONNECT
	_ = p.conn.Close()
}

func appendMQTTString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendMQTTLen(b []byte, n int) []byte {
	for {
		c := byte(n & 0x7f)
		if n >>= 7; n > 0 {
			c |= 0x80
		}
		b = append(b, c)
		if n == 0 {
			return b
		}
	}
}

func readMQTTLen(r *bufio.Reader) (int, error) {
	n, shift := 0, 0
	for range 4 {
		c, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		n |= int(c&0x7f) << shift
		if c&0x80 == 0 {
			return n, nil
		}
		shift += 7
	}
	return 0, errors.New("malformed remaining length")
}

func httpOK(url string) bool {
	res, err := readyzClient.Get(url)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// ownedPartitions counts the partitions some instance owns.
func ownedPartitions(listens []string) int {
	owned := map[int]bool{}
	for _, l := range listens {
		p := &proc{listen: l}
		for _, n := range p.owned() {
			owned[n] = true
		}
	}
	return len(owned)
}

// receivedPositions sums edgeproc_positions_received_total over the
// instances' /metrics.
func receivedPositions(listens []string) uint64 {
	var sum uint64
	for _, l := range listens {
		v, ok := metricSum(l, "edgeproc_positions_received_total{")
		if !ok {
			return 0
		}
		sum += uint64(v)
	}
	return sum
}

// sumMetric sums metricSum over the instances (0 for one that does not
// answer).
func sumMetric(listens []string, prefix string) float64 {
	var sum float64
	for _, l := range listens {
		v, _ := metricSum(l, prefix)
		sum += v
	}
	return sum
}

// relayHolder is the index of the instance whose edgeproc_relay_active
// is 1, or -1.
func relayHolder(listens []string) int {
	for i, l := range listens {
		if v, _ := metricSum(l, "edgeproc_relay_active{"); v == 1 {
			return i
		}
	}
	return -1
}

// metricSum sums the samples of /metrics at listen whose line starts with
// prefix.
func metricSum(listen, prefix string) (float64, bool) {
	res, err := readyzClient.Get("http://" + listen + "/metrics")
	if err != nil {
		return 0, false
	}
	defer res.Body.Close()
	var sum float64
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum, true
}

// natsCluster is one nats-server process, or several clustered on
// loopback routes, each with JetStream and a store of its own.
type natsCluster struct {
	urls      []string // each node's client URL
	mqttAddrs []string // each node's MQTT listener (with the gateway)
	pids      []int
}

// url is the nodes' client URLs, comma-separated.
func (c *natsCluster) url() string { return strings.Join(c.urls, ",") }

// buildNATSServer builds the nats-server of the module's version.
func buildNATSServer(b *testing.B) string {
	out := filepath.Join(b.TempDir(), "nats-server")
	cmd := exec.Command("go", "build", "-o", out, "github.com/nats-io/nats-server/v2")
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build nats-server: %v\n%s", err, o)
	}
	return out
}

// startNATSCluster starts nodes nats-server processes on 127.0.0.1 and
// free ports (clustered when nodes > 1), with JetStream; with gateway,
// each also has an MQTT listener (its internal streams on every node)
// and the partition mapping of docs/scale-out.md for 6 partitions. It
// returns once JetStream answers; the processes are killed when b ends.
func startNATSCluster(b *testing.B, bin, dir string, nodes int, gateway bool) *natsCluster {
	c := &natsCluster{}
	var clientAddrs, routeAddrs []string
	for range nodes {
		clientAddrs = append(clientAddrs, testenv.FreeAddr(b))
		routeAddrs = append(routeAddrs, testenv.FreeAddr(b))
		if gateway {
			c.mqttAddrs = append(c.mqttAddrs, testenv.FreeAddr(b))
		}
	}
	for i := range nodes {
		conf := fmt.Sprintf("server_name: n%d\nlisten: %s\njetstream {store_dir: %q}\n",
			i+1, clientAddrs[i], filepath.Join(dir, fmt.Sprintf("nats-n%d", i+1)))
		if nodes > 1 {
			var routes []string
			for _, a := range routeAddrs {
				routes = append(routes, "nats://"+a)
			}
			conf += fmt.Sprintf("cluster {name: bench, listen: %s, routes: [%s]}\n", routeAddrs[i], strings.Join(routes, ", "))
		}
		if gateway {
			conf += fmt.Sprintf("mqtt {listen: %s, stream_replicas: %d}\n", c.mqttAddrs[i], nodes)
			for src, dst := range mapping(6) {
				conf += fmt.Sprintf("mappings {%q: %q}\n", src, dst)
			}
		}
		path := filepath.Join(dir, fmt.Sprintf("nats-n%d.conf", i+1))
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(bin, "-c", path)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		c.urls = append(c.urls, "nats://"+clientAddrs[i])
		c.pids = append(c.pids, cmd.Process.Pid)
	}
	testenv.WaitFor(b, 60*time.Second, "nats-server answers JetStream requests", func() bool {
		nc, err := nats.Connect(c.url(), nats.Timeout(time.Second))
		if err != nil {
			return false
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err == nil
	})
	return c
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }
