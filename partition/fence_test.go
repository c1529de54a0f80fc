package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/internal/testenv"
)

// TestClaim_FencesFormerOwner: once a second owner has claimed the
// partition's checkpoint record, the first can record nothing, while the
// second records and a third restores from its snapshot.
func TestClaim_FencesFormerOwner(t *testing.T) {
	r, _, ctx := setUpRunner(t, 1)
	p := r.parts[0]
	now := time.Now()
	a, err := p.claim(ctx, "pin-a", now)
	if err != nil {
		t.Fatal(err)
	}
	defer a.eng.Stop()
	b, err := p.claim(ctx, "pin-b", now)
	if err != nil {
		t.Fatal(err)
	}
	defer b.eng.Stop()
	if a.epoch != 1 || b.epoch != 2 {
		t.Fatalf("epochs %d, %d; want 1, 2", a.epoch, b.epoch)
	}
	if err := a.ckpt.Save(ctx, checkpoint.Plan{}, 7, [][]byte{[]byte("stale")}, time.Now()); !errors.Is(err, errFenced) || !a.fenced.Load() {
		t.Fatalf("former owner's checkpoint: err %v, fenced %v; want errFenced and fenced", err, a.fenced.Load())
	}
	done := make(chan struct{})
	if !b.checkpoint(func() { close(done) }) {
		t.Fatal("checkpoint not started")
	}
	<-done
	rec := readRecord(t, r, p)
	if rec.Epoch != 2 || rec.Pin != "pin-b" || rec.Object == "" {
		t.Fatalf("record %+v; want epoch 2, pin-b, a snapshot", rec)
	}
	c, err := p.claim(ctx, "pin-c", now)
	if err != nil {
		t.Fatalf("claim from b's snapshot: %v", err)
	}
	c.eng.Stop()
	if c.epoch != 3 || c.object != rec.Object {
		t.Fatalf("third claim: epoch %d object %q; want 3, %q", c.epoch, c.object, rec.Object)
	}
}

// TestPausedOwner_IsFenced pauses a partition's owner (its pull loop and
// its sink, as SIGSTOP would) past the pin TTL: the standby instance takes
// over, and the resumed owner publishes nothing more and records nothing,
// while the results stream equals the replay of the partition.
func TestPausedOwner_IsFenced(t *testing.T) {
	ns := testenv.StartNATS(t)
	cfg := testConfig(t, ns.URL(), 1)
	var paused atomic.Bool
	resumed := make(chan struct{})
	var resumeOnce sync.Once
	resume := func() { resumeOnce.Do(func() { close(resumed) }) }
	hold := func(int) {
		if paused.Load() {
			<-resumed
		}
	}
	a := startInstance(t, cfg, ns.Connect(t), "a", hold)
	t.Cleanup(resume) // before a's Stop (cleanups run last first): a failed test must not leave a paused
	testenv.WaitFor(t, 30*time.Second, "a ready", a.r.Ready)
	msgs := onePartitionFleet(40, 20*time.Minute, 3)
	pub := ns.Connect(t)
	half := len(msgs) / 2
	publishFleet(t, pub, msgs[:half], 20000, nil)
	last := lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, 30*time.Second, "a owns and applied the first half", func() bool { return caughtUp(last, statuses(a)...) })
	b := startInstance(t, cfg, ns.Connect(t), "b", nil)
	testenv.WaitFor(t, 30*time.Second, "b ready", b.r.Ready)

	paused.Store(true)
	pausedAt := time.Now()
	publishFleet(t, pub, msgs[half:], 20000, nil)
	last = lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, 30*time.Second, "b took over, applied everything and recorded it", func() bool { return settled(last, statuses(b)...) })
	t.Logf("takeover %v after the pause (pin ttl %v)", time.Since(pausedAt).Round(time.Millisecond), cfg.JetStream.PinTTL)
	before := a.r.Results().Published
	resume()
	testenv.WaitFor(t, 10*time.Second, "a gives the partition up", func() bool { return !a.r.Status()[0].Owned })
	time.Sleep(2 * cfg.JetStream.PinTTL) // room for anything a would still send
	if after := a.r.Results().Published; after != before {
		t.Errorf("the paused owner published %d results after it resumed", after-before)
	}
	sa := a.r.Status()[0]
	t.Logf("a after resuming: lost %d, dropped %d results; b: epoch %d", sa.Fenced, sa.Dropped, b.r.Status()[0].Epoch)
	if sa.Fenced == 0 {
		t.Error("the paused owner's term did not end")
	}
	e, err := jetstreamKV(t, pub, cfg).Get(context.Background(), "p0")
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	_ = json.Unmarshal(e.Value(), &rec)
	if rec.Owner != "b" {
		t.Errorf("checkpoint record %+v; want b's", rec)
	}
	b.Stop()
	a.Stop()
	equalsReplay(t, ns.URL(), cfg)
}

// TestClaim_RestoresTheDeltaChain: an owner records a whole snapshot,
// then incremental ones on it, the last two at one sequence; the checkpoint record lists the chain, and
// the next owner restores it to the last delta's sequence with every
// courier. A whole snapshot then deletes the chain's objects.
func TestClaim_RestoresTheDeltaChain(t *testing.T) {
	r, _, ctx := setUpRunner(t, 1)
	p := r.parts[0]
	a, err := p.claim(ctx, "pin-a", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer a.eng.Stop()
	seq, ts := uint64(0), time.Now().Add(-time.Hour)
	feed := func(n int) {
		for range n {
			seq++
			ts = ts.Add(time.Second)
			c := fmt.Sprintf("c%d", seq%7)
			a.apply("part.girona.0."+c, nil, fmt.Appendf(nil, `{"courier":%q,"lat":41.98,"lon":%f,"timestamp_ms":%d}`, c, 2.82+float64(seq)*1e-4, ts.UnixMilli()), seq, ts)
		}
	}
	record := func() record {
		t.Helper()
		done := make(chan struct{})
		if !a.checkpoint(func() { close(done) }) {
			t.Fatal("checkpoint not started")
		}
		<-done
		return readRecord(t, r, p)
	}
	feed(50)
	whole := record()
	feed(20)
	record()
	feed(20)
	record()
	// Nothing applied since: a checkpoint at the same sequence must not
	// overwrite the delta the record names.
	rec := record()
	if len(rec.Deltas) != 3 || rec.Deltas[1].Object == rec.Deltas[2].Object {
		t.Fatalf("record %+v; want three deltas, the last two at 90 in objects of their own", rec)
	}
	if len(rec.Deltas) != 3 || rec.Object != whole.Object || rec.WholeSeq != 50 || rec.Seq != 90 || rec.Deltas[1].Seq != 90 {
		t.Fatalf("record %+v; want the whole snapshot at 50 and deltas to 70, 90 and 90", rec)
	}
	b, err := p.claim(ctx, "pin-b", time.Now())
	if err != nil {
		t.Fatalf("claim from the chain: %v", err)
	}
	defer b.eng.Stop()
	if b.last != 90 || b.eng.Stats().Couriers != a.eng.Stats().Couriers {
		t.Fatalf("restored to %d with %d couriers; want 90 and %d", b.last, b.eng.Stats().Couriers, a.eng.Stats().Couriers)
	}
	// b's first snapshot is whole and the chain's objects go.
	done := make(chan struct{})
	if !b.checkpoint(func() { close(done) }) {
		t.Fatal("checkpoint not started")
	}
	<-done
	for _, name := range []string{rec.Object, rec.Deltas[0].Object, rec.Deltas[1].Object, rec.Deltas[2].Object} {
		if _, err := r.store.obs.GetInfo(ctx, name); err == nil {
			t.Errorf("object %s still stored after a whole snapshot", name)
		}
	}
}

// readRecord reads partition p's checkpoint record.
func readRecord(t *testing.T, r *Runner, p *part) record {
	t.Helper()
	e, err := r.store.kv.Get(context.Background(), p.key)
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}
