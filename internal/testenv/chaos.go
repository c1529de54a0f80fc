package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ChaosDuration is how long a seeded fault schedule runs: CHAOS_DURATION
// (a Go duration), default 2 minutes.
func ChaosDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("CHAOS_DURATION")); err == nil && d > 0 {
		return d
	}
	return 2 * time.Minute
}

// ChaosSeed is CHAOS_SEED, or one drawn from the clock (a test prints it:
// the same seed replays the same schedule).
func ChaosSeed() int64 {
	if s, err := strconv.ParseInt(os.Getenv("CHAOS_SEED"), 10, 64); err == nil {
		return s
	}
	return time.Now().UnixNano() % 1_000_000
}

// Fault is one drawn fault: its kind, when it starts (from the start of
// the schedule) and how long it lasts.
type Fault struct {
	Kind      string
	At, Lasts time.Duration
}

func (f Fault) String() string {
	return fmt.Sprintf("%v %s for %v", f.At.Round(100*time.Millisecond), f.Kind, f.Lasts.Round(100*time.Millisecond))
}

// Schedule draws faults of the given kinds at random times over d, one
// at a time: each starts 1-5 s after the previous one ended. A kind
// starting with "kill" keeps its victim down up to 3 s; one starting with
// "net-drop" (packets silently dropped) lasts 3-15 s; one starting with
// "net-cut" (connections reset, new ones refused) 0.5-3 s; the others last
// 1-10 s, one in four longest/2 to longest (longer than gap +
// tolerated_delay and the idle timeout, so that a fault taken for silence
// would show).
func Schedule(rng *rand.Rand, d time.Duration, kinds []string, longest time.Duration) []Fault {
	var out []Fault
	for at := time.Duration(2+rng.Intn(4)) * time.Second; at < d; {
		f := Fault{Kind: kinds[rng.Intn(len(kinds))], At: at}
		switch {
		case strings.HasPrefix(f.Kind, "kill"):
			f.Lasts = time.Duration(rng.Int63n(int64(3 * time.Second)))
		case strings.HasPrefix(f.Kind, "net-drop"):
			f.Lasts = 3*time.Second + time.Duration(rng.Int63n(int64(12*time.Second)))
		case strings.HasPrefix(f.Kind, "net-cut"):
			f.Lasts = 500*time.Millisecond + time.Duration(rng.Int63n(int64(2500*time.Millisecond)))
		case rng.Intn(4) == 0:
			f.Lasts = longest/2 + time.Duration(rng.Int63n(int64(longest/2)))
		default:
			f.Lasts = time.Second + time.Duration(rng.Int63n(int64(9*time.Second)))
		}
		out = append(out, f)
		at += f.Lasts + time.Duration(1+rng.Intn(5))*time.Second
	}
	return out
}

// Plan lists a schedule, a fault a line, for a test's log.
func Plan(faults []Fault) string {
	var b strings.Builder
	for _, f := range faults {
		fmt.Fprintf(&b, "\n  %v", f)
	}
	return b.String()
}

// DeleteStream deletes stream on the server at url, as an operator's
// `nats stream rm` would, and returns every message it held when it went,
// so that a test can still account for what it had stored. So that no
// message is stored between that read and the deletion (and lost unseen),
// the stream is sealed first (no message is stored after; a publish in
// that instant fails and is retried, as any failed publish) and read once
// its last sequence has stopped moving.
func DeleteStream(tb testing.TB, url, stream string) []Stored {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatalf("delete stream %s: connect: %v", stream, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("delete stream %s: %v", stream, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A cluster may still be electing a leader after the previous fault:
	// retry each step until the deadline.
	retry := func(what string, f func(context.Context) error) {
		tb.Helper()
		for {
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			err := f(actx)
			acancel()
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				tb.Fatalf("delete stream %s: %s: %v", stream, what, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	var s jetstream.Stream
	retry("look it up", func(ctx context.Context) (err error) { s, err = js.Stream(ctx, stream); return err })
	retry("seal it", func(ctx context.Context) error {
		cfg := s.CachedInfo().Config
		cfg.Sealed = true
		_, err := js.UpdateStream(ctx, cfg)
		return err
	})
	last := ^uint64(0)
	retry("wait until its last sequence stays", func(ctx context.Context) error {
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if !info.Config.Sealed {
			return errors.New("not sealed yet")
		}
		if info.State.LastSeq != last {
			last = info.State.LastSeq
			return errors.New("last sequence moved")
		}
		return nil
	})
	held := ReadStored(tb, url, stream)
	retry("delete it", func(ctx context.Context) error {
		err := js.DeleteStream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		return err
	})
	return held
}

// WaitStream waits up to d until stream exists on the server at url (the
// code under test recreated it) and reports whether it does.
func WaitStream(tb testing.TB, url, stream string, d time.Duration) bool {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatalf("wait for stream %s: connect: %v", stream, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("wait for stream %s: %v", stream, err)
	}
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.Stream(ctx, stream)
		cancel()
		if err == nil {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// DiffIncarnations compares the results stored by the successive
// incarnations of a results stream (each deleted one's, as DeleteStream
// returned them, then the current one's; each by key) with a reference
// run: want holds its first record of each key, variants every record it
// emitted under each key. Deleting the stream loses what it held, and a
// result re-emitted after the stream was recreated is no longer
// deduplicated against it: so the check is on the union, and as strict
// as DiffResults is for a stream never deleted (with one incarnation it is
// DiffResults exactly). Every key of want must be stored in some
// incarnation and no other key in any; the first copy of a key (in the
// earliest incarnation that holds it) must be want's; a copy of it in a
// later incarnation must be one of the reference's records of the key: a
// re-emission, or the later record of a position sent twice that the
// deleted stream's duplicate window would have dropped. A key twice in
// one incarnation is the caller's to report (the duplicate window failed).
func DiffIncarnations(incs []map[string]string, want map[string]string, variants map[string]map[string]bool, wantName string) []string {
	first := map[string]string{}
	var diffs []string
	for i, inc := range incs {
		for k, v := range inc {
			f, seen := first[k]
			if !seen {
				first[k] = v
				continue
			}
			if _, ok := want[k]; ok && v != f && !variants[k][v] {
				diffs = append(diffs, fmt.Sprintf("stored again in incarnation %d of the stream (after %d deletions) as a record %s never emits: %s\n    first stored %s", i+1, i, wantName, v, f))
			}
		}
	}
	return append(DiffResults(first, want, wantName), diffs...)
}
