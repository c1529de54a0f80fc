package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/mqtt"
	"github.com/km0/edgeproc/wal"
)

// TestRun_LogsAndAcksEveryMessage: in wal mode every message is in the log
// and acked to the broker (a session taken over afterwards gets no
// redelivery), and /metrics counts them as edgeproc would.
func TestRun_LogsAndAcksEveryMessage(t *testing.T) {
	broker := testenv.StartMosquitto(t)
	dir := t.TempDir()
	listen := testenv.FreeAddr(t)
	conf := filepath.Join(dir, "floor.yaml")
	yaml := fmt.Sprintf("market: bench\nmqtt:\n  url: %s\n  client_id: floor\nnats:\n  url: nats://127.0.0.1:1\nstate:\n  dir: %s\nhttp:\n  listen: %s\n",
		broker.URL(), filepath.Join(dir, "state"), listen)
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, conf, "wal", slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	testenv.WaitFor(t, 10*time.Second, "/readyz", func() bool { return get(listen, "/readyz") == "" })

	const n = 50
	pub := broker.Publisher(t, "floor-pub")
	for i := range n {
		pub.MustPublish(t, "km0/bench/positions/c1", fmt.Appendf(nil, `{"i":%d}`, i))
	}
	want := fmt.Sprintf(`edgeproc_positions_received_total{market="bench"} %d`, n)
	testenv.WaitFor(t, 10*time.Second, "every message received", func() bool {
		return strings.TrimSpace(get(listen, "/metrics")) == want
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}

	w, _, err := wal.Open(filepath.Join(dir, "state", "wal"), wal.Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := w.Replay(w.FirstIndex(), func(_ uint64, e entry.Entry) error {
		got = append(got, string(e.Payload))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if len(got) != n || got[0] != `{"i":0}` || got[n-1] != fmt.Sprintf(`{"i":%d}`, n-1) {
		t.Fatalf("log holds %d entries (%q … ), want the %d messages in order", len(got), got[:min(len(got), 2)], n)
	}

	// Taking the session over: the broker delivers what was never acked
	// before anything published after it, so the marker must come first.
	first := make(chan string, 1)
	src, err := mqtt.Start(context.Background(), mqtt.Config{URL: broker.URL(), Topic: "km0/bench/positions/+", ClientID: "floor"},
		slog.New(slog.NewTextHandler(io.Discard, nil)), func(m *mqtt.Message) {
			m.Ack()
			select {
			case first <- string(m.Payload):
			default:
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	testenv.WaitFor(t, 10*time.Second, "session taken over", func() bool { _, up, sub := src.Hearing(); return up && sub })
	pub.MustPublish(t, "km0/bench/positions/c1", []byte("marker"))
	select {
	case p := <-first:
		if p != "marker" {
			t.Fatalf("first message after the takeover is %q, a redelivery: not every message was acked", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no message after the takeover")
	}
}

// get returns the body of a GET, or "" for 200 with an empty body; an
// error or another status gives a non-empty text.
func get(addr, path string) string {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.Status
	}
	return string(b)
}
