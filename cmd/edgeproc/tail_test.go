package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/internal/testenv"
)

// workedStream starts a NATS server and publishes the worked example's
// results (a real replay's output) to market girona's stream through a
// bridge, as edgeproc run would: the server, its connection, the bridge
// (open until the test ends) and the lines published.
func workedStream(t *testing.T) (*testenv.NATS, *nats.Conn, *bridge.Bridge, []string) {
	t.Helper()
	srv := testenv.StartNATS(t)
	nc := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := bridge.Open(ctx, nc, bridge.Config{Market: "girona"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.Close(ctx)
	})
	return srv, nc, b, publishWorked(t, b)
}

// publishWorked publishes the worked example's results through b and
// returns them.
func publishWorked(t *testing.T, b *bridge.Bridge) []string {
	t.Helper()
	code, out, errs := runCLI(t, "replay", "--config", "../../testdata/worked.yaml", "--in", "../../testdata/worked.jsonl")
	if code != 0 {
		t.Fatalf("replay: exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range lines {
		var r struct{ Type, Key string }
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("replay line %q: %v", l, err)
		}
		if err := b.Publish(ctx, b.Config().Subject(r.Type), r.Key, []byte(l)); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return lines
}

func TestTail_ReadsResultsAndCourierStates(t *testing.T) {
	srv, _, b, published := workedStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// JSON: the published records exactly, in stream order.
	code, out, errs := runCLI(t, "tail", "--nats", srv.URL(), "--market", "girona", "--since", "1h", "--json",
		"--type", "distance,no_signal,signal_restored,late,rejected,dead_zone", "--count", strconv.Itoa(len(published)))
	if code != 0 {
		t.Fatalf("tail: exit %d: %s", code, errs)
	}
	if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "\n") != strings.Join(published, "\n") {
		t.Errorf("tail --json:\n%s\nwant the published records:\n%s", out, strings.Join(published, "\n"))
	}

	// Text, one type: one line per no_signal, with its courier.
	code, out, errs = runCLI(t, "tail", "--nats", srv.URL(), "--market", "girona", "--since", "1h", "--type", "no_signal", "--count", "2")
	if code != 0 || strings.Count(out, "no_signal") != 2 || strings.Count(out, "van-3") != 2 || !strings.Contains(out, "end of input") {
		t.Errorf("tail --type no_signal: exit %d, stdout:\n%s\nstderr: %s", code, out, errs)
	}

	// A dead zone: its cell and figures, no courier.
	code, out, errs = runCLI(t, "tail", "--nats", srv.URL(), "--market", "girona", "--since", "1h", "--type", "dead_zone", "--count", "1")
	if code != 0 || !strings.Contains(out, "cell 883945cadbfffff  1 no_signal of 1 couriers, 1 back after 1m5s") {
		t.Errorf("tail --type dead_zone: exit %d, stdout:\n%s\nstderr: %s", code, out, errs)
	}

	// Two types that no single server-side filter covers: filtered here.
	code, out, errs = runCLI(t, "tail", "--nats", srv.URL(), "--market", "girona", "--since", "1h", "--json",
		"--type", "signal_restored,no_signal", "--count", "3")
	var want3 []string
	for _, l := range published {
		if strings.Contains(l, `"type":"no_signal"`) || strings.Contains(l, `"type":"signal_restored"`) {
			want3 = append(want3, l)
		}
	}
	if code != 0 || strings.TrimSpace(out) != strings.Join(want3, "\n") {
		t.Errorf("tail --type signal_restored,no_signal: exit %d, got\n%s\nwant\n%s\nstderr %s", code, out, strings.Join(want3, "\n"), errs)
	}

	// Live: a courier state written after tail starts reaches it.
	var live testenv.LogBuffer
	done := make(chan int, 1)
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		done <- run(tctx, []string{"tail", "--nats", srv.URL(), "--market", "girona", "--type", "courier", "--json", "--count", "1"}, &live, &live)
	}()
	want := `{"type":"courier","market":"girona","courier":"van-9","lat":41.9,"lon":2.8,"timestamp_ms":1726315210000,"cell":"89394462a8bffff","status":"no_signal"}`
	deadline := time.After(10 * time.Second)
	for {
		// tail subscribes asynchronously: repeat the update until it shows.
		b.UpdateCourier(bridge.CourierState{Courier: "van-9", Lat: 41.9, Lon: 2.8, TS: 1726315210000, Cell: "89394462a8bffff", Status: bridge.StatusNoSignal})
		b.UpdateCourier(bridge.CourierState{Courier: "van-9", Lat: 41.9, Lon: 2.8, TS: 1726315210000, Cell: "89394462a8bffff", Status: bridge.StatusOnline})
		select {
		case code := <-done:
			if code != 0 || !strings.Contains(live.String(), `"type":"courier","market":"girona","courier":"van-9"`) {
				t.Fatalf("tail --type courier: exit %d, output %q (one like %s)", code, live.String(), want)
			}
			return
		case <-deadline:
			t.Fatalf("tail saw no courier update within 10s; output %q", live.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func TestTail_NoStream(t *testing.T) {
	srv := testenv.StartNATS(t)
	code, _, errs := runCLI(t, "tail", "--nats", srv.URL(), "--market", "nowhere")
	if code != 1 || !strings.Contains(errs, "edgeproc tail: market nowhere: stream EDGEPROC_NOWHERE:") {
		t.Errorf("exit %d, stderr %q; want 1 and the missing stream named", code, errs)
	}
}
