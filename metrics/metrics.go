// Package metrics exposes edgeproc's per-market counters to Prometheus.
//
// A Collector reads each market's Snapshot when it is scraped, instead of
// updating Prometheus counters on the per-position path: the engine, the
// bridge and the MQTT source already keep atomic counters, and a scrape
// every few seconds costs far less than an extra atomic add per position.
// Register the Collector on a registry you own (prometheus.NewRegistry);
// this package never touches the global default registry.
//
// Every series but edgeproc_build_info carries a "market" label. Names
// follow Prometheus' conventions: they start with "edgeproc_", counters
// end in "_total", durations are in seconds (_seconds), points in time in
// seconds since the Unix epoch (_timestamp_seconds), sizes in bytes
// (_bytes). deploy/grafana and deploy/prometheus use them; a test checks
// that every name they use exists.
package metrics

import (
	"runtime"
	"runtime/debug"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/tmath"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/mqtt"
)

// Snapshot is one market's state at scrape time. A part whose Has flag is
// false (not started yet, for example a bridge still waiting for NATS) is
// left out of the scrape, except that its connection gauge reads 0.
type Snapshot struct {
	Engine    engine.Stats
	HasEngine bool
	Bridge    bridge.Stats
	HasBridge bool
	MQTT      mqtt.Stats
	HasMQTT   bool
	// QueueDepth is the number of received messages waiting for the
	// engine, out of QueueCapacity.
	QueueDepth, QueueCapacity int
	// StreamReady reports whether results are being delivered: the stream
	// exists and the latest publish was acked (bridge.StreamReady).
	StreamReady bool
	// Ready reports whether the market can do its job (its /readyz line);
	// Failed whether it has died (/healthz fails while any market has).
	Ready, Failed bool
	// Durability is the write-ahead log and checkpoint state.
	Durability    Durability
	HasDurability bool
	// ResultLatency is the time from a window's close (its result handed
	// to the bridge) to JetStream's ack of it; see bridge.Config.OnAcked.
	// Left out of the scrape while HasResultLatency is false.
	ResultLatency    HistogramSnapshot
	HasResultLatency bool
	// Lake is the market's lake feeds' figures, all its series as one;
	// LakeBehind whether one is behind (see /readyz). Left out of the
	// scrape while HasLake is false (no lake.dir).
	Lake       lake.FeedStats
	LakeBehind bool
	HasLake    bool
}

// Version is the version edgeproc_build_info reports; the command sets it
// to its own (-ldflags "-X main.version=...") before serving metrics.
var Version = "dev"

// Durability is a market's write-ahead log and checkpoint state.
type Durability struct {
	// LastCheckpoint is when the newest checkpoint was written (zero: none
	// yet); the scrape reports its age in seconds.
	LastCheckpoint time.Time
	// CheckpointDuration is how long the last checkpoint took, from the
	// barrier to the file being durable, JetStream flush included.
	CheckpointDuration time.Duration
	// CheckpointBytes is the last checkpoint file's size.
	CheckpointBytes int64
	// Checkpoints, CheckpointFailures and CheckpointsSkipped count
	// checkpoints written, failed (flush or write error) and not started
	// because the previous one was still in progress.
	Checkpoints, CheckpointFailures, CheckpointsSkipped uint64
	// CheckpointsIncremental counts those of Checkpoints that wrote only
	// what changed since the previous one.
	CheckpointsIncremental uint64
	// WALBytes is the size of the write-ahead log's segment files.
	WALBytes int64
	// WALRepairs counts torn or corrupt tails cut at start.
	WALRepairs uint64
	// WALStalled reports a write-ahead log waiting for disk space (nothing
	// is acknowledged meanwhile); WALStalls counts such stalls.
	WALStalled bool
	WALStalls  uint64
	// Fsync is the write-ahead log's fsync latency histogram.
	Fsync HistogramSnapshot
	// Replayed is the number of log entries replayed at start, and
	// RecoveryDuration how long loading the checkpoint and replaying took.
	Replayed         int64
	RecoveryDuration time.Duration
}

// SetCheckpoints fills the checkpoint figures from a checkpointer's, the
// same for both sources.
func (d *Durability) SetCheckpoints(s checkpoint.Stats) {
	d.LastCheckpoint, d.CheckpointDuration, d.CheckpointBytes = s.Last, s.Duration, s.Bytes
	d.Checkpoints, d.CheckpointFailures, d.CheckpointsSkipped = s.Written, s.Failed, s.Skipped
	d.CheckpointsIncremental = s.Deltas
}

// Market is one market as the Collector sees it.
type Market struct {
	// Name is the market's name, the value of the "market" label.
	Name string
	// Snapshot returns the market's current state. It is called once per
	// scrape, possibly concurrently with the market's own goroutines, so it
	// must be safe for that.
	Snapshot func() Snapshot
}

// Collector is a prometheus.Collector over a fixed set of markets.
type Collector struct {
	markets []Market
	now     func() time.Time
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector of markets. now is the wall clock the
// watermark lag is measured against; nil means time.Now.
func NewCollector(now func() time.Time, markets ...Market) *Collector {
	if now == nil {
		now = time.Now
	}
	return &Collector{markets: append([]Market(nil), markets...), now: now}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("edgeproc_"+name, help, append([]string{"market"}, labels...), nil)
}

var (
	dReceived    = desc("positions_received_total", "Messages handed to the engine, valid or not, redeliveries included.")
	dAccepted    = desc("positions_accepted_total", "Valid positions (duplicates and late ones included).")
	dRejected    = desc("positions_rejected_total", "Rejected inputs, by contract reason.", "reason")
	dIgnored     = desc("inputs_ignored_total", "OwnTracks messages that are not positions (mqtt.format owntracks), by _type: not dead-lettered; \"other\" for a type the OwnTracks documentation does not list.", "type")
	dSecondsLate = desc("positions_late_seconds_timestamp_total", "Late positions whose timestamp_ms reads as seconds (before 2001-01-01): a phone sending seconds, not milliseconds.")
	dDuplicates  = desc("positions_duplicate_total", "Exact duplicate positions ignored (QoS 1 redelivery).")
	dLate        = desc("positions_late_total", "Positions late for an operator (distance or session).", "operator")
	dMissed      = desc("window_memberships_missed_total", "Distance windows a position that was not late could not join because they were closed for good (ended, and past windows.allowed_lateness).")
	dRevisions   = desc("distance_revisions_total", "Distance windows re-emitted as a revision because a late position changed them (windows.allowed_lateness).")
	dRecovered   = desc("positions_late_recovered_total", "Positions that joined a distance window after it had fired (within windows.allowed_lateness): late data used, not only counted.")
	dResults     = desc("results_total", "Records emitted, by type (rejected included).", "type")
	dCouriers    = desc("couriers", "Couriers tracked (at most limits.max_couriers).")
	dEvicted     = desc("couriers_evicted_total", "Idle couriers forgotten to make room for a new one at limits.max_couriers.")
	dZoneRefused = desc("dead_zone_warnings_refused_total", "no_signal warnings not counted in a dead zone: their window had dead_zones.max_cells cells.")
	dWatermark   = desc("watermark_timestamp_seconds", "Event-time watermark, seconds since the Unix epoch; absent before the first position.")
	dLag         = desc("watermark_lag_seconds", "Wall clock minus watermark, seconds; absent before the first position.")
	dQueue       = desc("ingest_queue_depth", "Received messages waiting for the engine.")
	dQueueCap    = desc("ingest_queue_capacity", "Capacity of the ingest queue; at capacity, MQTT intake blocks.")
	dInFlight    = desc("engine_chunks_in_flight", "Chunks of inputs between the engine's sequencer and its sink (the shard queues); at engine_chunks_in_flight_max, the driver blocks.")
	dInFlightMx  = desc("engine_chunks_in_flight_max", "Capacity of the engine's shard queues, in chunks.")

	dPublished  = desc("bridge_published_total", "Results accepted for publishing to JetStream.")
	dAcked      = desc("bridge_acked_total", "Results acknowledged by JetStream, duplicates included.")
	dBDup       = desc("bridge_duplicates_total", "Acks reporting the result's key as already stored.")
	dBErrors    = desc("bridge_errors_total", "Failed or timed-out publish attempts (each is retried).")
	dBRetries   = desc("bridge_retries_total", "Publish attempts after a result's first.")
	dPending    = desc("bridge_pending", "Results awaiting their JetStream ack.")
	dKVWrites   = desc("kv_writes_total", "Courier states written to the key-value bucket.")
	dKVErrors   = desc("kv_errors_total", "Failed courier-state writes (retried).")
	dKVRefused  = desc("kv_refused_total", "Courier-state updates dropped: no courier id.")
	dKVEvicted  = desc("kv_evicted_total", "Couriers evicted from the bucket writer's table at limits.max_couriers (their newest state written first).")
	dRecreated  = desc("recreated_total", "Times the stream or the courier bucket was found missing on the server and recreated.", "what")
	dNATSUp     = desc("nats_connected", "1 when the NATS connection is up.")
	dStreamUp   = desc("stream_ready", "1 when the market's JetStream stream exists.")
	dMQTTUp     = desc("mqtt_connected", "1 when the MQTT connection is up.")
	dReady      = desc("market_ready", "1 when the market can do its job (see /readyz for why not).")
	dFailed     = desc("market_failed", "1 when the market has died (see /healthz and the log for why).")
	dMQTTRecv   = desc("mqtt_received_total", "PUBLISH packets received, redeliveries included.")
	dMQTTRedel  = desc("mqtt_redelivered_total", "Received messages flagged as redelivered by the broker.")
	dMQTTOut    = desc("mqtt_outstanding", "Messages received and not yet acknowledged.")
	dMQTTReconn = desc("mqtt_reconnects_total", "MQTT reconnections after the first connection.")
	dMQTTResent = desc("mqtt_resent_total", "Redelivered messages that were already in the write-ahead log (acked after their connection dropped): acked again, not logged twice.")
	dMQTTLost   = desc("mqtt_sessions_lost_total", "Reconnections on which the broker had lost our session.")

	dCkptAge     = desc("checkpoint_age_seconds", "Time since the newest checkpoint was written; absent before the first.")
	dCkptDur     = desc("checkpoint_duration_seconds", "Duration of the last checkpoint, barrier to durable file, JetStream flush included.")
	dCkptBytes   = desc("checkpoint_size_bytes", "Size of the last checkpoint file.")
	dCkpts       = desc("checkpoints_total", "Checkpoints written.")
	dCkptFail    = desc("checkpoint_failures_total", "Checkpoints abandoned on a JetStream flush or write error.")
	dCkptSkip    = desc("checkpoints_skipped_total", "Checkpoints not started because the previous one was still in progress.")
	dCkptIncr    = desc("checkpoints_incremental_total", "Checkpoints that wrote only what changed since the previous one (of checkpoints_total).")
	dWALBytes    = desc("wal_size_bytes", "Size of the write-ahead log's segment files.")
	dWALRepairs  = desc("wal_repairs_total", "Torn or corrupt write-ahead-log tails cut at start.")
	dWALStalled  = desc("wal_stalled", "1 while the write-ahead log waits for disk space: nothing is acknowledged.")
	dWALStalls   = desc("wal_stalls_total", "Times the write-ahead log stalled on a full disk.")
	dWALFsync    = desc("wal_fsync_seconds", "Write-ahead-log fsync latency.")
	dReplayed    = desc("recovery_replayed_entries", "Write-ahead-log entries replayed through the engine at start.")
	dRecoveryDur = desc("recovery_duration_seconds", "Time taken at start to load the checkpoint and replay the write-ahead log.")
	dLatency     = desc("result_ack_latency_seconds", "Window close (result handed to the bridge) to its JetStream ack, retries included.")

	dLakeRows     = desc("lake_rows_written_total", "Accepted positions written to the lake's Parquet files (lake.dir).")
	dLakeFiles    = desc("lake_files_written_total", "Parquet files the lake wrote (rolls; compaction's merged files not included).")
	dLakeBytes    = desc("lake_written_bytes_total", "Bytes of the Parquet files the lake wrote.")
	dLakeBuffered = desc("lake_rows_buffered", "Accepted positions held in memory until their Parquet file is written (at most lake.roll_interval).")
	dLakeStaged   = desc("lake_staged_bytes", "Bytes of the lake's staging segments: rows a checkpoint covers that are not in a Parquet file yet. Grows while the lake is behind.")
	dLakeErrors   = desc("lake_errors_total", "Failed lake writes, by what: a Parquet file (retried at the next roll) or a staging segment (retried each second; the checkpoint, and so the intake, waits).", "what")
	dLakeRefused  = desc("lake_rows_deferred_total", "Rows the lake writer could not take at once (a full batch waits for the previous one): kept staged on disk and taken later.")
	dLakeCompact  = desc("lake_compactions_total", "Files merged into one by the lake's compaction of closed dates.")
	dLakeBehind   = desc("lake_behind", "1 while the lake is not keeping up (a write failing, or a full batch waiting): see /readyz.")

	dBuildInfo = prometheus.NewDesc("edgeproc_build_info", "Always 1; the labels say which build runs.", []string{"version", "goversion", "revision"}, nil)
)

// revision is the VCS revision the binary was built from, when the Go
// toolchain recorded it.
var revision = func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}()

var allDescs = []*prometheus.Desc{
	dReceived, dAccepted, dRejected, dIgnored, dSecondsLate, dDuplicates, dLate, dMissed, dRevisions, dRecovered, dResults, dCouriers, dEvicted, dWatermark, dLag, dQueue, dQueueCap, dInFlight, dInFlightMx,
	dPublished, dAcked, dBDup, dBErrors, dBRetries, dPending, dKVWrites, dKVErrors, dKVRefused, dKVEvicted, dRecreated, dNATSUp, dStreamUp,
	dMQTTUp, dMQTTRecv, dMQTTRedel, dMQTTResent, dMQTTOut, dMQTTReconn, dMQTTLost, dReady, dFailed,
	dCkptAge, dCkptDur, dCkptBytes, dCkpts, dCkptFail, dCkptSkip, dCkptIncr, dWALBytes, dWALRepairs, dWALStalled, dWALStalls, dWALFsync, dReplayed, dRecoveryDur,
	dLatency, dBuildInfo,
	dLakeRows, dLakeFiles, dLakeBytes, dLakeBuffered, dLakeStaged, dLakeErrors, dLakeRefused, dLakeCompact, dLakeBehind,
}

// Describe sends every metric description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect reads every market's snapshot and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	ch <- prometheus.MustNewConstMetric(dBuildInfo, prometheus.GaugeValue, 1, Version, runtime.Version(), revision)
	for _, m := range c.markets {
		c.collect(ch, m.Name, m.Snapshot(), now)
	}
}

func (c *Collector) collect(ch chan<- prometheus.Metric, name string, s Snapshot, now time.Time) {
	e := emitter{ch: ch, name: name}
	if s.HasEngine {
		e.engine(s.Engine, now)
	}
	e.gauge(dQueue, float64(s.QueueDepth))
	e.gauge(dQueueCap, float64(s.QueueCapacity))
	if s.HasBridge {
		e.bridge(s.Bridge)
	}
	e.gauge(dReady, bool01(s.Ready))
	e.gauge(dFailed, bool01(s.Failed))
	e.gauge(dNATSUp, bool01(s.HasBridge && s.Bridge.Connected))
	e.gauge(dStreamUp, bool01(s.StreamReady))
	e.gauge(dMQTTUp, bool01(s.HasMQTT && s.MQTT.Connected))
	if s.HasMQTT {
		e.mqtt(s.MQTT)
	}
	if s.HasDurability {
		e.durability(s.Durability, now)
	}
	if s.HasLake {
		e.lake(s.Lake, s.LakeBehind)
	}
	if s.HasResultLatency {
		h := s.ResultLatency
		ch <- prometheus.MustNewConstHistogram(dLatency, h.Count, h.Sum, h.Buckets, name)
	}
}

// emitter sends one market's series, the market's name as their first
// label.
type emitter struct {
	ch   chan<- prometheus.Metric
	name string
}

func (e emitter) counter(d *prometheus.Desc, v float64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{e.name}, labels...)...)
}

func (e emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{e.name}, labels...)...)
}

func (e emitter) engine(st engine.Stats, now time.Time) {
	e.counter(dReceived, float64(st.Received))
	e.counter(dAccepted, float64(st.Accepted))
	for _, k := range sortedKeys(st.Rejected) {
		e.counter(dRejected, float64(st.Rejected[k]), k)
	}
	for _, k := range sortedKeys(st.Ignored) {
		e.counter(dIgnored, float64(st.Ignored[k]), k)
	}
	e.counter(dSecondsLate, float64(st.SecondsLate))
	e.counter(dDuplicates, float64(st.Duplicates))
	e.counter(dLate, float64(st.LateDistance), "distance")
	e.counter(dLate, float64(st.LateSession), "session")
	e.counter(dMissed, float64(st.MissedMemberships))
	e.counter(dRevisions, float64(st.Revisions))
	e.counter(dRecovered, float64(st.Recovered))
	for _, k := range sortedKeys(st.Results) {
		e.counter(dResults, float64(st.Results[k]), k)
	}
	e.gauge(dCouriers, float64(st.Couriers))
	e.counter(dEvicted, float64(st.Evicted))
	e.counter(dZoneRefused, float64(st.DeadZoneRefused))
	e.gauge(dInFlight, float64(st.InFlight))
	e.gauge(dInFlightMx, float64(st.InFlightMax))
	if st.Watermark != tmath.Never && st.Watermark != tmath.Forever {
		e.gauge(dWatermark, float64(st.Watermark)/1000)
		e.gauge(dLag, float64(now.UnixMilli()-st.Watermark)/1000)
	}
}

func (e emitter) bridge(b bridge.Stats) {
	e.counter(dPublished, float64(b.Published))
	e.counter(dAcked, float64(b.Acked))
	e.counter(dBDup, float64(b.Duplicates))
	e.counter(dBErrors, float64(b.Errors))
	e.counter(dBRetries, float64(b.Retries))
	e.gauge(dPending, float64(b.Pending))
	e.counter(dKVWrites, float64(b.KVWrites))
	e.counter(dKVErrors, float64(b.KVErrors))
	e.counter(dKVRefused, float64(b.KVRefused))
	e.counter(dKVEvicted, float64(b.KVEvicted))
	e.counter(dRecreated, float64(b.StreamRecreated), "stream")
	e.counter(dRecreated, float64(b.KVRecreated), "bucket")
}

func (e emitter) mqtt(q mqtt.Stats) {
	e.counter(dMQTTRecv, float64(q.Received))
	e.counter(dMQTTRedel, float64(q.Redelivered))
	e.counter(dMQTTResent, float64(q.Resent))
	e.gauge(dMQTTOut, float64(q.Outstanding))
	e.counter(dMQTTReconn, float64(q.Reconnects))
	e.counter(dMQTTLost, float64(q.SessionsLost))
}

func (e emitter) durability(d Durability, now time.Time) {
	if !d.LastCheckpoint.IsZero() {
		e.gauge(dCkptAge, max(0, now.Sub(d.LastCheckpoint).Seconds()))
	}
	e.gauge(dCkptDur, d.CheckpointDuration.Seconds())
	e.gauge(dCkptBytes, float64(d.CheckpointBytes))
	e.counter(dCkpts, float64(d.Checkpoints))
	e.counter(dCkptFail, float64(d.CheckpointFailures))
	e.counter(dCkptSkip, float64(d.CheckpointsSkipped))
	e.counter(dCkptIncr, float64(d.CheckpointsIncremental))
	e.gauge(dWALBytes, float64(d.WALBytes))
	e.counter(dWALRepairs, float64(d.WALRepairs))
	e.gauge(dWALStalled, bool01(d.WALStalled))
	e.counter(dWALStalls, float64(d.WALStalls))
	h := d.Fsync
	e.ch <- prometheus.MustNewConstHistogram(dWALFsync, h.Count, h.Sum, h.Buckets, e.name)
	e.gauge(dReplayed, float64(d.Replayed))
	e.gauge(dRecoveryDur, d.RecoveryDuration.Seconds())
}

func (e emitter) lake(l lake.FeedStats, behind bool) {
	e.counter(dLakeRows, float64(l.RowsWritten))
	e.counter(dLakeFiles, float64(l.FilesWritten))
	e.counter(dLakeBytes, float64(l.BytesWritten))
	e.gauge(dLakeBuffered, float64(l.RowsBuffered))
	e.gauge(dLakeStaged, float64(l.StagedBytes))
	e.counter(dLakeErrors, float64(l.WriteErrors), "file")
	e.counter(dLakeErrors, float64(l.StageErrors), "staging")
	e.counter(dLakeRefused, float64(l.RowsRefused))
	e.counter(dLakeCompact, float64(l.Compactions))
	e.gauge(dLakeBehind, bool01(behind))
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sortedKeys gives a stable series order, which keeps scrapes diffable.
func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
