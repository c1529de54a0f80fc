package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/km0/edgeproc/internal/mosquitto"
)

// market is the market loadbench configures; its topic is
// km0/bench/positions/+ and its results go to delivery.dashboard.bench.*.
const market = "bench"

// startNATS starts an in-process NATS server with JetStream on a random
// loopback port, its store in dir.
func startNATS(dir string) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1,
		JetStream: true, StoreDir: dir,
		NoSigs: true, NoLog: true,
	})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("nats server not ready within 10s")
	}
	return ns, nil
}

// windowSettings are the event-time settings written to edgeproc's config,
// the WAL's group-commit interval (0: edgeproc's default), and whether it
// writes the lake (into the run's temp dir, rolling every 20 s).
type windowSettings struct {
	Size, Slide, Gap, ToleratedDelay time.Duration
	WALBatchInterval                 time.Duration
	Lake                             bool
}

// edgeprocConfig renders the market's YAML. Everything not set here keeps
// edgeproc's defaults (WAL group commit, jitter filter, H3 resolution 9).
// The profiler is on (loopback), so a run can be profiled:
// go tool pprof http://127.0.0.1:PORT/debug/pprof/profile?seconds=10.
func edgeprocConfig(mqttURL, natsURL, stateDir, listen string, w windowSettings) string {
	wal := ""
	if w.WALBatchInterval > 0 {
		wal = fmt.Sprintf("\n  wal_batch_interval: %s", w.WALBatchInterval)
	}
	lake := ""
	if w.Lake {
		// Rolls every 20 s rather than 10 min: a step then pays for its
		// Parquet files, not only for the staging.
		lake = fmt.Sprintf("lake:\n  dir: %s\n  roll_interval: 20s\n", filepath.Join(filepath.Dir(stateDir), "lake"))
	}
	return fmt.Sprintf(`market: %s
mqtt:
  url: %s
  client_id: loadbench-edgeproc
nats:
  url: %s
windows:
  size: %s
  slide: %s
  gap: %s
  tolerated_delay: %s
state:
  dir: %s%s
http:
  listen: %s
  pprof: true
%s`, market, mqttURL, natsURL, w.Size, w.Slide, w.Gap, w.ToleratedDelay, stateDir, wal, listen, lake)
}

// edgeprocProc is `edgeproc run` as a child process.
type edgeprocProc struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
	logFile *os.File
	base    string // http://127.0.0.1:PORT
	client  *http.Client
}

// buildEdgeproc builds ./cmd/edgeproc of the module in the current
// directory into dir.
func buildEdgeproc(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "edgeproc")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/km0/edgeproc/cmd/edgeproc")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build edgeproc (run loadbench from the module root, or pass --edgeproc): %w\n%s", err, b)
	}
	return out, nil
}

// startEdgeproc writes the config into dir and starts bin run with it
// (env added to its environment); it returns
// once /readyz answers 200 (MQTT and NATS connected, stream created).
func startEdgeproc(ctx context.Context, bin, dir, mqttURL, natsURL string, w windowSettings, env []string) (*edgeprocProc, error) {
	port, err := mosquitto.FreePort()
	if err != nil {
		return nil, err
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := filepath.Join(dir, "bench.yaml")
	cfg := edgeprocConfig(mqttURL, natsURL, filepath.Join(dir, "state"), listen, w)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", conf, err)
	}
	p := &edgeprocProc{
		exited:  make(chan struct{}),
		logPath: filepath.Join(dir, "edgeproc.log"),
		base:    "http://" + listen,
		client:  &http.Client{Timeout: 2 * time.Second},
	}
	p.logFile, err = os.Create(p.logPath)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", p.logPath, err)
	}
	p.cmd = exec.Command(bin, "run", "--config", conf)
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.logFile, p.logFile
	if err := p.cmd.Start(); err != nil {
		p.logFile.Close()
		return nil, fmt.Errorf("start %s run: %w", bin, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	if err := p.waitReady(ctx, 30*time.Second); err != nil {
		p.stop()
		return nil, fmt.Errorf("edgeproc run: %w\nlog tail (%s):\n%s", err, p.logPath, p.logTail(4<<10))
	}
	return p, nil
}

func (p *edgeprocProc) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := p.client.Get(p.base + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited before ready: %v", p.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %s", timeout)
		}
	}
}

// alive reports an error if the process has exited.
func (p *edgeprocProc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("edgeproc exited: %v\nlog tail (%s):\n%s", p.cmd.ProcessState, p.logPath, p.logTail(4<<10))
	default:
		return nil
	}
}

// stop sends SIGTERM (graceful drain) and kills after 30 s.
func (p *edgeprocProc) stop() error {
	defer p.logFile.Close()
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("edgeproc did not stop within 30s of SIGTERM; killed")
	}
}

func (p *edgeprocProc) logTail(n int64) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return string(b)
}

// sample is one scrape of the market's metrics.
type sample struct {
	At         time.Time
	Received   float64 // edgeproc_positions_received_total
	Accepted   float64 // edgeproc_positions_accepted_total
	LagSeconds float64 // edgeproc_watermark_lag_seconds; -1 when absent
	QueueDepth float64 // edgeproc_ingest_queue_depth
	QueueCap   float64 // edgeproc_ingest_queue_capacity
	Acked      float64 // edgeproc_bridge_acked_total
	Pending    float64 // edgeproc_bridge_pending
}

// scrape reads /metrics. Only the market's unlabelled-by-anything-else
// series are read, so a tiny text parser does: name{market="bench"} value.
func (p *edgeprocProc) scrape() (sample, error) {
	s := sample{At: time.Now(), LagSeconds: -1}
	resp, err := p.client.Get(p.base + "/metrics")
	if err != nil {
		return s, fmt.Errorf("scrape %s/metrics: %w", p.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("scrape %s/metrics: %s", p.base, resp.Status)
	}
	want := map[string]*float64{
		"edgeproc_positions_received_total": &s.Received,
		"edgeproc_positions_accepted_total": &s.Accepted,
		"edgeproc_watermark_lag_seconds":    &s.LagSeconds,
		"edgeproc_ingest_queue_depth":       &s.QueueDepth,
		"edgeproc_ingest_queue_capacity":    &s.QueueCap,
		"edgeproc_bridge_acked_total":       &s.Acked,
		"edgeproc_bridge_pending":           &s.Pending,
	}
	found := 0
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		name, labels, value, ok := parseSeries(sc.Text())
		if !ok || labels != `market="`+market+`"` {
			continue
		}
		if dst := want[name]; dst != nil {
			*dst = value
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("scrape %s/metrics: %w", p.base, err)
	}
	if found == 0 {
		return s, fmt.Errorf("scrape %s/metrics: no edgeproc series for market %s", p.base, market)
	}
	return s, nil
}

// parseSeries splits a Prometheus text-format sample line
// `name{labels} value [timestamp]`; comments and blank lines give ok false.
func parseSeries(line string) (name, labels string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", "", 0, false
	}
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", 0, false
		}
		name, labels, rest = line[:i], line[i+1:j], line[j+1:]
	} else {
		i := strings.IndexByte(line, ' ')
		if i < 0 {
			return "", "", 0, false
		}
		name, rest = line[:i], line[i:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", "", 0, false
	}
	return name, labels, v, true
}
