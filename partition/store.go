package partition

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/checkpoint"
)

// record is a partition's checkpoint record in the key-value bucket. Every
// owner writes it by compare-and-set on the revision it wrote last, so a
// claim by a new owner (Epoch+1) fences every earlier one.
type record struct {
	// Seq is the stream sequence of the last message the snapshot reflects;
	// the next owner resumes after it. 0: nothing processed yet.
	Seq uint64 `json:"seq"`
	// Object names the snapshot in the object store; empty with Seq 0.
	Object string `json:"object,omitempty"`
	// Deltas are the incremental snapshots that build on Object, in
	// order, the last one at Seq; WholeSeq is then Object's sequence.
	Deltas   []deltaRef `json:"deltas,omitempty"`
	WholeSeq uint64     `json:"whole_seq,omitempty"`
	Epoch    uint64     `json:"epoch"`
	Owner    string     `json:"owner"`
	Pin      string     `json:"pin"`
	AtMs     int64      `json:"at_ms"` // wall clock of the write, for operators
}

// deltaRef is an incremental snapshot in the object store.
type deltaRef struct {
	Object string `json:"object"`
	Seq    uint64 `json:"seq"`
}

// store holds the partitions' recovery points in JetStream: per
// partition a checkpoint record in a key-value bucket (which snapshot,
// at which stream sequence, written by which owner and epoch) and the
// snapshots it names in an object store. Every record write is a
// compare-and-set on the revision its writer read or wrote last, which
// is what fences a former owner (term.go).
type store struct {
	kv   jetstream.KeyValue
	obs  jetstream.ObjectStore
	inst string // this instance, recorded as the owner
	log  *slog.Logger
}

// claimAttempts bounds the compare-and-set retries of a claim racing a
// former owner's last checkpoint.
const claimAttempts = 5

// claim reads key's record and writes it back with the next epoch, this
// instance as owner and pin, by compare-and-set (a concurrent checkpoint
// of the former owner makes it start over from that one). It returns the
// record as claimed and its revision.
func (s *store) claim(ctx context.Context, key, pin string) (record, uint64, error) {
	for attempt := 0; ; attempt++ {
		var rec record
		var rev uint64
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return record{}, 0, fmt.Errorf("read checkpoint record %s: %w", key, err)
		default:
			if err := json.Unmarshal(e.Value(), &rec); err != nil {
				return record{}, 0, fmt.Errorf("checkpoint record %s: %w", key, err)
			}
			rev = e.Revision()
		}
		rec.Epoch++
		rec.Owner, rec.Pin, rec.AtMs = s.inst, pin, time.Now().UnixMilli()
		val, _ := json.Marshal(rec)
		newRev, err := s.kv.Update(ctx, key, val, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) && attempt < claimAttempts {
			continue
		}
		if err != nil {
			return record{}, 0, fmt.Errorf("claim checkpoint record %s: %w", key, err)
		}
		return rec, newRev, nil
	}
}

// point reads the snapshots rec names: the whole one and its chain of
// incremental ones, the chain ending before the first unreadable one
// (the stream holds what came after it). ok is false when rec names none.
func (s *store) point(ctx context.Context, partition int, rec record) (checkpoint.Point, bool, error) {
	if rec.Object == "" {
		return checkpoint.Point{}, false, nil
	}
	snap, err := s.obs.GetBytes(ctx, rec.Object)
	if err != nil {
		return checkpoint.Point{}, false, fmt.Errorf("read snapshot %s: %w", rec.Object, err)
	}
	pt := checkpoint.Point{Tag: rec.Seq, Snapshot: snap, Name: rec.Object}
	if len(rec.Deltas) > 0 {
		pt.Tag = rec.WholeSeq
	}
	for _, d := range rec.Deltas {
		b, err := s.obs.GetBytes(ctx, d.Object)
		if err != nil {
			s.log.Warn("incremental snapshot unreadable; restoring the ones before it and reading the stream from there",
				"partition", partition, "snapshot", d.Object, "err", err)
			break
		}
		pt.Deltas, pt.Tag = append(pt.Deltas, b), d.Seq
	}
	if len(pt.Deltas) > 0 {
		pt.Name = fmt.Sprintf("%s and %d incremental snapshots to %d", rec.Object, len(pt.Deltas), pt.Tag)
	}
	return pt, true, nil
}

// put stores snap as object name, then writes rec (owner and time filled
// in) as key's record by compare-and-set on rev. On failure the object
// goes; a revision mismatch (another instance claimed the partition)
// returns errFenced. It returns the record's new revision and the
// snapshot's size.
func (s *store) put(ctx context.Context, key, name string, snap [][]byte, rec record, rev uint64) (uint64, int64, error) {
	info, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: name}, parts(snap))
	if err != nil {
		return 0, 0, fmt.Errorf("store snapshot %s: %w", name, err)
	}
	rec.Owner, rec.AtMs = s.inst, time.Now().UnixMilli()
	val, _ := json.Marshal(rec)
	newRev, err := s.kv.Update(ctx, key, val, rev)
	if err != nil {
		s.drop(ctx, name)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, 0, errFenced
		}
		return 0, 0, fmt.Errorf("update checkpoint record %s: %w", key, err)
	}
	return newRev, int64(info.Size), nil
}

// drop deletes a snapshot no record names any more; one left behind only
// takes room.
func (s *store) drop(ctx context.Context, name string) { _ = s.obs.Delete(ctx, name) }

// parts reads a snapshot's parts in turn, so that it goes to the object
// store without being copied whole.
func parts(snap [][]byte) io.Reader {
	rs := make([]io.Reader, len(snap))
	for i, p := range snap {
		rs[i] = bytes.NewReader(p)
	}
	return io.MultiReader(rs...)
}
