package bridge

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// OpenWithClock is Open with a simulated clock for the KV writer, for
// benchmarks that run a fleet's hours in seconds.
func OpenWithClock(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger, now func() time.Time) (*Bridge, error) {
	return open(ctx, nc, cfg, log, now)
}

// TickKV makes the KV writer act as on a tick of its ticker (applying its
// inbox, writing the urgent states, and scanning for due ones if its clock
// says a scan is due), and waits until it has.
func (b *Bridge) TickKV() { b.tick(false) }

// ScanKV is TickKV with a scan for due states whatever the clock says.
func (b *Bridge) ScanKV() { b.tick(true) }

func (b *Bridge) tick(scan bool) {
	c := b.Couriers
	done := make(chan struct{})
	c.kvTick <- kvTickReq{done: done, scan: scan}
	<-done
}
