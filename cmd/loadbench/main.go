// Command loadbench is edgeproc's live-service benchmark: on
// loopback, in one run, it measures
//
//  1. the broker's own QoS 1 pub→sub rate for fleet payloads (a plain
//     subscriber, persistent session, automatic acks);
//  2. `edgeproc run` (a child process; Mosquitto in, an in-process NATS
//     server with JetStream out) fed by the simulated fleet (sim.Run) at
//     increasing offered rates, each step judged "sustained" when edgeproc
//     receives ≥ 97 % of the offered rate with no growing watermark lag or
//     ingest queue and no backlog left at the broker;
//  3. the latency from a window's close to its delivery: for every result
//     read back from the market's stream (a JetStream ordered consumer, so
//     only once stored), now − emitted_at_ms, where emitted_at_ms is the
//     arrival of the position whose watermark crossing fired the result.
//     That is crossing → JetStream stored → delivered to a consumer, an
//     upper bound of crossing → JetStream ack, with 1 ms resolution.
//     The same results are also timed by the stream's own stamp of their
//     store ("stored": crossing → stored, the ack's moment); --read-back
//     reads them only after each step, so that no reader shares the cores
//     during a burst. With --results=false nothing is read: for a stand-in
//     such as cmd/intakefloor, which publishes no results.
//
// Usage (from the module root; see scripts/livebench.sh):
//
//	go run ./cmd/loadbench [--mqtt URL] [--edgeproc BIN] [--baseline 10s] [--step 10s] [--rates auto|R,R,...]
//
// It exits 0 when the benchmark ran (whether or not the targets were met;
// --strict makes a missed target exit 3), 1 when it could not run, 2 on a
// bad flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/internal/mosquitto"
)

// Targets: the live service's latency goals.
const (
	targetRatio = 0.90                 // of the broker's own rate
	targetP99   = 5 * time.Millisecond // window close → JetStream ack
)

// options are the command-line flags.
type options struct {
	MQTT, Mosquitto, Edgeproc  string
	Baseline, Step, Drain      time.Duration
	Timeout                    time.Duration
	Rates                      string
	StartRate, ProbeRate       float64
	BaselineCouriers           int
	Windows                    windowSettings
	GOMAXPROCS                 int
	GOMEMLIMIT                 string
	Interval                   time.Duration
	MinRatio                   float64
	MaxCatchUp                 time.Duration
	Keep, Strict, Verbose      bool
	CoreTap, Results, ReadBack bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.MQTT, "mqtt", "", "use this MQTT broker `URL` instead of starting Mosquitto")
	fs.StringVar(&o.Mosquitto, "mosquitto", "/usr/sbin/mosquitto", "Mosquitto `binary` to start")
	fs.StringVar(&o.Edgeproc, "edgeproc", "", "edgeproc `binary`; empty = go build ./cmd/edgeproc into the temp dir")
	fs.DurationVar(&o.Baseline, "baseline", 10*time.Second, "broker baseline sending time")
	fs.IntVar(&o.BaselineCouriers, "baseline-couriers", 100_000, "fleet size of the baseline's payloads")
	fs.DurationVar(&o.Step, "step", 10*time.Second, "sending time of each load step")
	fs.DurationVar(&o.Drain, "drain", 20*time.Second, "bound on the catch-up wait after a step")
	fs.DurationVar(&o.Timeout, "timeout", 8*time.Minute, "bound on the whole run")
	fs.StringVar(&o.Rates, "rates", "auto", "offered rates, positions/s, comma-separated, tried in order until one is not sustained; auto = from --start-rate up to the broker's rate")
	fs.Float64Var(&o.StartRate, "start-rate", 2500, "first rate of the auto plan, positions/s")
	fs.Float64Var(&o.ProbeRate, "probe-rate", 250, "a first, light step of the auto plan (small bursts: the pipeline's latency with little queueing); 0 = none")
	fs.DurationVar(&o.Windows.Size, "window-size", time.Minute, "windows.size of edgeproc's config")
	fs.DurationVar(&o.Windows.Slide, "window-slide", 10*time.Second, "windows.slide")
	fs.DurationVar(&o.Windows.Gap, "gap", 3*time.Minute, "windows.gap")
	fs.DurationVar(&o.Windows.ToleratedDelay, "tolerated-delay", 2*time.Second, "windows.tolerated_delay (short, so that windows close within a step)")
	fs.DurationVar(&o.Windows.WALBatchInterval, "wal-batch-interval", 0, "state.wal_batch_interval of edgeproc's config; 0 = its default")
	fs.BoolVar(&o.Windows.Lake, "lake", false, "edgeproc writes the lake (lake.dir in the temp dir, roll_interval 20s so that a step pays for its Parquet files)")
	fs.IntVar(&o.GOMAXPROCS, "gomaxprocs", 0, "run edgeproc with GOMAXPROCS=`N` in its environment (deploy/systemd's unit sets 1); 0 = Go's default")
	fs.StringVar(&o.GOMEMLIMIT, "gomemlimit", "", "run edgeproc with GOMEMLIMIT=`LIMIT` in its environment (e.g. 500MiB: the garbage collector's soft limit); empty = none")
	fs.DurationVar(&o.Interval, "interval", 5*time.Second, "a courier's position interval; couriers = rate × interval keeps event time on the clock")
	fs.Float64Var(&o.MinRatio, "min-ratio", 0.97, "received/offered needed for a step to count as sustained")
	fs.DurationVar(&o.MaxCatchUp, "max-catchup", 2*time.Second, "a step is sustained only if edgeproc receives the broker's backlog within this after sending stops")
	fs.BoolVar(&o.Results, "results", true, "read edgeproc's results back from JetStream (the latency columns); false for a stand-in that publishes none, such as cmd/intakefloor")
	fs.BoolVar(&o.ReadBack, "read-back", false, "read each step's results from the stream only after the step (the 'stored' columns alone): no reader shares the cores during the step")
	fs.BoolVar(&o.CoreTap, "core-tap", true, "also read the results on a plain NATS subscription (the 'core' columns); the server then delivers each result twice")
	fs.BoolVar(&o.Keep, "keep", false, "keep the temp dir (configs, logs, state)")
	fs.BoolVar(&o.Strict, "strict", false, "exit 3 when a target is missed")
	fs.BoolVar(&o.Verbose, "v", false, "log the publisher's connection events")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rates, err := parseRates(o.Rates)
	if err != nil || fs.NArg() > 0 || o.Step <= 0 || o.Baseline <= 0 || o.Interval <= 0 || o.StartRate <= 0 || o.ProbeRate < 0 {
		if err == nil {
			err = errors.New("positional arguments or non-positive durations/rates")
		}
		fmt.Fprintf(stderr, "loadbench: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	met, err := bench(ctx, o, rates, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "loadbench: %v\n", err)
		return 1
	}
	if o.Strict && !met {
		fmt.Fprintln(stderr, "loadbench: a target was missed (--strict)")
		return 3
	}
	return 0
}

// parseRates reads --rates: "auto" (nil) or a comma-separated list.
func parseRates(s string) ([]float64, error) {
	if s == "" || s == "auto" {
		return nil, nil
	}
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("--rates %q: %q is not a positive number", s, f)
		}
		out = append(out, v)
	}
	return out, nil
}

func fleetConfig(interval time.Duration) fleet.Config { return fleet.Config{Interval: interval} }

// bench runs everything and prints the report; met reports whether both
// targets were met.
func bench(ctx context.Context, o options, rates []float64, stdout, stderr io.Writer) (met bool, err error) {
	level := slog.LevelWarn
	if o.Verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	loadBefore := loadavg()
	fmt.Fprintf(stdout, "# loadbench: %s\n", strings.Join(os.Args, " "))
	fmt.Fprintf(stdout, "# machine: %d cores, %s, %s; load average before: %s\n", runtime.NumCPU(), cpuModel(), runtime.Version(), loadBefore)

	dir, err := os.MkdirTemp("", "loadbench-")
	if err != nil {
		return false, fmt.Errorf("temp dir: %w", err)
	}
	defer func() {
		if o.Keep || err != nil {
			fmt.Fprintf(stderr, "loadbench: files kept in %s\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()

	brokerURL, brokerPID := o.MQTT, 0
	if brokerURL == "" {
		m, err := mosquitto.Start(o.Mosquitto, dir, 32<<10)
		if err != nil {
			return false, fmt.Errorf("%w (or pass --mqtt URL)", err)
		}
		defer m.Stop()
		brokerURL, brokerPID = m.URL(), m.PID()
		fmt.Fprintf(stdout, "# broker: %s (Mosquitto, max_queued_messages 0, persistence on)\n", brokerURL)
	} else {
		fmt.Fprintf(stdout, "# broker: %s (given)\n", brokerURL)
	}

	// Build first: a cold build takes minutes and must not sit between the
	// baseline and the steps.
	bin := o.Edgeproc
	if bin == "" {
		if bin, err = buildEdgeproc(ctx, dir); err != nil {
			return false, err
		}
	}

	base, err := runBaseline(ctx, brokerURL, o.BaselineCouriers, o.Baseline, o.Drain)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(stdout, "# broker baseline (QoS 1 pub→sub, plain subscriber, %s): published %.0f/s, delivered %.0f/s (%d of %d acked)\n",
		o.Baseline, base.PubRate, base.SubRate, base.Received, base.Acked)

	ns, err := startNATS(dir + "/nats")
	if err != nil {
		return false, err
	}
	defer ns.Shutdown()
	var env []string
	if o.GOMAXPROCS > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(o.GOMAXPROCS))
	}
	if o.GOMEMLIMIT != "" {
		env = append(env, "GOMEMLIMIT="+o.GOMEMLIMIT)
	}
	p, err := startEdgeproc(ctx, bin, dir, brokerURL, ns.ClientURL(), o.Windows, env)
	if err != nil {
		return false, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = p.stop()
		}
	}()
	tap := &resultTap{}
	tap.begin()
	if o.Results && !o.ReadBack {
		if tap, err = startTap(ctx, ns.ClientURL(), o.CoreTap); err != nil {
			return false, err
		}
	}
	defer tap.close()
	procs := "Go's default"
	if o.GOMAXPROCS > 0 {
		procs = strconv.Itoa(o.GOMAXPROCS)
	}
	memlimit := "none"
	if o.GOMEMLIMIT != "" {
		memlimit = o.GOMEMLIMIT
	}
	fmt.Fprintf(stdout, "# edgeproc run: nats %s (in-process, JetStream), metrics %s/metrics; windows %s/%s, tolerated_delay %s, gap %s; couriers = rate × %s; GOMAXPROCS %s, GOMEMLIMIT %s\n",
		ns.ClientURL(), p.base, o.Windows.Size, o.Windows.Slide, o.Windows.ToleratedDelay, o.Windows.Gap, o.Interval, procs, memlimit)

	ss := stepSettings{
		BrokerURL: brokerURL, Duration: o.Step, Interval: o.Interval, Drain: o.Drain,
		MinRatio: o.MinRatio, MaxCatchUp: o.MaxCatchUp, Log: log, BrokerPID: brokerPID,
	}
	if o.Results && o.ReadBack {
		ss.ReadBack = ns.ClientURL()
	}
	// Warm-up: proves the subscription is in place (a message published
	// before it would be lost) and gets the first windows going.
	// Its fleet is no larger than the probe's, whose bursts it would
	// otherwise inflate.
	warm, warmRate := ss, 250.0
	warm.Duration = 3 * time.Second
	if o.ProbeRate > 0 {
		warmRate = o.ProbeRate
	}
	if w, err := runStep(ctx, p, tap, warmRate, warm); err != nil {
		return false, fmt.Errorf("warm-up: %w", err)
	} else if !w.CaughtUp {
		return false, fmt.Errorf("warm-up: edgeproc received %.0f/s of %.0f/s and did not catch up within %s; log %s", w.RecvRate, warmRate, o.Drain, p.logPath)
	}

	if rates == nil {
		rates = planRates(o.StartRate, base.SubRate)
		if o.ProbeRate > 0 && o.ProbeRate < o.StartRate {
			rates = append([]float64{o.ProbeRate}, rates...)
		}
	}
	printHeader(stdout)
	// Rates are tried in order until one is not sustained: the best is
	// the last sustained one.
	var best *stepResult
	for _, rate := range rates {
		r, err := runStep(ctx, p, tap, rate, ss)
		if err != nil {
			return false, err
		}
		printStep(stdout, r)
		printCPU(stdout, r)
		printMemory(stdout, r)
		if !r.Sustained {
			break
		}
		best = &r
	}
	dropped := tap.dropped()
	tap.close()
	stopped = true
	if err := p.stop(); err != nil {
		fmt.Fprintf(stderr, "loadbench: %v\n", err)
	}
	loadAfter := loadavg()

	fmt.Fprintf(stdout, "# columns: sent/s = the publisher's rate; recv/s and recv%% = received by edgeproc (edgeproc_positions_received_total) when sending ended, relative to sent; lag = edgeproc_watermark_lag_seconds ⅓ into the step → end of sending; queue = ingest queue depth at the end; catchup = time after sending until edgeproc had received every sent message; cpu%% e/b/lb = edgeproc / broker / loadbench (publisher, in-process NATS server, result readers), %% of one core\n")
	fmt.Fprintf(stdout, "# load average after: %s (before: %s)\n", loadAfter, loadBefore)
	fmt.Fprintf(stdout, "# latency: now − emitted_at_ms (ms resolution) of each dashboard result read back from JetStream by an ordered consumer; 'first' = fastest result of each watermark crossing (the pipeline without its own burst's queueing); 'stored' = the same results timed by the stream's metadata stamp of their store (crossing → stored, the ack's moment, without the delivery to the reader); 'core' = the same results on a plain NATS subscription (routed, not yet stored; %d dropped by its pending limit)\n", dropped)
	if best == nil {
		fmt.Fprintf(stdout, "RESULT: no step sustained; broker baseline %.0f/s\n", base.SubRate)
		return false, nil
	}
	ratio := best.RecvRate / base.SubRate
	p99 := time.Duration(best.Latency.P99) * time.Millisecond
	fmt.Fprintf(stdout, "RESULT: sustained %.0f positions/s offered (%.0f/s received) = %.0f%% of the broker's own %.0f/s [target ≥ %.0f%%: %s]\n",
		best.Target, best.RecvRate, 100*ratio, base.SubRate, 100*targetRatio, yesNo(ratio >= targetRatio))
	fmt.Fprintf(stdout, "RESULT: at that rate, window close → delivered from JetStream: p50 %s, p99 %s, max %s over %d results; first result per crossing p50 %s p99 %s [target p99 < %s: %s]\n",
		ms(best.Latency.P50), ms(best.Latency.P99), ms(best.Latency.Max), best.Latency.N,
		ms(best.Latency.FirstP50), ms(best.Latency.FirstP99), targetP99, yesNo(best.Latency.N > 0 && p99 < targetP99))
	fmt.Fprintf(stdout, "RESULT: window close → stored in JetStream (the stream's stamp): p50 %s, p99 %s, max %s over %d results; first result per crossing p50 %s p99 %s\n",
		ms(best.Stored.P50), ms(best.Stored.P99), ms(best.Stored.Max), best.Stored.N, ms(best.Stored.FirstP50), ms(best.Stored.FirstP99))
	return ratio >= targetRatio && best.Latency.N > 0 && p99 < targetP99, nil
}

func printHeader(w io.Writer) {
	fmt.Fprintf(w, "%9s %8s %8s %8s %6s %11s %9s %7s %7s %6s %6s %6s %5s %11s %6s %17s %11s %11s  %s\n",
		"offered/s", "couriers", "sent/s", "recv/s", "recv%", "lag⅓→end s", "queue", "catchup",
		"results", "p50", "p99", "max", "cross", "first50/99", "burst", "stored50/99/first", "core50/99", "cpu% e/b/lb", "verdict")
}

func printStep(w io.Writer, r stepResult) {
	verdict := "sustained"
	if !r.Sustained {
		verdict = "NOT sustained: " + r.Why
	}
	l, st := r.Latency, r.Stored
	fmt.Fprintf(w, "%9.0f %8d %8.0f %8.0f %5.1f%% %5.1f→%-5.1f %4.0f/%-4.0f %7s %7d %6s %6s %6s %5d %5s/%-5s %6d %5s/%5s/%-5s %5s/%-5s %11s  %s\n",
		r.Target, r.Couriers, r.SentRate, r.RecvRate, 100*r.RecvRate/max(r.SentRate, 1), r.LagFrom, r.LagTo,
		r.QueueEnd, r.QueueCap, r.CatchUp.Round(100*time.Millisecond), l.N, ms(l.P50), ms(l.P99), ms(l.Max),
		l.Crossings, ms(l.FirstP50), ms(l.FirstP99), l.BurstMax, ms(st.P50), ms(st.P99), ms(st.FirstP50),
		ms(r.Core.P50), ms(r.Core.P99), cpuCol(r.CPU), verdict)
}

// printCPU prints the step's CPU cost per position of edgeproc and of the
// broker, measured over the same interval, and their ratio.
func printCPU(w io.Writer, r stepResult) {
	if len(r.CPUTime) < 2 || r.Sent == 0 || r.CPUTime[1] == 0 {
		return
	}
	e, b := r.CPUTime[0].Seconds(), r.CPUTime[1].Seconds()
	n := float64(r.Sent)
	fmt.Fprintf(w, "CPU: %8.0f/s %6d couriers  edgeproc %6.2fs %6.1f µs/position  mosquitto %6.2fs %6.1f µs/position  ratio %.2f  (%d positions; load %s)\n",
		r.Target, r.Couriers, e, 1e6*e/n, b, 1e6*b/n, e/b, r.Sent, loadavg())
}

// printMemory prints edgeproc's peak resident set so far, and per courier
// of the step's fleet (meaningful for a run of one step).
func printMemory(w io.Writer, r stepResult) {
	if r.PeakRSS == 0 {
		return
	}
	fmt.Fprintf(w, "MEMORY: edgeproc peak RSS %d MB since its start, %.2f KB per courier of the step's %d\n",
		r.PeakRSS>>20, float64(r.PeakRSS)/1024/float64(r.Couriers), r.Couriers)
}

// cpuCol formats CPU shares as "e/b/lb", "-" for one not measured.
func cpuCol(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		if x < 0 {
			parts[i] = "-"
		} else {
			parts[i] = strconv.Itoa(int(x + 0.5))
		}
	}
	return strings.Join(parts, "/")
}

// ms formats a latency in ms; -1 (no data) is "-".
func ms(v int64) string {
	if v < 0 {
		return "-"
	}
	if v >= histMaxMs {
		return fmt.Sprintf(">%ds", histMaxMs/1000)
	}
	return strconv.FormatInt(v, 10) + "ms"
}

func yesNo(b bool) string {
	if b {
		return "met"
	}
	return "MISSED"
}

// loadavg is the first three fields of /proc/loadavg, or "?".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "?".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
