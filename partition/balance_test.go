package partition

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/testenv"
)

// TestBalance_JoinAndLeaveUnderLoad: one instance owns all six partitions;
// a second, a third and a fourth join while the fleet publishes, and each
// time the partitions spread within one of each other in 2 × pin_ttl (plus
// slack for a busy machine), also when they do not divide evenly (6 on 4:
// 2, 2, 1, 1); the second leaves gracefully and the three left share them
// again. Nothing is lost or doubled by the hand-overs: the
// results stream equals the per-partition replay, once per key.
func TestBalance_JoinAndLeaveUnderLoad(t *testing.T) {
	const partitions = 6
	ns := testenv.StartNATSWithMappings(t, mapping(partitions))
	cfg := testConfig(t, ns.URL(), partitions)
	pinTTL := cfg.JetStream.PinTTL
	a := startInstance(t, cfg, ns.Connect(t), "a", nil)
	testenv.WaitFor(t, 30*time.Second, "a ready", a.r.Ready)

	msgs := testenv.FleetMessages("girona", 120, 12*time.Minute, 3, time.Now())
	pub := ns.Connect(t)
	published := make(chan struct{})
	go func() {
		defer close(published)
		publishFleet(t, pub, msgs, 500, nil)
	}()
	spread := func(what string, want []int, ins ...*instance) {
		t.Helper()
		start := time.Now()
		// 2 × pin_ttl, and as much again for a loaded 2-core machine.
		testenv.WaitFor(t, 4*pinTTL+5*time.Second, what, func() bool {
			total, lo, hi := 0, partitions, 0
			for _, in := range ins {
				n := ownedBy(in)
				total += n
				lo, hi = min(lo, n), max(hi, n)
			}
			return total == partitions && hi-lo <= 1 && hi == want[0] && lo == want[len(want)-1]
		})
		var owned []string
		for _, in := range ins {
			owned = append(owned, fmt.Sprintf("%s %d", in.r.Instance(), ownedBy(in)))
		}
		t.Logf("%s after %v: %v", what, time.Since(start).Round(10*time.Millisecond), owned)
	}
	spread("a owns every partition", []int{6}, a)
	b := startInstance(t, cfg, ns.Connect(t), "b", nil)
	spread("a and b share the partitions", []int{3}, a, b)
	c := startInstance(t, cfg, ns.Connect(t), "c", nil)
	spread("a, b and c share the partitions", []int{2}, a, b, c)
	d := startInstance(t, cfg, ns.Connect(t), "d", nil)
	spread("a, b, c and d share the partitions, 2, 2, 1, 1", []int{2, 1}, a, b, c, d)
	b.Stop()
	spread("a, c and d share the partitions after b left", []int{2}, a, c, d)
	<-published
	last := lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, time.Minute, "every partition applied to its end and recorded", func() bool { return settled(last, statuses(a, c, d)...) })
	a.Stop()
	c.Stop()
	d.Stop()
	t.Logf("%d results, as the replay", equalsReplay(t, ns.URL(), cfg))
}

// TestBalance_IdlePartitionGetsItsNewOwner: the server pins a partition to
// the instance it next delivers a message to, so a partition handed over
// while nothing is published would stay without an owner (without ticks,
// so without the idle rule) until its next position. The hand-over ends
// with a tick: the joining instance owns its share without any position.
func TestBalance_IdlePartitionGetsItsNewOwner(t *testing.T) {
	_, cfg, a, b := idleMarket(t)
	testenv.WaitFor(t, 4*cfg.JetStream.PinTTL+5*time.Second, "one partition each, nothing published", func() bool {
		return ownedBy(a) == 1 && ownedBy(b) == 1
	})
}

// TestBalance_IdlePartitionOfADeadOwnerIsTakenOver kills the owner of two
// idle partitions (everything applied and acked, nothing published after):
// the server pins a partition only when it delivers a message, so the
// survivor, which asks for both, must wake them itself, within a few
// pin_ttl.
func TestBalance_IdlePartitionOfADeadOwnerIsTakenOver(t *testing.T) {
	ns, cfg, a, b := idleMarket(t)
	partitions := cfg.JetStream.Partitions
	a.Kill()
	testenv.WaitFor(t, 5*cfg.JetStream.PinTTL+10*time.Second, "b owns both partitions, nothing published", func() bool {
		return ownedBy(b) == partitions
	})
	for n := range partitions {
		wakes := 0
		for _, m := range testenv.ReadStored(t, ns.URL(), cfg.JetStream.Stream, cfg.JetStream.PartitionSubject(n)) {
			if kindOf(m.Subject, m.Header) == msgWake {
				wakes++
			}
		}
		if wakes == 0 {
			t.Errorf("partition %d: taken over without a wake-up in its stream", n)
		}
	}
}

// idleMarket is a market of two partitions whose fleet has stopped: a
// owns both and recorded everything, then b joins.
func idleMarket(t *testing.T) (ns *testenv.Cluster, cfg config.Config, a, b *instance) {
	const partitions = 2
	ns = testenv.StartNATSWithMappings(t, mapping(partitions))
	cfg = testConfig(t, ns.URL(), partitions)
	a = startInstance(t, cfg, ns.Connect(t), "a", nil)
	testenv.WaitFor(t, 30*time.Second, "a ready", a.r.Ready)
	pub := ns.Connect(t)
	publishFleet(t, pub, testenv.FleetMessages("girona", 20, time.Minute, 3, time.Now()), 2000, nil)
	last := lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, 30*time.Second, "a owns both partitions and recorded them", func() bool { return settled(last, statuses(a)...) })
	b = startInstance(t, cfg, ns.Connect(t), "b", nil)
	testenv.WaitFor(t, 30*time.Second, "b ready", b.r.Ready)
	return ns, cfg, a, b
}

// An instance counts the others from a watch of their heartbeats: one
// joining or leaving changes its share at once, not at its next
// heartbeat (pin_ttl/4, here 10 s); a heartbeat older than pin_ttl is
// not counted.
func TestBalance_CountsTheOthersAsTheyComeAndGo(t *testing.T) {
	r, _, ctx := setUpRunner(t, 6)
	r.cfg.JetStream.PinTTL = 40 * time.Second
	bctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.balance(bctx); close(done) }()
	defer func() { stop(); <-done }()
	share := func(want int64, what string) {
		t.Helper()
		start := time.Now()
		testenv.WaitFor(t, 20*time.Second, what, func() bool { return r.shares.counted.Load() == want })
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: share %d after %v, want well under a heartbeat (10 s)", what, want, took)
		}
	}
	share(6, "alone")
	put := func(inst string, at time.Time) {
		t.Helper()
		val := mustJSON(heartbeat{Instance: inst, AtMs: at.UnixMilli()})
		if _, err := r.members.Put(ctx, memberKey(inst), val); err != nil {
			t.Fatal(err)
		}
	}
	put("old", time.Now().Add(-time.Hour))
	put("b", time.Now())
	share(3, "one more instance")
	put("c", time.Now())
	share(2, "two more")
	if err := r.members.Delete(ctx, memberKey("b")); err != nil {
		t.Fatal(err)
	}
	share(3, "one of them left")
}
