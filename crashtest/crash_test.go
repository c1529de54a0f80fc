// Package crashtest proves contract §8 end to end: `edgeproc run`, a real
// subprocess, is killed with SIGKILL at random moments (and right after a
// checkpoint file is written, before the log is truncated, and while NATS
// is down) while a fleet is published to Mosquitto, and restarted each
// time. The JetStream stream must end up holding exactly the results of
// one uninterrupted engine run over the same positions.
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
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/result"
)

const (
	market   = "crash"
	couriers = 40
	// publishFor is how long publishing the fleet takes.
	publishFor = 75 * time.Second
	minKills   = 10
)

// mustBuild builds the edgeproc binary into a temporary directory.
func mustBuild(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "edgeproc")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/km0/edgeproc/cmd/edgeproc")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitReady waits until edgeproc's /readyz says 200: before its first
// subscription, the broker would not keep messages for it.
func waitReady(tb testing.TB, listen string, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("edgeproc not ready within %v", d)
}

func mustConfig(tb testing.TB, dir, mqttURL, natsURL string) (string, config.Config) {
	tb.Helper()
	y := fmt.Sprintf(`market: %s
mqtt: {url: %q, client_id: edgeproc-crash}
nats: {url: %q, duplicate_window: 10m}
windows: {size: 20s, slide: 10s, gap: 15s, tolerated_delay: 2s, idle_timeout: 0s, max_future_skew: 24h}
state: {dir: %q, checkpoint_interval: 300ms}
http: {listen: %q}
`, market, mqttURL, natsURL, filepath.Join(dir, "state"), freePort(tb))
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
	cmd := exec.Command(s.bin, "run", "--config", s.conf)
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

var emittedRe = regexp.MustCompile(`,?"emitted_at_ms":-?\d+`)

type rec struct {
	Type   string `json:"type"`
	Key    string `json:"key"`
	Reason string `json:"reason"`
	Raw    string `json:"raw"`
}

// expected runs the engine over the payloads in publish order (no arrival:
// with idle_timeout 0 and no future check the results depend on the order
// only) and returns the first JSON of each key, emitted_at_ms removed, and
// the (reason, raw) pairs of rejected inputs.
func expected(tb testing.TB, cfg config.Config, msgs []testenv.Message) (map[string]string, map[string]bool) {
	tb.Helper()
	ecfg := engine.ConfigFrom(cfg)
	ecfg.Topic = cfg.MQTT.Topic
	byKey, rejected := map[string]string{}, map[string]bool{}
	var buf []byte
	eng := engine.New(ecfg, func(rs []result.Record) {
		for i := range rs {
			buf = rs[i].AppendJSON(buf[:0])
			addRecord(tb, buf, byKey, rejected)
		}
	})
	for i, m := range msgs {
		eng.Push(&engine.Input{Payload: m.Payload, Topic: m.Topic, Line: int64(i + 1)})
	}
	eng.Sync()
	eng.Stop()
	return byKey, rejected
}

func addRecord(tb testing.TB, data []byte, byKey map[string]string, rejected map[string]bool) {
	tb.Helper()
	var r rec
	if err := json.Unmarshal(data, &r); err != nil {
		tb.Fatalf("result %q: %v", data, err)
	}
	if r.Type == "rejected" {
		rejected[r.Reason+"\x00"+r.Raw] = true
		return
	}
	if _, dup := byKey[r.Key]; !dup {
		byKey[r.Key] = emittedRe.ReplaceAllString(string(data), "")
	}
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

func TestKill9_ResultsEqualUninterruptedRun(t *testing.T) {
	bin := mustBuild(t)
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	dir := t.TempDir()
	confPath, cfg := mustConfig(t, dir, mosq.URL(), ns.URL())

	msgs := testenv.FleetMessages(market, couriers, 8*time.Minute, 42, time.Now())
	wantByKey, wantRejected := expected(t, cfg, msgs)
	t.Logf("fleet: %d messages; reference run: %d keyed results, %d rejected inputs", len(msgs), len(wantByKey), len(wantRejected))
	if len(wantByKey) == 0 || len(wantRejected) == 0 {
		t.Fatalf("the reference run emitted too little to prove anything")
	}

	sup := &supervisor{tb: t, bin: bin, conf: confPath, ckpt: make(chan struct{}, 1)}
	defer func() {
		if t.Failed() {
			sup.dumpLogs()
		}
	}()
	sup.start()
	waitReady(t, cfg.HTTP.Listen, 30*time.Second)

	// Publisher: the whole fleet over publishFor, QoS 1, acked by Mosquitto.
	pubDone := make(chan error, 1)
	pub := mosq.Publisher(t, "crash-pub") // on the test goroutine: it may fail the test
	go func() {
		pace := publishFor / time.Duration(len(msgs))
		next := time.Now()
		for _, m := range msgs {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := pub.Publish(ctx, m.Topic, m.Payload)
			cancel()
			if err != nil {
				pubDone <- err
				return
			}
			next = next.Add(pace)
			time.Sleep(time.Until(next))
		}
		pubDone <- nil
	}()

	// Killer: random kills until publishing ends; one right after a
	// checkpoint is written (before the log is truncated), one while NATS
	// is down.
	rng := rand.New(rand.NewSource(1))
	kills, ckptKills, natsKills := 0, 0, 0
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
		case kills == 5:
			ns.Shutdown()
			time.Sleep(time.Duration(500+rng.Intn(1000)) * time.Millisecond)
			sup.kill()
			ns.Restart()
			natsKills++
		default:
			sup.kill()
		}
		kills++
		sup.start()
	}
	t.Logf("%d kills (%d right after a checkpoint write, %d with NATS down), %d edgeproc runs", kills, ckptKills, natsKills, sup.runs)

	// Wait until edgeproc is idle: the stream holds at least every expected
	// key and has stopped growing (or, if something is lost, stopped
	// growing for longer: the comparison then says what).
	minMsgs := uint64(len(wantByKey) + len(wantRejected))
	deadline := time.Now().Add(90 * time.Second)
	var last uint64
	stable := 0
	for stable < 6 && !(stable >= 3 && last >= minMsgs) && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		n := streamCount(t, ns.URL(), cfg.NATS.Stream)
		if n == last {
			stable++
		} else {
			stable = 0
		}
		last = n
	}
	t.Logf("stream holds %d messages, want at least %d", last, minMsgs)
	sup.stop()

	gotByKey, gotRejected := map[string]string{}, map[string]bool{}
	for _, m := range testenv.ReadStream(t, ns.URL(), cfg.NATS.Stream) {
		var r rec
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("stream message %q: %v", m.Data, err)
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != r.Key {
			t.Errorf("message id %q, want the key %q", id, r.Key)
		}
		if _, dup := gotByKey[r.Key]; dup && r.Type != "rejected" {
			t.Errorf("key %s stored twice: the duplicate window did not drop a re-emission", r.Key)
		}
		addRecord(t, m.Data, gotByKey, gotRejected)
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
