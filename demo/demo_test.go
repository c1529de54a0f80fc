package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/result"
)

// within90s are the types the demo shows within 90 s: all but the moves
// across the service area, for which a courier must drive through its
// border band (0.5-0.9 km) from one side to the other (the demo shows
// some within 3 minutes: TestFleet_MovesAcrossTheServiceArea).
var within90s = slices.DeleteFunc(slices.Clone(types[:]), func(t string) bool { return strings.HasSuffix(t, "_area") })

// typeCounter counts result types seen on NATS.
type typeCounter struct {
	mu     sync.Mutex
	counts map[string]int
	all    chan struct{} // closed once every type was seen
}

func (c *typeCounter) add(data []byte) {
	var r struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &r) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[r.Type]++
	for _, typ := range within90s {
		if c.counts[typ] == 0 {
			return
		}
	}
	select {
	case <-c.all:
	default:
		close(c.all)
	}
}

func (c *typeCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		m[k] = v
	}
	return m
}

func assertLoopback(t *testing.T, what, hostport string) {
	t.Helper()
	host, _, err := net.SplitHostPort(hostport)
	if err != nil || host != "127.0.0.1" {
		t.Errorf("%s listens on %q, want 127.0.0.1:PORT", what, hostport)
	}
}

func TestRun_EveryResultTypeReachesNATS(t *testing.T) {
	testenv.SkipShort(t, "the demo's embedded MQTT and NATS servers for a minute")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counter := &typeCounter{counts: map[string]int{}, all: make(chan struct{})}
	ready := make(chan Addrs, 1)
	var out testenv.LogBuffer

	type result struct {
		tot Totals
		err error
	}
	done := make(chan result, 1)
	go func() {
		tot, err := Run(ctx, Options{Out: &out, Ready: func(a Addrs) { ready <- a }})
		done <- result{tot, err}
	}()

	var addrs Addrs
	select {
	case addrs = <-ready:
	case r := <-done:
		t.Fatalf("Run returned before it was ready: %v", r.err)
	case <-time.After(60 * time.Second):
		t.Fatal("demo not ready within 60s")
	}
	assertLoopback(t, "MQTT broker", addrs.MQTT)
	assertLoopback(t, "HTTP endpoint", addrs.HTTP)
	u, err := url.Parse(addrs.NATS)
	if err != nil || u.Scheme != "nats" {
		t.Fatalf("NATS URL %q: want nats://127.0.0.1:PORT", addrs.NATS)
	}
	assertLoopback(t, "NATS server", u.Host)
	assertLoopbackOnly(t, os.Getpid())

	// An outside consumer, as a dashboard would be.
	nc, err := nats.Connect(addrs.NATS)
	if err != nil {
		t.Fatalf("connect to %s: %v", addrs.NATS, err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe("delivery.>", func(m *nats.Msg) { counter.add(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	select {
	case <-counter.all:
	case r := <-done:
		t.Fatalf("Run returned early: %v; seen %v", r.err, counter.snapshot())
	case <-time.After(90 * time.Second):
		t.Fatalf("within 90s got results %v, want every type of %v", counter.snapshot(), within90s)
	}

	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of cancel")
	}
	if r.err != nil {
		t.Fatalf("Run: got %v, want nil after cancel", r.err)
	}
	if r.tot.Sim.Sent == 0 || r.tot.Sim.Acked != r.tot.Sim.Sent || r.tot.Sim.Errors != 0 {
		t.Errorf("fleet: got %s, want every message acked", r.tot.Sim)
	}
	if r.tot.InflightDropped != 0 || r.tot.MessagesDropped != 0 {
		t.Errorf("broker dropped %d in-flight, %d messages; want 0", r.tot.InflightDropped, r.tot.MessagesDropped)
	}
	// The demo's own feed saw at least what the outside consumer saw
	// before the cancel.
	seen := counter.snapshot()
	for _, typ := range within90s {
		if got := r.tot.Results[typ]; got == 0 || got < uint64(seen[typ]) {
			t.Errorf("feed counted %d %s results, want >= %d (seen on NATS)", got, typ, seen[typ])
		}
	}
	text := out.String()
	for _, want := range []string{
		"mosquitto_sub -h 127.0.0.1 -p " + port(addrs.MQTT) + " -t 'km0/demo/positions/#' -v",
		"nats sub -s " + addrs.NATS + " 'delivery.dashboard.>'",
		"edgeproc tail --nats " + addrs.NATS + " --market demo",
		"totals: distance ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Events as they come; distance and late only on the board.
	for _, typ := range []string{"no_signal", "signal_restored", "rejected"} {
		if !regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d ` + typ + ` `).MatchString(text) {
			t.Errorf("output has no event line of type %s", typ)
		}
	}
	if regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d (distance|late) `).MatchString(text) {
		t.Errorf("output scrolls distance or late lines; they belong on the board")
	}
	if !boardLine.MatchString(text) {
		t.Errorf("output has no status board with moving couriers:\n%s", text)
	}
	if strings.Contains(text, "\x1b[") {
		t.Errorf("output has ANSI colours with Color off")
	}
}

// boardLine matches a status board's first line with couriers moving.
var boardLine = regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d ── \d+ couriers: [1-9]\d* moving, `)

// TestBinary_SIGINT builds edgeproc and checks that `edgeproc demo` stops
// cleanly, exit code 0, on Ctrl-C after showing results.
func TestBinary_SIGINT(t *testing.T) {
	bin := testenv.BuildEdgeproc(t)

	cmd := exec.Command(bin, "demo", "--duration", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testenv.LogBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	var rest testenv.LogBuffer
	firstDistance := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			rest.Write([]byte(line + "\n"))
			if !signalled && boardLine.MatchString(line) {
				signalled = true
				close(firstDistance)
			}
		}
		exited <- cmd.Wait()
	}()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	}()

	select {
	case <-firstDistance:
	case err := <-exited:
		t.Fatalf("demo exited before its first board with couriers moving: %v\nstdout:\n%s\nstderr:\n%s", err, rest.String(), stderr.String())
	case <-time.After(90 * time.Second):
		t.Fatalf("no board with couriers moving within 90s\nstdout:\n%s\nstderr:\n%s", rest.String(), stderr.String())
	}
	assertLoopbackOnly(t, cmd.Process.Pid)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("send SIGINT: %v", err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("got exit code %d, want 0\nstderr:\n%s", ee.ExitCode(), stderr.String())
		}
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("demo still running 30s after SIGINT\nstderr:\n%s", stderr.String())
	}
	if !strings.Contains(rest.String(), "totals: ") {
		t.Errorf("no totals line after SIGINT; stdout:\n%s", rest.String())
	}
}

// TestFleet_MovesAcrossTheServiceArea replays the demo's fleet (its
// tweaks, 140 couriers, 20 minutes) through the demo's market
// configuration: couriers leave and enter Girona's service area and dead
// zones fire within the first 3 minutes; most couriers work inside it all
// along, a few are outside it at any time (by their side then, first
// sides included), and couriers that left come back.
func TestFleet_MovesAcrossTheServiceArea(t *testing.T) {
	cfg, err := marketConfig("127.0.0.1:1", "127.0.0.1:0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fc := fleetTweaks()
	fc.Couriers, fc.Duration, fc.Seed = DefaultCouriers, 20*time.Minute, DefaultSeed
	f := fleet.New(fc)
	ecfg := market.EngineConfig(cfg)
	var (
		mu                   sync.Mutex
		outside              = map[string]bool{}
		left                 = map[string]bool{}
		back, maxOut         int
		firstLeft, firstBack = int64(-1), int64(-1)
		firstIn              = int64(-1)
	)
	count := func() {
		n := 0
		for _, o := range outside {
			if o {
				n++
			}
		}
		maxOut = max(maxOut, n)
	}
	ecfg.OnSide = func(courier string, _ int64, out bool) {
		mu.Lock()
		defer mu.Unlock()
		outside[courier] = out
	}
	since := func(ts int64) int64 { return ts - fleet.DefaultStart }
	e := engine.New(ecfg, func(rs []result.Record) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rs {
			switch r.Type {
			case result.LeftArea:
				outside[r.Courier], left[r.Courier] = true, true
				if firstLeft < 0 {
					firstLeft = since(r.TS)
				}
			case result.EnteredArea:
				outside[r.Courier] = false
				if firstIn < 0 {
					firstIn = since(r.TS)
				}
				if left[r.Courier] {
					back++
					if firstBack < 0 {
						firstBack = since(r.TS)
					}
				}
			}
		}
		count()
	})
	for ev, ok := f.Next(); ok; ev, ok = f.Next() {
		e.Push(&engine.Input{Payload: fleet.AppendJSON(nil, ev, false), Arrival: ev.Arrival, HasArrival: true})
	}
	e.Stop() // as a live run: nothing fires for lack of input
	if got := e.Stats().Results; got["dead_zone"] == 0 {
		t.Errorf("the demo's fleet gave %v in 20 minutes: want dead_zone", got)
	}
	mu.Lock()
	defer mu.Unlock()
	const minutes3 = 3 * 60_000
	if firstLeft < 0 || firstLeft > minutes3 || firstIn < 0 || firstIn > minutes3 {
		t.Errorf("first left_area %d ms and entered_area %d ms into the fleet, want both within 3 minutes", firstLeft, firstIn)
	}
	if len(outside) < DefaultCouriers*9/10 || maxOut == 0 || maxOut > DefaultCouriers/10 || back == 0 {
		t.Errorf("of %d couriers with a side, at most %d outside at once and %d came back in after leaving: want most of the %d with a side, 1 to %d outside, and one back at least",
			len(outside), maxOut, back, DefaultCouriers, DefaultCouriers/10)
	}
	t.Logf("20 minutes of the demo's fleet: %d couriers left the area, %d came back (the first %v in); at most %d of %d outside at once",
		len(left), back, time.Duration(firstBack)*time.Millisecond, maxOut, len(outside))
}

// TestFleet_LateInTheFirstMinute replays the demo's fleet through the
// demo's configuration: a late record comes within the first minute, as
// the README says of every result type.
func TestFleet_LateInTheFirstMinute(t *testing.T) {
	cfg, err := marketConfig("127.0.0.1:1", "127.0.0.1:0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fc := fleetTweaks()
	fc.Couriers, fc.Duration, fc.Seed = DefaultCouriers, 2*time.Minute, DefaultSeed
	fc.DuplicateRate, fc.BadRate = DefaultDuplicateRate, DefaultBadRate
	f := fleet.New(fc)
	first := int64(-1)
	e := engine.New(market.EngineConfig(cfg), func(rs []result.Record) {
		for _, r := range rs {
			if r.Type == result.Late && first < 0 {
				first = r.EmittedAt // from the merger's one goroutine
			}
		}
	})
	for ev, ok := f.Next(); ok; ev, ok = f.Next() {
		e.Push(&engine.Input{Payload: fleet.AppendJSON(nil, ev, false), Arrival: ev.Arrival, HasArrival: true})
	}
	e.Stop()
	if at := time.Duration(first-fleet.DefaultStart) * time.Millisecond; first < 0 || at > time.Minute {
		t.Errorf("first late record %v into the demo's fleet (-1: none in 2 minutes), want within the first minute", at)
	} else {
		t.Logf("first late record %v into the demo's fleet", at)
	}
}
