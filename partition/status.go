package partition

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/km0/edgeproc/bridge"
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
	// Applied counts the messages this instance applied, in every term.
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
// set-up).
func (r *Runner) Results() bridge.Stats {
	select {
	case <-r.ready:
		return r.br.Stats()
	default:
		return bridge.Stats{}
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

// Handler serves /metrics (Prometheus, per partition), /healthz and
// /readyz (503 until Ready; the body lists the partitions as JSON).
func (r *Runner) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{r})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !r.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(struct {
			Market     string   `json:"market"`
			Instance   string   `json:"instance"`
			Ready      bool     `json:"ready"`
			Partitions []Status `json:"partitions"`
		}{r.cfg.Market, r.inst, r.Ready(), r.Status()})
	})
	return mux
}

var (
	labels        = []string{"market", "instance", "partition"}
	descOwned     = prometheus.NewDesc("edgeproc_partition_owned", "1 while this instance owns the partition (holds its pin).", labels, nil)
	descProcessed = prometheus.NewDesc("edgeproc_partition_processed_sequence", "Stream sequence of the last message applied.", labels, nil)
	descCkpt      = prometheus.NewDesc("edgeproc_partition_checkpoint_sequence", "Stream sequence the last recorded checkpoint reflects.", labels, nil)
	descLagMsgs   = prometheus.NewDesc("edgeproc_partition_lag_messages", "Messages of the partition not yet delivered to its owner.", labels, nil)
	descLagSec    = prometheus.NewDesc("edgeproc_partition_lag_seconds", "Age of the last applied message while messages wait (0 when caught up).", labels, nil)
	descTakeovers = prometheus.NewDesc("edgeproc_partition_takeovers_total", "Terms of ownership this instance started.", labels, nil)
	descFenced    = prometheus.NewDesc("edgeproc_partition_lost_total", "Terms of ownership that ended because the pin moved or the lease ran out.", labels, nil)
	descDropped   = prometheus.NewDesc("edgeproc_partition_dropped_results_total", "Results not published because the term had lost the partition.", labels, nil)
	descCaughtUp  = prometheus.NewDesc("edgeproc_partition_caught_up_messages_total", "Messages read from the stream directly to fill a gap after a takeover.", labels, nil)
)

// collector reads the partitions' atomics at scrape time.
type collector struct{ r *Runner }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOwned, descProcessed, descCkpt, descLagMsgs, descLagSec, descTakeovers, descFenced, descDropped, descCaughtUp} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.r.Status() {
		lv := []string{c.r.cfg.Market, c.r.inst, strconv.Itoa(s.Partition)}
		owned := 0.0
		if s.Owned {
			owned = 1
		}
		ch <- prometheus.MustNewConstMetric(descOwned, prometheus.GaugeValue, owned, lv...)
		ch <- prometheus.MustNewConstMetric(descProcessed, prometheus.GaugeValue, float64(s.Processed), lv...)
		ch <- prometheus.MustNewConstMetric(descCkpt, prometheus.GaugeValue, float64(s.Checkpoint), lv...)
		ch <- prometheus.MustNewConstMetric(descLagMsgs, prometheus.GaugeValue, float64(s.LagMessages), lv...)
		ch <- prometheus.MustNewConstMetric(descLagSec, prometheus.GaugeValue, float64(s.LagMs)/1000, lv...)
		ch <- prometheus.MustNewConstMetric(descTakeovers, prometheus.CounterValue, float64(s.Takeovers), lv...)
		ch <- prometheus.MustNewConstMetric(descFenced, prometheus.CounterValue, float64(s.Fenced), lv...)
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(s.Dropped), lv...)
		ch <- prometheus.MustNewConstMetric(descCaughtUp, prometheus.CounterValue, float64(s.CaughtUp), lv...)
	}
}
