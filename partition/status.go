package partition

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/tmath"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/result"
)

// Status is one partition as this instance sees it.
type Status struct {
	Partition int  `json:"partition"`
	Owned     bool `json:"owned"` // this instance holds the pin
	// Epoch of the current term (the claim count of the partition), while
	// owned.
	Epoch uint64 `json:"epoch,omitempty"`
	// Processed is the stream sequence of the last message applied;
	// Checkpoint the one the last recorded checkpoint reflects.
	Processed uint64 `json:"processed_seq"`
	// Applied counts the log entries (positions, a batch's each, and
	// ticks) this instance applied, in every term.
	Applied    uint64 `json:"applied"`
	Checkpoint uint64 `json:"checkpoint_seq"`
	// LagMessages is the consumer's count of messages not yet delivered;
	// LagMs the age of the last applied message while any are (0 when
	// caught up).
	LagMessages uint64 `json:"lag_messages"`
	LagMs       int64  `json:"lag_ms"`
	// Takeovers counts the terms this instance started, Fenced those that
	// ended, Dropped the results not published because the term had lost
	// the partition, CaughtUp the messages read from the stream directly.
	Takeovers uint64 `json:"takeovers"`
	Fenced    uint64 `json:"fenced"`
	Dropped   uint64 `json:"dropped_results"`
	CaughtUp  uint64 `json:"caught_up_messages"`
	// BadBatches counts the relay's batches that did not decode (the
	// positions before the damage applied): never, short of a bug or a
	// foreign publisher.
	BadBatches uint64 `json:"bad_batches"`
	// AcquiredAt and FirstResultAt are the start of the current term and
	// its first published result (zero when none); LastResultAt is when
	// this instance last handed results to the bridge, in any term (zero
	// when never): a fenced owner never does so again.
	AcquiredAt    time.Time `json:"acquired_at"`
	FirstResultAt time.Time `json:"first_result_at"`
	LastResultAt  time.Time `json:"last_result_at"`
}

// Status returns every partition's status; safe from any goroutine.
func (r *Runner) Status() []Status {
	out := make([]Status, len(r.parts))
	now := time.Now().UnixMilli()
	for i, p := range r.parts {
		s := Status{
			Partition: p.n, Owned: p.owned.Load() == 1,
			Processed: p.processed.Load(), Applied: p.applied.Load(), Checkpoint: p.ckptSeq.Load(),
			LagMessages: p.lagMsgs.Load(),
			Takeovers:   p.takeovers.Load(), Fenced: p.fenced.Load(), Dropped: p.dropped.Load(), CaughtUp: p.caughtUp.Load(),
			BadBatches:   p.badBatches.Load(),
			LastResultAt: unixNano(p.lastResultAt.Load()),
		}
		if s.Owned {
			s.Epoch = p.epoch.Load()
			s.AcquiredAt = unixNano(p.acquiredAt.Load())
			s.FirstResultAt = unixNano(p.firstResultAt.Load())
		}
		if s.LagMessages > 0 {
			s.LagMs = max(0, now-p.lastTS.Load())
		}
		out[i] = s
	}
	return out
}

func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Results returns the counters of the results bridge (zero before
// Run).
func (r *Runner) Results() bridge.Stats {
	select {
	case <-r.ready:
		return r.br.Stats()
	default:
		return bridge.Stats{}
	}
}

// NotReady says why the instance cannot do its part of the market's job,
// or "" when it can (the market shell adds its results stream): set up,
// connected, the relay hearing its broker, and no partition it was handed
// refused (a snapshot its configuration cannot restore, such as changed
// windows: that partition is processed by nobody until an instance can).
func (r *Runner) NotReady() string {
	select {
	case <-r.ready:
	default:
		return "nats: setting up the streams"
	}
	if !r.nc.IsConnected() {
		return "nats: not connected"
	}
	if r.lease != nil {
		if why := r.lease.ready(); why != "" {
			return why
		}
	}
	var refused []string
	if why := r.mismatch.Load(); why != nil && *why != "" {
		refused = append(refused, *why)
	}
	for _, p := range r.parts {
		if why := p.refused.Load(); why != nil {
			refused = append(refused, *why)
		}
	}
	return strings.Join(refused, "; ")
}

// Stats adds to s the market's state for the metrics every source
// reports, summed over this instance's partitions: the counters of every term it
// ran (ended terms' included, so a counter never goes back when a
// partition changes hands; a takeover's replay of the stream since the
// checkpoint is counted again, as a restart's replay of the log is), the
// couriers of the partitions it owns now, and the lowest watermark among
// them (the market's event time is as far as its slowest partition).
func (r *Runner) Stats(s *metrics.Snapshot) {
	select {
	case <-r.ready:
	default:
		return
	}
	st := engine.Stats{Rejected: map[string]int64{}, Results: map[string]int64{}, Watermark: tmath.Never}
	owned := false
	var cs checkpoint.Stats
	for _, p := range r.parts {
		p.pastMu.Lock()
		st.Add(p.past)
		addCheckpoints(&cs, p.pastCkpt)
		p.pastMu.Unlock()
		if c := p.ckpt.Load(); c != nil {
			addCheckpoints(&cs, c.Stats())
		}
		if e := p.eng.Load(); e != nil {
			es := e.Stats()
			st.Add(es)
			st.Couriers += es.Couriers
			st.InFlight += es.InFlight
			st.InFlightMax += es.InFlightMax
			if es.Watermark != tmath.Never && (!owned || es.Watermark < st.Watermark) {
				st.Watermark, owned = es.Watermark, true
			}
		}
	}
	if n := r.zonesPublished.Load(); n > 0 { // the market's, from the partitions' parts
		st.Results[result.DeadZone.String()] += n
	}
	s.Engine, s.HasEngine = st, true
	s.Durability.SetCheckpoints(cs)
	s.HasDurability = true
}

// addCheckpoints adds the checkpoint figures of src to dst: counts add
// up, the newest checkpoint's time, duration and size win.
func addCheckpoints(dst *checkpoint.Stats, src checkpoint.Stats) {
	dst.Written += src.Written
	dst.Failed += src.Failed
	dst.Skipped += src.Skipped
	if src.Last.After(dst.Last) {
		dst.Last, dst.Duration, dst.Bytes = src.Last, src.Duration, src.Bytes
	}
}

// Extend serves the partitions' ownership at /partitions/MARKET and adds
// their per-partition metrics to the market's listener.
func (r *Runner) Extend(mux *http.ServeMux, reg *prometheus.Registry) error {
	mux.Handle("GET /partitions/"+r.cfg.Market, r.StatusHandler())
	if err := reg.Register(r.Collector()); err != nil {
		return fmt.Errorf("register partition metrics of %s: %w", r.cfg.Market, err)
	}
	return nil
}

// StatusHandler serves the instance's partitions as JSON: the market, the
// instance, whether it is ready and every partition's Status.
func (r *Runner) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		why := r.NotReady()
		_ = json.NewEncoder(w).Encode(struct {
			Market     string   `json:"market"`
			Instance   string   `json:"instance"`
			Ready      bool     `json:"ready"`
			NotReady   string   `json:"not_ready,omitempty"`
			Partitions []Status `json:"partitions"`
		}{r.cfg.Market, r.inst, why == "", why, r.Status()})
	})
}

// Collector is the per-partition metrics (edgeproc_partition_*), for the
// registry of the listener that serves the market. Each market's runner
// has its own, with the market as a constant label, so that the
// registry tells the collectors of several markets on one listener
// apart.
func (r *Runner) Collector() prometheus.Collector {
	m := prometheus.Labels{"market": r.cfg.Market}
	labels := []string{"instance", "partition"}
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, labels, m) }
	return collector{
		r:         r,
		owned:     desc("edgeproc_partition_owned", "1 while this instance owns the partition (holds its pin)."),
		processed: desc("edgeproc_partition_processed_sequence", "Stream sequence of the last message applied."),
		ckpt:      desc("edgeproc_partition_checkpoint_sequence", "Stream sequence the last recorded checkpoint reflects."),
		lagMsgs:   desc("edgeproc_partition_lag_messages", "Messages of the partition not yet delivered to its owner."),
		lagSec:    desc("edgeproc_partition_lag_seconds", "Age of the last applied message while messages wait (0 when caught up)."),
		takeovers: desc("edgeproc_partition_takeovers_total", "Terms of ownership this instance started."),
		fenced:    desc("edgeproc_partition_lost_total", "Terms of ownership that ended because the pin moved or the lease ran out."),
		dropped:   desc("edgeproc_partition_dropped_results_total", "Results not published because the term had lost the partition."),
		caughtUp:  desc("edgeproc_partition_caught_up_messages_total", "Messages read from the stream directly to fill a gap after a takeover."),
		bad:       desc("edgeproc_partition_bad_batches_total", "Batches of the positions stream that did not decode (the positions before the damage applied)."),
		relay: prometheus.NewDesc("edgeproc_relay_active",
			"1 while this instance holds the relay lease and relays the market's broker (jetstream.ingest mqtt).", []string{"instance"}, m),
		unacked: prometheus.NewDesc("edgeproc_relay_unacked",
			"Messages the relay has received from the broker and not yet acked (each acked once its batch is stored); at 1024 (the Receive Maximum edgeproc announces) the broker sends no more until acks come. 0 when this instance does not relay.", []string{"instance"}, m),
		relayed: prometheus.NewDesc("edgeproc_relay_positions_total",
			"Positions this instance relayed, by outcome: stored (acked to the broker once stored), skipped (a redelivery a former relay had stored), redelivered (a redelivery, after a reconnect, of what this relay had received: acked once its first copy is stored, not stored again), retried (batch stores sent again).", []string{"instance", "outcome"}, m),
		zonesWaiting: prometheus.NewDesc("edgeproc_dead_zone_windows_waiting",
			"Dead-zone windows fired in some partitions and waiting for the others' parts (dead_zones on).", []string{"instance"}, m),
		zonesIncomplete: prometheus.NewDesc("edgeproc_dead_zone_windows_incomplete_total",
			"Dead-zone windows published without every partition's part: 64 windows were waiting for a partition far behind.", []string{"instance"}, m),
		mismatch: prometheus.NewDesc("edgeproc_partition_mapping_mismatch",
			"1 while the positions stream holds positions on a partition past jetstream.partitions (the server's mapping has more): nobody reads them.", []string{"instance"}, m),
	}
}

// collector reads the partitions' atomics at scrape time.
type collector struct {
	r                                                                                                                     *Runner
	owned, processed, ckpt, lagMsgs, lagSec, takeovers, fenced, dropped, caughtUp, bad, mismatch, relay, relayed, unacked *prometheus.Desc
	zonesWaiting, zonesIncomplete                                                                                         *prometheus.Desc
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.owned, c.processed, c.ckpt, c.lagMsgs, c.lagSec, c.takeovers, c.fenced, c.dropped, c.caughtUp, c.bad, c.mismatch, c.relay, c.relayed, c.unacked, c.zonesWaiting, c.zonesIncomplete} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	mismatch := 0.0
	if why := c.r.mismatch.Load(); why != nil && *why != "" {
		mismatch = 1
	}
	ch <- prometheus.MustNewConstMetric(c.mismatch, prometheus.GaugeValue, mismatch, c.r.inst)
	if c.r.cfg.DeadZones.Window > 0 {
		waiting := int64(0)
		if z := c.r.zones.Load(); z != nil {
			waiting = z.waiting.Load()
		}
		ch <- prometheus.MustNewConstMetric(c.zonesWaiting, prometheus.GaugeValue, float64(waiting), c.r.inst)
		ch <- prometheus.MustNewConstMetric(c.zonesIncomplete, prometheus.CounterValue, float64(c.r.zonesIncomplete.Load()), c.r.inst)
	}
	if l := c.r.lease; l != nil {
		active := 0.0
		if l.relayReady() != notRelaying {
			active = 1
		}
		ch <- prometheus.MustNewConstMetric(c.relay, prometheus.GaugeValue, active, c.r.inst)
		ch <- prometheus.MustNewConstMetric(c.unacked, prometheus.GaugeValue, float64(l.unacked()), c.r.inst)
		ch <- prometheus.MustNewConstMetric(c.relayed, prometheus.CounterValue, float64(l.counts.stored.Load()), c.r.inst, "stored")
		ch <- prometheus.MustNewConstMetric(c.relayed, prometheus.CounterValue, float64(l.counts.skipped.Load()), c.r.inst, "skipped")
		ch <- prometheus.MustNewConstMetric(c.relayed, prometheus.CounterValue, float64(l.counts.redelivered.Load()), c.r.inst, "redelivered")
		ch <- prometheus.MustNewConstMetric(c.relayed, prometheus.CounterValue, float64(l.counts.retries.Load()), c.r.inst, "retried")
	}
	for _, s := range c.r.Status() {
		lv := []string{c.r.inst, strconv.Itoa(s.Partition)}
		owned := 0.0
		if s.Owned {
			owned = 1
		}
		ch <- prometheus.MustNewConstMetric(c.owned, prometheus.GaugeValue, owned, lv...)
		ch <- prometheus.MustNewConstMetric(c.processed, prometheus.GaugeValue, float64(s.Processed), lv...)
		ch <- prometheus.MustNewConstMetric(c.ckpt, prometheus.GaugeValue, float64(s.Checkpoint), lv...)
		ch <- prometheus.MustNewConstMetric(c.lagMsgs, prometheus.GaugeValue, float64(s.LagMessages), lv...)
		ch <- prometheus.MustNewConstMetric(c.lagSec, prometheus.GaugeValue, float64(s.LagMs)/1000, lv...)
		ch <- prometheus.MustNewConstMetric(c.takeovers, prometheus.CounterValue, float64(s.Takeovers), lv...)
		ch <- prometheus.MustNewConstMetric(c.fenced, prometheus.CounterValue, float64(s.Fenced), lv...)
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(s.Dropped), lv...)
		ch <- prometheus.MustNewConstMetric(c.caughtUp, prometheus.CounterValue, float64(s.CaughtUp), lv...)
		ch <- prometheus.MustNewConstMetric(c.bad, prometheus.CounterValue, float64(s.BadBatches), lv...)
	}
}

// Ready reports whether set-up is done and NATS is connected: the instance
// can own partitions (it need not own any).
func (r *Runner) Ready() bool {
	select {
	case <-r.ready:
		return r.nc.IsConnected()
	default:
		return false
	}
}
