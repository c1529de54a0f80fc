package partition

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// An instance that does not relay learns what the relay writes in its
// lease record as it is written, not at its next look (pin_ttl/4, here
// 10 s): whether the relay hears is what lets the owners tick (deaf is
// not silent). And it takes a lease that runs out unrenewed at once, not
// up to pin_ttl/4 later.
func TestLease_OthersFollowTheRecordAsItIsWritten(t *testing.T) {
	r, _, ctx := setUpRunner(t, 2)
	kv := r.store.kv
	l := &relayLease{r: r, ttl: 40 * time.Second}
	r.lease = l // testConfig ingests as the gateway: no lease of its own
	write := func(rec leaseRecord) {
		t.Helper()
		if _, err := kv.Put(ctx, relayKey, mustJSON(rec)); err != nil {
			t.Fatal(err)
		}
	}
	write(leaseRecord{Instance: "other", UntilMs: time.Now().Add(time.Hour).UnixMilli(), Hearing: true})
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		l.run(lctx, func() context.Context { return context.Background() })
	})
	defer func() { stop(); wg.Wait() }()
	testenv.WaitFor(t, 5*time.Second, "the relay heard", func() bool { return l.ready() == "" })

	write(leaseRecord{Instance: "other", UntilMs: time.Now().Add(time.Hour).UnixMilli(), Hearing: false})
	start := time.Now()
	testenv.WaitFor(t, 20*time.Second, "the relay's deafness seen", func() bool { return l.ready() != "" })
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the relay's deafness seen after %v, want well under pin_ttl/4 (10 s)", took)
	}

	until := time.Now().Add(1500 * time.Millisecond)
	write(leaseRecord{Instance: "other", UntilMs: until.UnixMilli(), Hearing: true})
	testenv.WaitFor(t, 20*time.Second, "the lease taken", func() bool { return l.terms.Load() > 0 })
	if late := time.Since(until); late > 2*time.Second {
		t.Errorf("the lease taken %v after it ran out, want well under pin_ttl/4 (10 s)", late)
	}
}
