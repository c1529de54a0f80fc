// Package crashtest proves contract §8 and §3's "deaf is not silent" end
// to end: `edgeproc run`, a real subprocess with the default idle timeout,
// is killed with SIGKILL at random moments (and right after a checkpoint
// file is written, before the log is truncated, while NATS is down, for
// longer than the idle timeout while the fleet publishes, and in the final
// silence), and the broker is stopped for as long, while a fleet is
// published to Mosquitto; edgeproc is restarted after each kill. The JetStream stream must end up holding exactly the results of
// one uninterrupted engine run over the same positions, and the lake
// (rolling every 2 s, so that kills land in rolls) exactly its accepted
// positions, each once, with the same late judgement (contract §7).
//
// What is checked: for every result type but rejected, the set of keys and
// each result's JSON (emitted_at_ms removed) equal the reference run's —
// nothing missing, nothing extra, every value equal. For rejected inputs
// the set of distinct (reason, raw) pairs is equal: their key holds the
// write-ahead-log index, which shifts when the broker redelivers messages
// that were logged but whose ack was lost with the process. No position is
// lost: every valid position is counted in some distance window's
// `positions`, so a lost one changes a distance record, and every bad
// payload must appear among the rejected pairs.
package crashtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/oracle"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/market"
)

const (
	marketName = "crash"
	couriers   = 40
	// publishFor is how long publishing the fleet takes.
	publishFor = 75 * time.Second
	minKills   = 10
)

// waitReady waits until edgeproc's /readyz says 200: before its first
// subscription, the broker would not keep messages for it.
func waitReady(tb testing.TB, listen string, d time.Duration) {
	tb.Helper()
	testenv.WaitFor(tb, d, "edgeproc ready", func() bool {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func mustConfig(tb testing.TB, dir, mqttURL, natsURL string) (string, config.Config) {
	tb.Helper()
	// Girona's service area, which the fleet's couriers (round its
	// centre) drive in and out of; and dead zones over 10 s windows, so
	// that they fire during the run.
	area, err := filepath.Abs("../demo/girona-area.geojson")
	if err != nil {
		tb.Fatal(err)
	}
	y := fmt.Sprintf(`market: %s
mqtt: {url: %q, client_id: edgeproc-crash}
nats: {url: %q, duplicate_window: 10m}
windows: {size: 20s, slide: 10s, gap: 15s, tolerated_delay: 2s, allowed_lateness: 2m, max_future_skew: 24h}
dead_zones: {window: 10s}
geo: {service_area: %q}
state: {dir: %q, checkpoint_interval: 300ms}
http: {listen: %q}
lake: {dir: %q, roll_interval: 2s}
`, marketName, mqttURL, natsURL, area, filepath.Join(dir, "state"), testenv.FreeAddr(tb), filepath.Join(dir, "lake"))
	path := filepath.Join(dir, "crash.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		tb.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		tb.Fatalf("config: %v", err)
	}
	return path, c
}

// proc is one edgeproc process; its log goes to a shared buffer, and each
// "checkpoint written" line is signalled on ckpt.
type proc struct {
	cmd  *exec.Cmd
	done chan error
}

type supervisor struct {
	tb   testing.TB
	bin  string
	conf string

	mu   sync.Mutex
	logs bytes.Buffer
	ckpt chan struct{}
	cur  *proc
	runs int
}

func (s *supervisor) start() {
	s.tb.Helper()
	cmd := exec.Command(s.bin, "run", "--config", s.conf, "--log-level", "debug")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		s.tb.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start edgeproc: %v", err)
	}
	s.runs++
	run := s.runs
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			fmt.Fprintf(&s.logs, "[run %d] %s\n", run, line)
			s.mu.Unlock()
			if strings.Contains(line, "checkpoint written") {
				select {
				case s.ckpt <- struct{}{}:
				default:
				}
			}
		}
	}()
	go func() {
		<-scanDone
		p.done <- cmd.Wait()
	}()
	s.cur = p
}

// supervise starts edgeproc on conf and waits until it is ready; its logs
// are shown if the test fails.
func supervise(t *testing.T, bin, conf, listen string) *supervisor {
	t.Helper()
	sup := &supervisor{tb: t, bin: bin, conf: conf, ckpt: make(chan struct{}, 1)}
	t.Cleanup(func() {
		if t.Failed() {
			sup.dumpLogs()
		}
	})
	sup.start()
	waitReady(t, listen, 30*time.Second)
	return sup
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *supervisor) kill() {
	s.tb.Helper()
	_ = s.cur.cmd.Process.Signal(syscall.SIGKILL)
	<-s.cur.done
}

// stop asks for a graceful shutdown and requires a clean exit.
func (s *supervisor) stop() {
	s.tb.Helper()
	_ = s.cur.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.cur.done:
		if err != nil {
			s.tb.Errorf("edgeproc exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(30 * time.Second):
		_ = s.cur.cmd.Process.Kill()
		s.tb.Fatalf("edgeproc did not stop within 30s of SIGTERM")
	}
}

func (s *supervisor) dumpLogs() {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.logs.Bytes()
	if len(b) > 200<<10 {
		b = b[len(b)-200<<10:]
	}
	s.tb.Logf("edgeproc logs (tail):\n%s", b)
}

type rec struct {
	Type   string `json:"type"`
	Key    string `json:"key"`
	Reason string `json:"reason"`
	Raw    string `json:"raw"`
}

// expected runs the engine over the payloads in publish order with no
// processing clock (every timestamp is before its arrival, so the
// effective timestamps are the timestamps), then ends the input so that
// everything fires, as the live run's idle rule makes it fire after the
// final silence. It returns the first JSON of each key, emitted_at_ms and
// end_of_input removed, and the (reason, raw) pairs of rejected inputs.
func expected(tb testing.TB, cfg config.Config, msgs []testenv.Message) (map[string]string, map[string]bool) {
	tb.Helper()
	ecfg := market.EngineConfig(cfg)
	ecfg.Topic = cfg.MQTT.Topic
	x := oracle.NewResults(oracle.EmittedRe, true)
	pushAsLive(engine.New(ecfg, x.Sink), msgs)
	return x.ByKey(tb), x.Rejected()
}

// pushAsLive pushes msgs into eng as the live run meets them, then stops
// it. The messages arrive 1 ms apart after every timestamp, so that no
// silence comes between them (nor in the live run: the fleet never
// stops) and none is ahead of the clock; then the final silence, a day
// of it, fires what the live run's final silence fires: every window and
// session, the no_signals of couriers that went silent at the end like
// any other (not end_of_input), and the dead zones.
func pushAsLive(eng *engine.Engine, msgs []testenv.Message) {
	var arrival int64
	for _, m := range msgs {
		var p struct {
			TS int64 `json:"timestamp_ms"`
		}
		if json.Unmarshal(m.Payload, &p) == nil {
			arrival = max(arrival, p.TS)
		}
	}
	for i, m := range msgs {
		arrival++
		eng.Push(&engine.Input{Payload: m.Payload, Topic: m.Topic, Line: int64(i + 1), Arrival: arrival, HasArrival: true})
	}
	eng.Tick(arrival + 24*3600_000)
	eng.Stop()
}

func streamCount(tb testing.TB, url, stream string) uint64 {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		return 0
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0
	}
	return st.CachedInfo().State.Msgs
}

// publishFleet publishes msgs in order, paced over d, as phones would:
// when the broker is away it reconnects and sends again until the broker
// has acknowledged each message.
func publishFleet(addr string, msgs []testenv.Message, d time.Duration, done chan<- error) {
	pub, err := testenv.DialPublisher(addr, "crash-pub")
	if err != nil {
		done <- err
		return
	}
	defer func() { pub.Close() }()
	pace := d / time.Duration(len(msgs))
	next := time.Now()
	for _, m := range msgs {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := pub.Publish(ctx, m.Topic, m.Payload)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				done <- fmt.Errorf("broker away for 2 minutes: %w", err)
				return
			}
			pub.Close()
			time.Sleep(200 * time.Millisecond)
			if p, err := testenv.DialPublisher(addr, "crash-pub"); err == nil {
				pub = p
			}
		}
		next = next.Add(pace)
		time.Sleep(time.Until(next))
	}
	done <- nil
}

// TestKill9_ResultsEqualUninterruptedRun runs the fleet through kill -9s at
// random moments, one right after a checkpoint write, one in the middle
// of a NATS outage, an outage of NATS, of edgeproc and of the broker each
// longer than the idle timeout and gap + tolerated_delay while the fleet goes on
// publishing, and kill -9s in the final fleet-wide silence, all with the
// default idle timeout: the stream must hold exactly what one run without
// any of it gives (contract §3 "deaf is not silent", §8).
func TestKill9_ResultsEqualUninterruptedRun(t *testing.T) {
	bin := testenv.BuildEdgeproc(t)
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	dir := t.TempDir()
	confPath, cfg := mustConfig(t, dir, mosq.URL(), ns.URL())
	idle := cfg.Windows.IdleTimeout
	outage := idle + 2*time.Second
	if g := cfg.Windows.Gap + cfg.Windows.ToleratedDelay; outage <= g {
		t.Fatalf("outage %v must exceed gap + tolerated_delay %v", outage, g)
	}

	// Event time runs about 6 times faster than the clock, and ends at the
	// start: every position arrives after its timestamp.
	msgs := testenv.FleetMessages(marketName, couriers, 8*time.Minute, 42, time.Now().Add(-8*time.Minute))
	wantByKey, wantRejected := expected(t, cfg, msgs)
	wantLake := expectedLake(t, cfg, msgs, true)
	t.Logf("fleet: %d messages; reference run: %d keyed results, %d rejected inputs", len(msgs), len(wantByKey), len(wantRejected))
	revisions := testenv.Revisions(wantByKey)
	zones, moves := 0, 0
	for k := range wantByKey {
		switch typ, _, _ := strings.Cut(k, "|"); typ {
		case "dead_zone":
			zones++
		case "left_area", "entered_area":
			moves++
		}
	}
	t.Logf("reference run: %d revisions (allowed_lateness %v), %d dead zones, %d moves across the service area", revisions, cfg.Windows.AllowedLateness, zones, moves)
	if zones == 0 || moves == 0 {
		t.Fatalf("the reference run has %d dead zones and %d moves across the service area: the crash test is meant to carry both across its kills", zones, moves)
	}
	if len(wantByKey) == 0 || len(wantRejected) == 0 || revisions == 0 {
		t.Fatalf("the reference run emitted too little to prove anything")
	}

	sup := supervise(t, bin, confPath, cfg.HTTP.Listen)

	pubDone := make(chan error, 1)
	go publishFleet(mosq.Addr(), msgs, publishFor, pubDone)

	// Killer: random kills until publishing ends, with the special cases
	// at fixed places in the sequence.
	rng := rand.New(rand.NewSource(1))
	kills, ckptKills, natsKills, longKills, brokerStops := 0, 0, 0, 0, 0
	published := false
	for !published || kills < minKills {
		wait := time.Duration(1500+rng.Intn(4500)) * time.Millisecond
		select {
		case err := <-pubDone:
			if err != nil {
				t.Fatal(err)
			}
			published = true
			continue
		case <-time.After(wait):
		}
		switch {
		case kills == 2:
			// Drain a stale signal, then kill on the next checkpoint.
			select {
			case <-sup.ckpt:
			default:
			}
			select {
			case <-sup.ckpt:
				sup.kill()
				ckptKills++
			case <-time.After(10 * time.Second):
				t.Fatalf("no checkpoint written within 10s")
			}
		case kills == 3 && longKills == 0:
			sup.kill()
			time.Sleep(outage) // the fleet goes on publishing into the session
			longKills++
		case kills == 5 && natsKills == 0:
			// NATS away for longer than the idle timeout, edgeproc killed
			// halfway: results back up, then the log and the broker's
			// session hold what follows.
			ns.Shutdown()
			time.Sleep(outage / 2)
			sup.kill()
			time.Sleep(outage / 2)
			ns.Restart()
			natsKills++
		case kills == 6 && brokerStops == 0:
			mosq.Stop()
			time.Sleep(outage) // edgeproc is deaf, the phones wait
			mosq.Restart()
			brokerStops++
			continue // no kill: edgeproc lives through it
		default:
			sup.kill()
		}
		kills++
		sup.start()
	}

	// The fleet-wide silence, with kill -9s in it: after each restart the
	// idle clock starts again, and the idle rule then fires everything.
	for i := 0; i < 2; i++ {
		time.Sleep(idle/2 + time.Duration(rng.Intn(int(idle/2))))
		sup.kill()
		kills++
		sup.start()
	}
	t.Logf("%d kills (%d right after a checkpoint write, %d with NATS down, %d for %v), %d broker stops for %v, %d edgeproc runs",
		kills, ckptKills, natsKills, longKills, outage, brokerStops, outage, sup.runs)

	settleAndCompare(t, sup, ns.URL(), cfg, wantByKey, wantRejected)
	checkLake(t, cfg, wantLake, true)
	checkReplayOfLake(t, cfg, wantByKey)
}

// settleAndCompare waits until edgeproc is idle, stops it gracefully and
// requires the stream to hold exactly the reference run's results: once
// per key, each with the key as its message id, none with end_of_input.
func settleAndCompare(t *testing.T, sup *supervisor, natsURL string, cfg config.Config, wantByKey map[string]string, wantRejected map[string]bool) {
	t.Helper()
	idle := cfg.Windows.IdleTimeout
	// Wait until edgeproc is idle: the stream holds at least every expected
	// key and has stopped growing (or, if something is lost, stopped
	// growing for longer: the comparison then says what). The idle rule
	// needs idle_timeout, then size + gap of event time, to fire the rest.
	minMsgs := uint64(len(wantByKey) + len(wantRejected))
	settle := idle + cfg.Windows.Size + cfg.Windows.Gap + 10*time.Second
	deadline := time.Now().Add(settle + 60*time.Second)
	var last uint64
	stable := 0
	for stable < int(settle/time.Second) && !(stable >= 3 && last >= minMsgs) && time.Now().Before(deadline) {
		time.Sleep(time.Second)
		n := streamCount(t, natsURL, cfg.NATS.Stream)
		if n == last {
			stable++
		} else {
			stable = 0
		}
		last = n
	}
	t.Logf("stream holds %d messages, want at least %d", last, minMsgs)
	sup.stop()

	gotByKey, gotRejected, problems := incarnation(t, testenv.ReadStored(t, natsURL, cfg.NATS.Stream))
	for _, p := range problems {
		t.Error(p)
	}
	compare(t, gotByKey, wantByKey, gotRejected, wantRejected)
}

func compare(tb testing.TB, got, want map[string]string, gotRej, wantRej map[string]bool) {
	tb.Helper()
	diffs := testenv.DiffResults(got, want, "the reference run")
	for p := range wantRej {
		if !gotRej[p] {
			diffs = append(diffs, fmt.Sprintf("rejected input missing from the stream: %q", p))
		}
	}
	for p := range gotRej {
		if !wantRej[p] {
			diffs = append(diffs, fmt.Sprintf("rejected input not in the reference run: %q", p))
		}
	}
	types := map[string]int{}
	for k := range want {
		types[strings.SplitN(k, "|", 2)[0]]++
	}
	tb.Logf("compared %d keyed results %v and %d rejected inputs", len(want), types, len(wantRej))
	if len(diffs) > 0 {
		tb.Errorf("%d differences; first ones:", len(diffs))
		for _, d := range diffs[:min(15, len(diffs))] {
			tb.Errorf("  %s", d)
		}
	}
}
