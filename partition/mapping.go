package partition

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// mappingEvery is how often an instance looks for positions outside its
// partitions.
const mappingEvery = time.Minute

// watchMapping looks, at start and every mappingEvery until ctx ends,
// for positions on the subject of partition jetstream.partitions, one past
// the last: the server's mapping then has more partitions than the
// configuration, and every courier it puts there is read by nobody. A
// mapping with partition(M, …), M > N, sends about 1/M of the couriers to
// partition N, so looking there is enough. It is reported in the log (when
// it starts and when it ends), in /readyz and as
// edgeproc_partition_mapping_mismatch.
func (r *Runner) watchMapping(ctx context.Context) {
	subject := r.cfg.JetStream.PartitionSubject(r.cfg.JetStream.Partitions)
	t := time.NewTicker(mappingEvery)
	defer t.Stop()
	for {
		r.checkMapping(ctx, subject)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Runner) checkMapping(ctx context.Context, subject string) {
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	s, err := r.js.Stream(cctx, r.cfg.JetStream.Stream)
	if err != nil {
		return // the stream is unavailable: the partitions report that
	}
	info, err := s.Info(cctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	var why string
	if n > 0 {
		why = fmt.Sprintf("the positions stream %s holds %d positions on %s, outside jetstream.partitions %d: the server's mapping has more partitions, and nobody reads them",
			r.cfg.JetStream.Stream, n, subject, r.cfg.JetStream.Partitions)
	}
	old := r.mismatch.Swap(&why)
	switch {
	case why != "" && (old == nil || *old == ""):
		r.log.Error("partition mapping disagrees with jetstream.partitions; /readyz fails until it agrees", "subject", subject, "positions", n,
			"partitions", r.cfg.JetStream.Partitions)
	case why == "" && old != nil && *old != "":
		r.log.Info("partition mapping agrees with jetstream.partitions again", "subject", subject)
	}
}
