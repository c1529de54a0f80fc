package testenv

import (
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"time"
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
// starting with "kill" keeps its victim down up to 3 s; the others last
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
