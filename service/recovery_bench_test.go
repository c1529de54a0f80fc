package service_test

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/result"
	"github.com/km0/edgeproc/service"
	"github.com/km0/edgeproc/wal"
)

// The market of the recovery target: the courier limit tracked, of which
// a city's active fleet sends a fix every 5 s.
const (
	r200kIdle     = 175_000
	r200kActive   = 25_000
	r200kEvery    = 5_000  // ms between two fixes of an active courier
	r200kInterval = 10_000 // ms, state.checkpoint_interval's default
	r200kDeltas   = 6
	r200kTail     = 60_000 // ms of log after the last checkpoint
)

// BenchmarkRecovery200k is a restart of a market at the courier limit:
// 200 000 couriers tracked, 25 000 of them sending a fix every 5 s, whose
// state directory holds a whole checkpoint, 6 incremental ones 10 s apart,
// and 60 s of log after the last (300 000 entries). The real service
// starts on it (embedded NATS, Mosquitto) and the figures are the ones it
// reports: edgeproc_recovery_duration_seconds, from opening the state
// directory to the end of the replay, whose results go to JetStream as
// they are re-derived (at most bridge.DefaultMaxPending of them still
// unacked when it ends). The split comes from the times of its own log
// records: "wal opened" ends the checkpoint's load, merge and restore and
// the log's scan, "recovered" ends the replay.
//
// Run: go test -run '^$' -bench BenchmarkRecovery200k -benchtime 1x ./service
func BenchmarkRecovery200k(b *testing.B) {
	tmpl := filepath.Join(b.TempDir(), "state")
	// The configuration `edgeproc run` would load: the product's
	// defaults, so that the engine the state is built with has the
	// fingerprint the service checks the snapshot against.
	cfg := recoveryConfig(b, tmpl, defaults.MQTTURL, defaults.NATSURL)
	st := buildRecoveryState(b, cfg)
	runtime.GC()
	debug.FreeOSMemory() // the builder's engine is gone: the restored one starts on a clean heap
	b.Logf("state: whole checkpoint %.1f MB, %d incremental ones %.1f MB in all, log %d entries (%d after the last checkpoint); alone: wal.Open %v, load %v, merge %v, restore %v",
		float64(st.wholeBytes)/1e6, st.deltas, float64(st.deltaBytes)/1e6, st.walEntries, st.tail,
		st.walOpen.Round(time.Millisecond), st.load.Round(time.Millisecond), st.merge.Round(time.Millisecond), st.restore.Round(time.Millisecond))

	mosq := testenv.StartMosquitto(b)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "state")
		copyStateDir(b, tmpl, dir)
		ns := testenv.StartNATS(b) // an empty stream: every re-derived result is stored, none dropped as a duplicate
		cfg := recoveryConfig(b, dir, mosq.URL(), ns.URL())
		rl := newRecoveryLog()
		reg := prometheus.NewRegistry()
		runtime.GC()
		cpu0 := processCPU()
		b.StartTimer()

		start := time.Now()
		svc := startService(b, []config.Config{cfg}, service.Deps{Log: slog.New(rl.handler()), Registry: reg})
		select {
		case <-rl.done:
		case err := <-svc.done:
			svc.done <- err // for the cleanup
			b.Fatalf("the service stopped before it recovered: %v", err)
		case <-time.After(4 * time.Minute):
			b.Fatal("no recovery within 4 minutes")
		}
		b.StopTimer()
		cpu := processCPU() - cpu0
		load := loadAverage()

		// The collector sees the engine once serve has stored it, just
		// after the log line.
		testenv.WaitFor(b, 10*time.Second, "the recovered engine's metrics", func() bool {
			return gauge(b, reg, "edgeproc_couriers", cfg.Market) >= 0 && gauge(b, reg, "edgeproc_recovery_duration_seconds", cfg.Market) >= 0
		})
		total := gauge(b, reg, "edgeproc_recovery_duration_seconds", cfg.Market)
		replayed := gauge(b, reg, "edgeproc_recovery_replayed_entries", cfg.Market)
		couriers := gauge(b, reg, "edgeproc_couriers", cfg.Market)
		published := gauge(b, reg, "edgeproc_bridge_published_total", cfg.Market)
		acked := gauge(b, reg, "edgeproc_bridge_acked_total", cfg.Market)
		walOpened, recovered := rl.times()
		began := recovered.Add(-time.Duration(total * float64(time.Second)))
		if replayed != float64(st.tail) {
			b.Errorf("replayed %v entries, want the %d after the last checkpoint", replayed, st.tail)
		}
		if couriers != r200kIdle+r200kActive {
			b.Errorf("restored %v couriers, want %d", couriers, r200kIdle+r200kActive)
		}
		svc.stop(b, 2*time.Minute)

		b.ReportMetric(couriers, "couriers")
		b.ReportMetric(float64(st.wholeBytes)/1e6, "whole-MB")
		b.ReportMetric(float64(st.deltas), "deltas")
		b.ReportMetric(float64(st.deltaBytes)/1e6, "deltas-MB")
		b.ReportMetric(float64(st.walEntries), "wal-entries")
		b.ReportMetric(replayed, "replayed")
		b.ReportMetric(total, "recovery-s")
		b.ReportMetric(walOpened.Sub(began).Seconds(), "load+restore+walopen-s")
		b.ReportMetric(recovered.Sub(walOpened).Seconds(), "replay-s")
		b.ReportMetric(st.walOpen.Seconds(), "walopen-apart-s")
		b.ReportMetric(st.load.Seconds(), "load-apart-s")
		b.ReportMetric(st.merge.Seconds(), "merge-apart-s")
		b.ReportMetric(st.restore.Seconds(), "restore-apart-s")
		b.ReportMetric(recovered.Sub(start).Seconds(), "run-to-recovered-s")
		b.ReportMetric(cpu.Seconds(), "process-cpu-s")
		b.ReportMetric(published, "results-published")
		b.ReportMetric(acked, "results-acked")
		b.ReportMetric(load, "loadavg-1m")
	}
}

// recoveryConfig loads, as `edgeproc run` does, a market's file that sets
// only where it connects, its state directory and an ephemeral HTTP port.
func recoveryConfig(tb testing.TB, stateDir, mqttURL, natsURL string) config.Config {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "girona.yaml")
	y := fmt.Sprintf("market: girona\nmqtt: {url: %q}\nnats: {url: %q}\nstate: {dir: %q}\nhttp: {listen: \"127.0.0.1:0\"}\n",
		mqttURL, natsURL, stateDir)
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		tb.Fatal(err)
	}
	c, err := config.LoadLive(path)
	if err != nil {
		tb.Fatalf("config: %v", err)
	}
	return c
}

// recoveryState is what buildRecoveryState left in the state directory.
type recoveryState struct {
	wholeBytes, deltaBytes int64
	deltas                 int
	walEntries             uint64        // in the log, from the whole checkpoint on
	tail                   int           // log entries after the last checkpoint
	walOpen                time.Duration // wal.Open of that log, alone
	// The steps of engine.Recover over that directory, alone: reading
	// and checking the files, merging the deltas, decoding the state.
	load, merge, restore time.Duration
}

// buildRecoveryState leaves in cfg.State.Dir what the live service leaves
// when it is killed 60 s after its sixth incremental checkpoint. Every
// input is appended to the write-ahead log as the intake appends an MQTT
// message and applied to the engine with its log index, as the driver
// does, so that checkpoint tags and rejected records' keys are log
// indexes as in the live run. The whole checkpoint and the deltas are
// what the checkpointer would have written at those tags.
func buildRecoveryState(b *testing.B, cfg config.Config) recoveryState {
	b.Helper()
	dir := cfg.State.Dir
	ecfg := market.EngineConfig(cfg)
	ecfg.Topic = cfg.MQTT.Topic
	eng := engine.New(ecfg, func([]result.Record) {})
	defer eng.Stop()
	// No fsync while building: the files are the same, and the box's
	// other work is spared the 700 MB of flushes.
	log, _, err := wal.Open(filepath.Join(dir, "wal"), wal.Options{Sync: wal.SyncNone}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ckpts, err := checkpoint.Open(filepath.Join(dir, "checkpoints"), 0)
	if err != nil {
		b.Fatal(err)
	}

	var last uint64
	apply := func(e entry.Entry) {
		i, err := log.Append(e, nil)
		if err != nil {
			b.Fatal(err)
		}
		eng.Apply(i, e)
		last = i
	}
	prefix := strings.TrimSuffix(cfg.MQTT.Topic, "+")
	topics := make([]string, r200kIdle+r200kActive)
	for c := range topics {
		topics[c] = prefix + courierName(c)
	}
	// The state must be as recent as a crash just before this start: the
	// whole checkpoint three to four minutes ago. It is taken on a minute,
	// a window's end, so that every run's deltas hold the same changes:
	// where the windows fire within the deltas changes their size by half.
	at := (time.Now().UnixMilli() - 3*60_000) / 60_000 * 60_000
	origin := at - 30*60_000
	var payload []byte
	fix := func(c int, ts int64) {
		// About 24 km/h northwards: each fix 33 m from the previous, past
		// distance.min_move_m, so that windows hold what a moving fleet's do.
		lat := 41.90 + float64(c%500)*0.001 + float64(ts-origin)*6e-8
		lon := 2.80 + float64(c/500)*0.001
		payload = fmt.Appendf(payload[:0], `{"courier":"%s","lat":%.6f,"lon":%.6f,"timestamp_ms":%d,"accuracy_m":8}`,
			courierName(c), lat, lon, ts)
		apply(entry.Entry{Arrival: ts + 300, Topic: topics[c], Payload: payload})
	}
	run := func(from, to int64) { // every active courier's fixes in [from, to), in arrival order
		for ts := from; ts < to; ts += 100 {
			for c := int((ts / 100) % (r200kEvery / 100)); c < r200kActive; c += r200kEvery / 100 {
				fix(c, ts)
			}
		}
	}
	snapshot := func(take func(done func([][]byte))) [][]byte {
		got := make(chan [][]byte, 1)
		take(func(parts [][]byte) { got <- parts })
		return <-got
	}

	// The intake logs a listen before the first message of a connection.
	apply(entry.Entry{Kind: entry.Listen, Arrival: origin})
	// The idle couriers sent one fix each, half an hour before the
	// checkpoint, over one minute.
	for k := range r200kIdle {
		fix(r200kActive+k, origin+int64(k)*60_000/r200kIdle)
	}
	run(at-15*60_000, at) // the windows and sessions are full

	var st recoveryState
	whole, err := ckpts.Write(last, snapshot(func(done func([][]byte)) { eng.Checkpoint(last, done) })...)
	if err != nil {
		b.Fatal(err)
	}
	st.wholeBytes = whole.Size
	// Save truncates the log up to the oldest whole checkpoint kept; this
	// one stands for it. A market that has run longer keeps the previous
	// whole checkpoint too, and the log since that one, which wal.Open
	// scans as well: walopen-apart-s over wal-entries is that cost.
	if err := log.TruncateFront(whole.Tag + 1); err != nil {
		b.Fatal(err)
	}
	base := whole.Tag
	for i := range r200kDeltas {
		run(at+int64(i)*r200kInterval, at+int64(i+1)*r200kInterval)
		tag := last
		d, err := ckpts.WriteDelta(base, tag, snapshot(func(done func([][]byte)) { eng.CheckpointDelta(base, tag, done) })...)
		if err != nil {
			b.Fatal(err)
		}
		st.deltaBytes += d.Size
		st.deltas++
		base = tag
	}
	// checkpoint.Checkpointer's size rule: past it, it would have written
	// a whole checkpoint instead of the last delta.
	if st.deltaBytes >= checkpoint.DeltaRatio*st.wholeBytes {
		b.Fatalf("the deltas add up to %d bytes, the whole checkpoint is %d: the checkpointer would not have chained them", st.deltaBytes, st.wholeBytes)
	}
	run(at+r200kDeltas*r200kInterval, at+r200kDeltas*r200kInterval+r200kTail)
	st.tail = int(last - base)
	eng.Stop()
	if err := log.Close(); err != nil {
		b.Fatal(err)
	}

	start := time.Now()
	l, _, err := wal.Open(filepath.Join(dir, "wal"), wal.Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	st.walOpen = time.Since(start)
	st.walEntries = l.LastIndex() - l.FirstIndex() + 1
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	st.load, st.merge, st.restore = recoverSteps(b, ecfg, filepath.Join(dir, "checkpoints"))
	return st
}

// recoverSteps times, one by one, what engine.Recover does over the
// service's checkpoint directory: the service reports them as one.
func recoverSteps(b *testing.B, ecfg engine.Config, dir string) (load, merge, restore time.Duration) {
	b.Helper()
	start := time.Now()
	ckpts, err := checkpoint.Open(dir, 0)
	if err != nil {
		b.Fatal(err)
	}
	c, ok, skipped, err := ckpts.Load()
	if err != nil || !ok || len(skipped) > 0 {
		b.Fatalf("load checkpoints: ok %v, skipped %v, err %v", ok, skipped, err)
	}
	deltas := make([][]byte, len(c.Deltas))
	for i, d := range c.Deltas {
		deltas[i] = d.Snapshot
	}
	load = time.Since(start)
	start = time.Now()
	snap, err := engine.Merge(ecfg, c.Snapshot, deltas...)
	if err != nil {
		b.Fatal(err)
	}
	merge = time.Since(start)
	start = time.Now()
	eng, tag, err := engine.Restore(ecfg, func([]result.Record) {}, snap)
	if err != nil {
		b.Fatal(err)
	}
	restore = time.Since(start)
	eng.Stop()
	if tag != c.Last() {
		b.Fatalf("restored tag %d, want the last delta's %d", tag, c.Last())
	}
	return load, merge, restore
}

func courierName(c int) string { return fmt.Sprintf("c%06d", c) }

// copyStateDir gives each run a state directory of its own: a run leaves
// its final checkpoint and truncates the log.
func copyStateDir(tb testing.TB, src, dst string) {
	tb.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		tb.Fatalf("copy state dir: %v", err)
	}
}

// recoveryLog reads the service's log for the times of the records that
// bound the phases of a recovery, and prints warnings and errors (all of
// it with -v), so that a run that fails says why.
type recoveryLog struct {
	done chan struct{} // closed at "recovered"
	once sync.Once

	mu                   sync.Mutex
	walOpened, recovered time.Time
}

func newRecoveryLog() *recoveryLog { return &recoveryLog{done: make(chan struct{})} }

func (l *recoveryLog) handler() slog.Handler {
	return recoveryHandler{l: l, out: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})}
}

func (l *recoveryLog) times() (walOpened, recovered time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.walOpened, l.recovered
}

type recoveryHandler struct {
	l   *recoveryLog
	out slog.Handler
}

func (h recoveryHandler) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }

func (h recoveryHandler) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case "wal opened":
		h.l.mu.Lock()
		h.l.walOpened = r.Time
		h.l.mu.Unlock()
	case "recovered":
		h.l.mu.Lock()
		h.l.recovered = r.Time
		h.l.mu.Unlock()
		h.l.once.Do(func() { close(h.l.done) })
	}
	if r.Level >= slog.LevelWarn || testing.Verbose() {
		return h.out.Handle(ctx, r)
	}
	return nil
}

func (h recoveryHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recoveryHandler{l: h.l, out: h.out.WithAttrs(as)}
}

func (h recoveryHandler) WithGroup(name string) slog.Handler {
	return recoveryHandler{l: h.l, out: h.out.WithGroup(name)}
}

// processCPU is the CPU time of the whole test process: the service, and
// the embedded NATS server it publishes to.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is the machine's 1-minute load average, or -1: the figures
// are wall-clock times on a box that may be running other work.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		return -1
	}
	return f
}
