package partition

import (
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// TestPartitions_RevisionsEqualReplay: under allowed lateness, the
// partitioned source revises windows exactly as a replay of each
// partition's stream does. The fleet is from the past (the watermark
// follows the positions, not the clock), some positions late by the
// delay profile; an owner hands two of its partitions to a second
// instance halfway, so retained windows and their revision numbers cross
// a checkpoint and a change of owner.
func TestPartitions_RevisionsEqualReplay(t *testing.T) {
	const partitions = 4
	ns := testenv.StartNATSWithMappings(t, mapping(partitions))
	cfg := testConfig(t, ns.URL(), partitions)
	cfg.Windows.AllowedLateness = 2 * time.Minute
	a := startInstance(t, cfg, ns.Connect(t), "a", nil)
	testenv.WaitFor(t, 30*time.Second, "a ready", a.r.Ready)
	msgs := testenv.FleetMessages("girona", 60, 12*time.Minute, 9, time.Now().Add(-13*time.Minute))
	pub := ns.Connect(t)
	half := len(msgs) / 2
	publishFleet(t, pub, msgs[:half], 2000, nil)
	b := startInstance(t, cfg, ns.Connect(t), "b", nil)
	testenv.WaitFor(t, 30*time.Second, "b ready", b.r.Ready)
	// a hands two partitions over; b owns them once their next message
	// is delivered.
	publishFleet(t, pub, msgs[half:], 1000, nil)
	last := lastSeqs(t, pub, cfg)
	testenv.WaitFor(t, time.Minute, "every partition applied and recorded", func() bool { return settled(last, statuses(a, b)...) })
	if ownedBy(b) == 0 {
		t.Fatal("b owns no partition: nothing changed owner")
	}
	a.Stop()
	b.Stop()
	revisions := testenv.Revisions(reference(t, ns.URL(), cfg))
	if revisions == 0 {
		t.Fatal("the replay has no revision: the test proves nothing about them")
	}
	t.Logf("%d results, %d of them revisions, as the replay", equalsReplay(t, ns.URL(), cfg), revisions)
}
