package crashtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/oracle"
	"github.com/km0/edgeproc/internal/testenv"
)

// TestSIGSTOP_IsNotSilence pauses `edgeproc run` (a real process, the
// idle rule on) with SIGSTOP for longer than gap + tolerated_delay while
// the fleet keeps publishing to Mosquitto, as a suspended VM or a stalled
// process would be: the broker keeps the positions in the persistent
// session, and after SIGCONT they must arrive as what they are, not after
// a silence. So every courier's only no_signal is the one after the
// fleet's final silence, with its last position as last_seen, no position
// is late, and the stream equals the engine's replay of the write-ahead
// log. Without the intake's look at the monotonic clock the first message
// after the pause applies the whole pause as silence: every courier gets a
// false no_signal and the positions the broker kept are late.
func TestSIGSTOP_IsNotSilence(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	dir := t.TempDir()
	listen := testenv.FreeAddr(t)
	y := fmt.Sprintf(`market: paused
mqtt: {url: %q, client_id: edgeproc-paused}
nats: {url: %q}
windows: {size: 4s, slide: 2s, gap: 3s, tolerated_delay: 1s, idle_timeout: 1s}
state: {dir: %q, checkpoint_interval: 1h}
http: {listen: %q}
`, mosq.URL(), ns.URL(), filepath.Join(dir, "state"), listen)
	path := filepath.Join(dir, "paused.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.StartProc(t, "edgeproc", testenv.BuildEdgeproc(t), "run", "--config", path)
	waitReady(t, listen, 30*time.Second)

	const stopAt, contAt = 12, 40 // of 56 rounds 250 ms apart: a 7 s pause, > gap + tolerated_delay
	pub := mosq.Publisher(t, "paused-pub")
	last := testenv.LiveFleet("paused", 10, 56, 250*time.Millisecond, func(round int) {
		switch round {
		case stopAt:
			if err := p.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		case contAt:
			if err := p.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
	}, func(topic string, payload []byte) { pub.MustPublish(t, topic, payload) })
	testenv.WaitFinalSilence(t, ns.URL(), cfg.NATS.Stream, last, 30*time.Second)
	if err := p.Stop(30 * time.Second); err != nil {
		t.Errorf("edgeproc after SIGTERM: %v", err)
	}
	testenv.CheckOnlyFinalSilence(t, ns.URL(), cfg.NATS.Stream, last)
	got := map[string]string{}
	for _, m := range testenv.ReadStream(t, ns.URL(), cfg.NATS.Stream) {
		var r struct {
			Key string `json:"key"`
		}
		if json.Unmarshal(m.Data, &r) == nil {
			got[r.Key] = oracle.EmittedRe.ReplaceAllString(string(m.Data), "")
		}
	}
	want := oracle.WALResults(t, cfg, oracle.EmittedRe)
	if diffs := testenv.DiffResults(got, want, "the log's replay"); len(diffs) > 0 {
		t.Errorf("%d differences between the stream and the log's replay; first: %v", len(diffs), diffs[:min(5, len(diffs))])
	}
}
