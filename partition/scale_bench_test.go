package partition

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// BenchmarkScaleOut is the scale-out's cost, all real processes on this
// machine: nats-server (built from the module's version, one node, R1
// streams), Mosquitto, and `edgeproc run`: one `source: mqtt` process,
// then 1, 2 and 3 instances of `source: jetstream` (6 partitions, ingest
// mqtt). The same fleet each time, 15 000 couriers each sending every
// 5 s (3 000 positions/s) for scaleFor, published to Mosquitto by this
// process; once every position is applied it reports the CPU (utime +
// stime) of each server per position: edgeproc (all instances),
// nats-server, Mosquitto. Run with -benchtime=1x:
//
//	go test -run '^$' -bench ScaleOut -benchtime 1x -timeout 30m ./partition
func BenchmarkScaleOut(b *testing.B) {
	bin := testenv.BuildEdgeproc(b)
	natsBin := buildNATSServer(b)
	for _, c := range []struct {
		name      string
		instances int
	}{{"mqtt", 0}, {"jetstream-1", 1}, {"jetstream-2", 2}, {"jetstream-3", 3}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				scaleRun(b, bin, natsBin, c.instances)
			}
		})
	}
}

// scaleFor is how long the fleet publishes.
var scaleFor = flag.Duration("scale.for", 60*time.Second, "BenchmarkScaleOut: how long the fleet publishes")

// scaleRun is one case of BenchmarkScaleOut: instances 0 is the single
// `source: mqtt` process.
func scaleRun(b *testing.B, bin, natsBin string, instances int) {
	b.StopTimer()
	dir := b.TempDir()
	ns := startNATSServer(b, natsBin, dir)
	mosq := testenv.StartMosquitto(b)
	var procs []*testenv.Proc
	var listens []string
	n := max(instances, 1)
	for i := range n {
		listen := testenv.FreeAddr(b)
		conf := filepath.Join(dir, fmt.Sprintf("e%d.yaml", i))
		y := fmt.Sprintf(`market: girona
mqtt: {url: %q}
nats: {url: %q}
windows: {size: 5m, slide: 1m}
http: {listen: %s}
`, mosq.URL(), ns, listen)
		if instances == 0 {
			y += fmt.Sprintf("state: {dir: %q}\n", filepath.Join(dir, "state"))
		} else {
			y += fmt.Sprintf("source: jetstream\njetstream: {partitions: 6, replicas: 1, instance: i%d, max_owned: %d}\n", i, (6+n-1)/n)
		}
		if err := os.WriteFile(conf, []byte(y), 0o600); err != nil {
			b.Fatal(err)
		}
		procs = append(procs, testenv.StartProc(b, fmt.Sprintf("e%d", i), bin, "run", "--config", conf))
		listens = append(listens, listen)
	}
	for _, l := range listens {
		testenv.WaitFor(b, 2*time.Minute, "edgeproc ready", func() bool { return httpOK("http://" + l + "/readyz") })
	}
	if instances > 0 {
		testenv.WaitFor(b, 2*time.Minute, "every partition owned", func() bool { return ownedPartitions(listens) == 6 })
	}
	msgs := testenv.FleetMessages("girona", 15000, *scaleFor, 1, time.Now().Add(*scaleFor))
	cpu := func() (e, nsrv, m time.Duration) {
		for _, p := range procs {
			c, err := p.CPU()
			if err != nil {
				b.Fatal(err)
			}
			e += c
		}
		var err error
		if nsrv, err = testenv.CPUOf(ns.pid); err != nil {
			b.Fatal(err)
		}
		if m, err = testenv.CPUOf(mosq.PID()); err != nil {
			b.Fatal(err)
		}
		return e, nsrv, m
	}
	e0, n0, m0 := cpu()
	start := time.Now()
	b.StartTimer()
	publishPaced(b, mosq.Addr(), msgs, *scaleFor)
	// An exact duplicate the fleet sends (a phone's resend) may never
	// reach the engine: alone in a batch, the batch is the same as the
	// one before and the stream drops it. The distinct positions do.
	distinct := map[string]bool{}
	for _, m := range msgs {
		distinct[m.Topic+"|"+string(m.Payload)] = true
	}
	var got uint64
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if got = receivedPositions(listens); got >= uint64(len(distinct)) {
			break
		}
		if time.Now().After(deadline) {
			for i, p := range procs {
				b.Logf("instance %d log (tail):\n%s", i, tail(p.Logs(), 3000))
			}
			b.Fatalf("%d of %d distinct positions received within 3 minutes", got, len(distinct))
		}
	}
	b.StopTimer()
	took := time.Since(start)
	e1, n1, m1 := cpu()
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(len(msgs)) }
	b.ReportMetric(per(e1-e0), "edgeproc-µs/pos")
	b.ReportMetric(per(n1-n0), "nats-µs/pos")
	b.ReportMetric(per(m1-m0), "mosquitto-µs/pos")
	b.ReportMetric(float64(len(msgs))/took.Seconds(), "pos/s")
	b.Logf("%d positions published, %d received, in %v; CPU edgeproc %v, nats-server %v, mosquitto %v", len(msgs), got, took.Round(time.Millisecond), e1-e0, n1-n0, m1-m0)
	for _, p := range procs {
		_ = p.Stop(30 * time.Second)
	}
}

// publishPaced publishes msgs evenly over d from 8 QoS 1 publishers, each
// courier's positions from one of them, in order.
func publishPaced(b *testing.B, addr string, msgs []testenv.Message, d time.Duration) {
	const pubs = 8
	shares := make([][]testenv.Message, pubs)
	for _, m := range msgs {
		h := fnv.New32a()
		h.Write([]byte(m.Topic))
		k := h.Sum32() % pubs
		shares[k] = append(shares[k], m)
	}
	var wg sync.WaitGroup
	errs := make(chan error, pubs)
	for k, share := range shares {
		wg.Go(func() {
			p, err := testenv.DialPublisher(addr, fmt.Sprintf("scale-pub-%d", k))
			if err != nil {
				errs <- err
				return
			}
			defer p.Close()
			start := time.Now()
			for i, m := range share {
				if err := p.Publish(context.Background(), m.Topic, m.Payload); err != nil {
					errs <- err
					return
				}
				if wait := time.Duration(i+1)*d/time.Duration(len(share)) - time.Since(start); wait > 0 {
					time.Sleep(wait)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
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
		res, err := readyzClient.Get("http://" + l + "/metrics")
		if err != nil {
			return 0
		}
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "edgeproc_positions_received_total{") {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				sum += uint64(v)
			}
		}
		res.Body.Close()
	}
	return sum
}

// natsServer is a nats-server process.
type natsServer struct {
	url string
	pid int
}

func (n natsServer) String() string { return n.url }

// buildNATSServer builds the nats-server of the module's version.
func buildNATSServer(b *testing.B) string {
	out := filepath.Join(b.TempDir(), "nats-server")
	cmd := exec.Command("go", "build", "-o", out, "github.com/nats-io/nats-server/v2")
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build nats-server: %v\n%s", err, o)
	}
	return out
}

// startNATSServer starts nats-server with JetStream on 127.0.0.1 and a
// free port, stopped when b ends.
func startNATSServer(b *testing.B, bin, dir string) natsServer {
	addr := testenv.FreeAddr(b)
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "-a", host, "-p", port, "-js", "-sd", filepath.Join(dir, "js"))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	testenv.WaitFor(b, 30*time.Second, "nats-server accepts connections", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return natsServer{url: "nats://" + addr, pid: cmd.Process.Pid}
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }
