package market

import (
	"context"
	"log/slog"
	"time"

	"github.com/km0/edgeproc/internal/backoff"
)

// SetupAttempt bounds one attempt of a set-up step against NATS (a
// stream, a consumer, a bucket). Short: on nats-server 2.15 concurrent
// CreateOrUpdate calls for one new replicated asset (instances starting
// together) may never be answered, and the next attempt finds it created.
const SetupAttempt = 5 * time.Second

// Retry calls attempt, each call bounded by SetupAttempt, until it
// succeeds, ctx ends, or it fails in a way final says no retry can fix;
// between two attempts it waits a capped, jittered doubling delay and
// logs what failed (what: "open the JetStream stream"). It reports
// whether attempt succeeded, and the final error, if any.
func Retry(ctx context.Context, log *slog.Logger, what string, attempt func(context.Context) error, final func(error) bool) (bool, error) {
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, SetupAttempt)
		err := attempt(actx)
		cancel()
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
		if final != nil && final(err) {
			return false, err
		}
		delay := backoff.Delay(n, 250*time.Millisecond, backoff.Reconnect)
		log.Warn("cannot "+what+" yet, retrying", "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(delay):
		}
	}
}
