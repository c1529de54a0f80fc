package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"time"

	"github.com/km0/edgeproc/sim"
)

// stepSettings are the knobs shared by every load step.
type stepSettings struct {
	BrokerURL  string
	Duration   time.Duration // sending time of a step
	Interval   time.Duration // a courier's position interval (fleet default 5s)
	Drain      time.Duration // bound on the catch-up wait after a step
	MinRatio   float64       // received/offered needed for "sustained", e.g. 0.97
	MaxCatchUp time.Duration // allowed time to receive the backlog after sending
	Log        *slog.Logger
	// BrokerPID is the Mosquitto process for the CPU column; 0 when the
	// broker is not ours.
	BrokerPID int
	// ReadBack, when set, is the NATS URL to read each step's results from
	// once the step is over (see readBackStored), instead of live readers.
	ReadBack string
}

// stepResult is one offered rate's outcome.
type stepResult struct {
	Target     float64 // offered rate, positions/s
	Couriers   int
	Sent       uint64
	SentRate   float64 // achieved by the publisher over the step
	RecvRate   float64 // SentRate × received/sent over the step (edgeproc_positions_received_total)
	LagFrom    float64 // watermark lag ⅓ into the step, s
	LagTo      float64 // at the end of sending, s
	QueueEnd   float64 // ingest queue depth at the end of sending
	QueueCap   float64
	Backlog    float64       // messages still at the broker when sending ended
	CatchUp    time.Duration // until edgeproc had received every sent message
	CaughtUp   bool
	Latency    latencySummary // read back from JetStream
	Stored     latencySummary // the stream's store time of the same results
	Core       latencySummary // core NATS subscription (reference)
	Sustained  bool
	Why        string // the first failed criterion, when not sustained
	PubErrors  uint64
	Incomplete bool // the step was cut short (ctx ended)
	// CPU is the CPU share of edgeproc, the broker and loadbench itself
	// (publisher, NATS server, result readers) while sending, % of one core.
	CPU []float64
	// CPUTime is the CPU time of the same processes from the start of
	// sending until edgeproc had received everything (and the results of
	// the last crossings had a moment to go out): the whole cost of the
	// step's positions, both processes over the same interval.
	CPUTime []time.Duration
	// PeakRSS is edgeproc's peak resident set (VmHWM) since it started,
	// bytes, read at the end of the step; 0 when it cannot be read.
	PeakRSS int64
}

// runStep offers rate positions/s to the broker for s.Duration (sim.Run,
// Couriers = rate × Interval so that event time keeps to the clock) while
// scraping edgeproc's metrics every samplePeriod, then waits (bounded) for
// edgeproc to have received everything and judges the step.
func runStep(ctx context.Context, p *edgeprocProc, tap *resultTap, rate float64, s stepSettings) (stepResult, error) {
	r := stepResult{Target: rate, Couriers: max(1, int(rate*s.Interval.Seconds()))}
	lat := tap.begin()
	s0, err := p.scrape()
	if err != nil {
		return r, err
	}

	samples := sampleEvery(ctx, p, samplePeriod, int(s.Duration/samplePeriod)+5)
	simStart := time.Now()
	cpu := startCPU(p.cmd.Process.Pid, s.BrokerPID, os.Getpid())
	st, simErr := sim.Run(ctx, sim.Options{
		URL:      s.BrokerURL,
		Market:   market,
		Couriers: r.Couriers,
		Rate:     rate,
		Duration: s.Duration,
		Seed:     1,
		ClientID: "loadbench-sim",
		Fleet:    fleetConfig(s.Interval),
	}, s.Log)
	r.CPU = cpu.percent()
	s1, err := p.scrape()
	got := samples.stop()
	if simErr != nil {
		return r, fmt.Errorf("step %.0f/s: publisher: %w", rate, simErr)
	}
	if err != nil {
		return r, err
	}
	if err := p.alive(); err != nil {
		return r, err
	}
	r.Sent, r.PubErrors = st.Sent, st.Errors
	r.SentRate = st.Rate()
	// Received over the whole step: a watermark crossing fires one result
	// per active courier at once, and while that burst goes to JetStream
	// intake pauses (the bounded path backs up to the broker); what
	// matters is that edgeproc catches up, not a steady rate every second.
	// Counted against what was sent over the same step, so the publisher's
	// connection set-up and drain bias neither.
	if st.Sent > 0 {
		r.RecvRate = r.SentRate * (s1.Received - s0.Received) / float64(st.Sent)
	}
	// Lag and queue are reported from the step's last ⅔, where the
	// previous step's tail is gone.
	from, sendEnd := simStart.Add(s.Duration/3), simStart.Add(s.Duration)
	var steady []sample
	for _, x := range got {
		if !x.At.Before(from) && !x.At.After(sendEnd) {
			steady = append(steady, x)
		}
	}
	r.QueueEnd, r.QueueCap = s1.QueueDepth, s1.QueueCap
	if len(steady) > 0 {
		r.QueueEnd = steady[len(steady)-1].QueueDepth
	}
	r.Backlog = max(0, s0.Received+float64(st.Sent)-s1.Received)
	r.LagFrom, r.LagTo = lagTrend(steady)
	r.Incomplete = ctx.Err() != nil

	// Catch-up: the broker holds what edgeproc has not taken yet.
	want := s0.Received + float64(st.Sent)
	deadline := time.Now().Add(s.Drain)
	for {
		cur, err := p.scrape()
		if err != nil {
			return r, err
		}
		if cur.Received >= want {
			r.CaughtUp, r.CatchUp = true, cur.At.Sub(s1.At)
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.CatchUp = time.Since(s1.At)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Results of crossings caused near the end still arrive: give the
	// tail a moment before the next step takes over the tap.
	time.Sleep(500 * time.Millisecond)
	r.CPUTime = cpu.seconds()
	r.PeakRSS = peakRSS(p.cmd.Process.Pid)
	if s.ReadBack != "" {
		if err := readBackStored(ctx, s.ReadBack, simStart, lat.Stored); err != nil {
			return r, err
		}
	}
	r.Latency, r.Stored, r.Core = lat.JS.summary(), lat.Stored.summary(), lat.Core.summary()
	r.Sustained, r.Why = judge(r, s)
	return r, nil
}

// judge applies the "sustained" criteria in order and names the first
// that fails: the publisher offered the rate, edgeproc received (at the
// end of sending) MinRatio of what was sent, and
// what the broker still held when sending stopped was received within
// MaxCatchUp (a lag that grows over the step leaves a backlog that takes
// longer).
func judge(r stepResult, s stepSettings) (bool, string) {
	switch {
	case r.Incomplete:
		return false, "interrupted"
	case r.SentRate < s.MinRatio*r.Target:
		return false, fmt.Sprintf("publisher reached only %.0f/s", r.SentRate)
	case r.RecvRate < s.MinRatio*r.SentRate:
		return false, fmt.Sprintf("received %.0f/s < %.0f%% of the %.0f/s sent", r.RecvRate, 100*s.MinRatio, r.SentRate)
	case !r.CaughtUp:
		return false, fmt.Sprintf("backlog not received within %s", s.Drain)
	case r.CatchUp > s.MaxCatchUp:
		return false, fmt.Sprintf("backlog took %s to receive", r.CatchUp.Round(100*time.Millisecond))
	}
	return true, ""
}

// lagTrend is the watermark lag at the first and the last sample that
// have one; -1 when there is none.
func lagTrend(ss []sample) (float64, float64) {
	first, last := -1.0, -1.0
	for _, x := range ss {
		if x.LagSeconds < 0 {
			continue
		}
		if first < 0 {
			first = x.LagSeconds
		}
		last = x.LagSeconds
	}
	return first, last
}

// samplePeriod is how often a step scrapes edgeproc's metrics for the
// lag and queue trend. A scrape is not free: at one a second it was about
// 4 % of edgeproc's CPU on the city fleet (a profile: the registry's
// collection and the gzip of ~23 kB), which a Prometheus scraping every
// 15 s or more does not cost it, so the step samples as seldom as its
// trend allows.
const samplePeriod = 5 * time.Second

// sampler scrapes at a fixed period into a bounded slice.
type sampler struct {
	stopc chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	got   []sample
}

// sampleEvery scrapes p every period, keeping at most limit samples, until
// stop or ctx ends. Scrape errors are skipped: the step's own scrapes
// report a dead edgeproc.
func sampleEvery(ctx context.Context, p *edgeprocProc, period time.Duration, limit int) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.stopc:
				return
			case <-t.C:
			}
			x, err := p.scrape()
			if err != nil {
				continue
			}
			s.mu.Lock()
			if len(s.got) < limit {
				s.got = append(s.got, x)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *sampler) stop() []sample {
	close(s.stopc)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

// planRates is the step plan, ascending so that each step's couriers
// include the previous step's (the same ids) and no step pays for a larger
// fleet's windows: start, doubled while at most a third of the broker's
// own rate, then steps of a sixth of it (rounded to 1000/s) up to 90 %
// of it, then the broker's rate itself.
func planRates(start, baseline float64) []float64 {
	var out []float64
	r := start
	for ; r <= baseline/3 && len(out) < 10; r *= 2 {
		out = append(out, r)
	}
	inc := max(1000, 1000*math.Round(baseline/6/1000))
	for ; r < 0.9*baseline && len(out) < 20; r += inc {
		out = append(out, r)
	}
	if baseline > 0 {
		out = append(out, math.Round(0.9*baseline), math.Round(baseline))
	}
	return out
}
