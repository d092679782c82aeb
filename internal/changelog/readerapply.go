package changelog

// Writing fetched changelog records into their stores, each write with its
// position, and waiting out a full disk.

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/statestore"
)

type batch struct {
	st   *partState
	recs []*kgo.Record
	hwm  int64
}

// apply starts writing fetched records to their stores, partition by
// partition, as a round (see startRound). The caller holds pollMu and has
// waited for the previous round.
func (r *Reader) apply(fetches kgo.Fetches, epoch uint64) []Completed {
	var done []Completed
	var batches []*batch
	byTP := make(map[TopicPartition]*batch)

	var losses []lost
	var logs heldLines
	r.mu.Lock()
	var reseek []*partState
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		st := r.parts[TopicPartition{p.Topic, p.Partition}]
		if st == nil || st.consumedAt == 0 {
			return // unregistered since the fetch; nothing to apply to
		}
		if st.consumedAt > epoch {
			// Taken from a consumption that predates this
			// registration (or its re-seek): neither its records nor
			// its error are this registration's.
			if len(p.Records) > 0 {
				reseek = append(reseek, st)
			}
			return
		}
		if p.Err != nil {
			var loss *kgo.ErrDataLoss
			if errors.As(p.Err, &loss) || errors.Is(p.Err, kerr.OffsetOutOfRange) {
				// The log moved away under the position: records were
				// deleted before they were read, or the log was cut
				// back or replaced after they were. Stop; the store is
				// reset below and read again from the start. Stopping
				// voids anything else taken for st in this round.
				r.stopLocked(st)
				start, end := int64(-1), int64(-1)
				if loss == nil {
					start, end = p.LogStartOffset, p.HighWatermark
				}
				losses = append(losses, lost{st, p.Err, start, end})
				return
			}
			// Dropping st also voids any batch already gathered for it:
			// applyBatch skips partitions no longer registered.
			done = append(done, r.completeLocked(st, fmt.Errorf("changelog: fetching %s[%d]: %w", p.Topic, p.Partition, p.Err), &logs))
			return
		}
		b := byTP[st.tp]
		if b == nil {
			b = &batch{st: st, hwm: -1}
			byTP[st.tp] = b
			batches = append(batches, b)
		}
		b.recs = append(b.recs, p.Records...)
		hwm := p.HighWatermark
		if r.cfg.ReadCommitted {
			hwm = p.LastStableOffset
		}
		b.hwm = max(b.hwm, hwm)
	})
	// A partition stopped by a later fetch's loss must not get the records
	// an earlier fetch of this round held: they would land after the reset.
	kept := batches[:0]
	for _, b := range batches {
		if b.st.consumedAt != 0 {
			kept = append(kept, b)
		}
	}
	batches = kept
	for _, st := range reseek {
		// These records may predate the current registration; drop them
		// and fetch again from the position we trust.
		if r.parts[st.tp] == st && st.consumedAt != 0 {
			r.cl.RemoveConsumePartitions(map[string][]int32{st.tp.Topic: {st.tp.Partition}})
			r.consumeLocked(st, st.pos)
		}
	}
	r.mu.Unlock()
	logs.write(r.log)

	// A lost partition's batches were dropped above, so its reset need
	// not wait for the others' writes; it goes first, as nothing else
	// writes while it runs.
	done = append(done, r.resetLost(losses)...)
	r.startRound(batches)
	return done
}

// lost is a partition whose changelog moved away under its position while
// it was fetched: err is the fetch's, start and end the log's (-1 if
// unknown).
type lost struct {
	st         *partState
	err        error
	start, end int64
}

// resetLost resets the stores of losses, stopped already, and has each
// listed again to be read from the start of its log.
func (r *Reader) resetLost(losses []lost) []Completed {
	var done []Completed
	for _, l := range losses {
		var logs heldLines
		failed, ready := r.resetStore(l.st, "the changelog no longer holds the position: "+l.err.Error(), l.start, l.end, &logs)
		logs.write(r.log)
		if failed != nil {
			done = append(done, *failed)
		}
		if ready {
			// Listed again at the next Poll, which starts it from the
			// start of the log as it is now.
			r.mu.Lock()
			if r.parts[l.st.tp] == l.st {
				l.st.needOffs = true
				l.st.retryAt = time.Time{}
			}
			r.mu.Unlock()
		}
	}
	return done
}

// applyBatch writes b's records in order, in writes of at most
// MaxBatchRecords records, each with its position. Its log lines go to
// logs, to be written once st.applyMu is released.
func (r *Reader) applyBatch(b *batch, logs *heldLines) (Completed, bool) {
	st := b.st
	st.applyMu.Lock()
	defer st.applyMu.Unlock()
	recs := b.recs
	for {
		// Unregister drops st from the map before waiting on applyMu,
		// so checking here, under applyMu, means a write never starts
		// after Unregister has returned.
		r.mu.Lock()
		live := r.parts[st.tp] == st
		r.mu.Unlock()
		if !live {
			return Completed{}, false
		}
		// Only this partition's writes change pos, one at a time, and
		// this goroutine makes them: no lock needed to read it.
		w := r.nextWrite(recs, st.pos)
		recs = recs[w.taken:]
		var werr error
		if w.last >= 0 {
			werr = r.writeWaitingForSpace(st, w.entries, w.last+1)
		}

		r.mu.Lock()
		if werr != nil {
			defer r.mu.Unlock()
			if r.parts[st.tp] != st {
				return Completed{}, false
			}
			where := ""
			if ee := (*statestore.EntryError)(nil); errors.As(werr, &ee) && ee.Index < len(w.offsets) {
				where = fmt.Sprintf(" (the record at offset %d cannot be stored)", w.offsets[ee.Index])
			}
			return r.completeLocked(st, fmt.Errorf("changelog: writing %d records from %s[%d] to store%s: %w",
				len(w.entries), st.tp.Topic, st.tp.Partition, where, werr), logs), true
		}
		if w.last >= 0 {
			st.pos = w.last + 1
			st.restored += int64(len(w.entries))
		}
		if r.parts[st.tp] != st {
			r.mu.Unlock()
			return Completed{}, false // unregistered during the write
		}
		if st.rebuilding && st.target >= 0 && st.pos >= st.target {
			st.rebuilding = false
			logs.add(slog.LevelInfo, "changelog store rebuilt: consistent from here on", logAttrs(st, slog.Int64("position", st.pos))...)
		}
		if len(w.applied) > 0 {
			// After the position is in and outside mu: a live query
			// that missed these records sees a position past them.
			r.mu.Unlock()
			r.cfg.Applied(st.tp.Topic, st.tp.Partition, w.applied)
			r.mu.Lock()
			if r.parts[st.tp] != st {
				r.mu.Unlock()
				return Completed{}, false
			}
		}
		if len(recs) > 0 {
			r.mu.Unlock()
			continue
		}
		defer r.mu.Unlock()
		if st.reg.Mode == Follow {
			st.end = max(st.end, b.hwm)
			return Completed{}, false
		}
		if st.pos >= st.end {
			return r.completeLocked(st, nil, logs), true
		}
		return Completed{}, false
	}
}

// storeWrite is one store write of a batch.
type storeWrite struct {
	entries []statestore.Entry
	// offsets are the entries' offsets, to name a record the store
	// refuses.
	offsets []int64
	// applied are the entries' records for ReaderConfig.Applied; nil
	// without it.
	applied []*kgo.Record
	// last is the offset of the last record taken at or past the
	// position, -1 if there is none: the write moves the position past it.
	last int64
	// taken counts the records of the batch the write used up.
	taken int
}

// nextWrite takes the next store write from recs, the rest of a batch: up
// to MaxBatchRecords records, of which those below pos are already applied
// and transaction markers move the position without holding data.
func (r *Reader) nextWrite(recs []*kgo.Record, pos int64) storeWrite {
	n := min(len(recs), r.cfg.MaxBatchRecords)
	w := storeWrite{
		entries: make([]statestore.Entry, 0, n),
		offsets: make([]int64, 0, n),
		last:    -1,
	}
	if r.cfg.Applied != nil {
		w.applied = make([]*kgo.Record, 0, n)
	}
	for _, rec := range recs {
		if w.taken == r.cfg.MaxBatchRecords {
			break
		}
		w.taken++
		if rec.Offset < pos {
			continue // already applied
		}
		w.last = rec.Offset
		if rec.Attrs.IsControl() {
			continue // a transaction marker: moves the position, holds no data
		}
		w.entries = append(w.entries, entryOf(rec))
		w.offsets = append(w.offsets, rec.Offset)
		if w.applied != nil {
			w.applied = append(w.applied, rec)
		}
	}
	return w
}

// A store write refused for a full disk is retried after diskFullFirstWait,
// doubling up to diskFullMaxWait (kept short so that Close and Unregister,
// which wait for the write, are not held long), and logged at most once per
// diskFullLogEvery.
const (
	diskFullFirstWait = 100 * time.Millisecond
	diskFullMaxWait   = time.Second
	diskFullLogEvery  = 30 * time.Second
)

// writeWaitingForSpace writes entries into st's store at position pos, and
// writes them again for as long as the store refuses them for a full disk,
// the partition is registered and the reader open. A refusal for a full
// disk leaves the store unchanged (statestore.ErrDiskFull), so the same
// write is simply tried again; failing instead would stop a standby
// following its changelog for good, or fail the restoration of an active
// task, and with it its stream thread, for a condition that passes once
// space is freed.
func (r *Reader) writeWaitingForSpace(st *partState, entries []statestore.Entry, pos int64) error {
	if len(entries) > 0 {
		// Before every write, as a Reset in between gives the store a
		// new filter.
		statestore.Restoring(st.reg.Store)
	}
	wait := diskFullFirstWait
	var since, logged time.Time
	for attempt := 1; ; attempt++ {
		err := st.reg.Store.Write(entries, pos)
		if err == nil || !errors.Is(err, statestore.ErrDiskFull) {
			if err == nil && attempt > 1 {
				r.log.Info("disk space freed; changelog records stored", logAttrs(st, slog.Duration("waited", time.Since(since).Round(time.Millisecond)))...)
			}
			return err
		}
		r.mu.Lock()
		live := r.parts[st.tp] == st && !r.closed
		r.mu.Unlock()
		if !live {
			return err
		}
		now := time.Now()
		if attempt == 1 {
			since = now
		}
		if now.Sub(logged) >= diskFullLogEvery {
			logged = now
			r.log.Error("disk full: changelog records cannot enter their store; the write is retried until space is freed",
				logAttrs(st, slog.Any("error", err), slog.Duration("waited", now.Sub(since).Round(time.Millisecond)))...)
		}
		time.Sleep(wait)
		wait = min(2*wait, diskFullMaxWait)
	}
}
