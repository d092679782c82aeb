package changelog

// Writing fetched changelog records into their stores, each write with its
// position, and waiting out a full disk.

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/eddystreams/eddy/internal/heldlog"

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
	var logs heldlog.Lines
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
	logs.Write(r.log)

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
		var logs heldlog.Lines
		failed, ready := r.resetStore(l.st, "the changelog no longer holds the position: "+l.err.Error(), l.start, l.end, &logs)
		logs.Write(r.log)
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
// MaxBatchRecords records, each with its position. Each write holds
// st.applyMu, released between writes, and while a full disk is waited
// out, so that neither Unregister nor a log line waits on the other.
func (r *Reader) applyBatch(b *batch) (Completed, bool) {
	recs := b.recs
	var full diskFullWait
	for {
		var logs heldlog.Lines
		res := r.applyWrite(b, recs, &full, &logs)
		logs.Write(r.log)
		switch res.step {
		case stepNext:
			recs = recs[res.taken:]
		case stepRetry:
			full.sleep()
		case stepOver:
			return res.done, res.finished
		}
	}
}

// batchStep is what a batch has left to do after one of its writes.
type batchStep int

const (
	// stepNext: the write is in; the batch goes on past the records it
	// took.
	stepNext batchStep = iota
	// stepRetry: the store refused the write for a full disk and is
	// unchanged; the same write is tried again after a wait.
	stepRetry
	// stepOver: the batch is written, or its partition is no longer
	// registered (unregistered, or completed by this write).
	stepOver
)

// writeResult is the outcome of one write of a batch: what is left to do,
// how many of the batch's records the write took (stepNext), and the
// partition's completion if the write finished it.
type writeResult struct {
	step     batchStep
	taken    int
	done     Completed
	finished bool
}

// applyWrite makes the next store write of b, whose records left are recs,
// under st.applyMu. Its log lines go to logs.
func (r *Reader) applyWrite(b *batch, recs []*kgo.Record, full *diskFullWait, logs *heldlog.Lines) writeResult {
	st := b.st
	st.applyMu.Lock()
	defer st.applyMu.Unlock()
	// Unregister drops st from the map before waiting on applyMu, so
	// checking here, under applyMu, means a write never starts after
	// Unregister has returned.
	r.mu.Lock()
	live := r.parts[st.tp] == st
	r.mu.Unlock()
	if !live {
		return writeResult{step: stepOver}
	}
	// Only this partition's writes change pos, one at a time, and this
	// goroutine makes them: no lock needed to read it.
	w := r.nextWrite(recs, st.pos)
	var werr error
	if w.last >= 0 {
		if len(w.entries) > 0 {
			// Before every write, as a Reset in between gives the
			// store a new filter.
			statestore.Restoring(st.reg.Store)
		}
		werr = st.reg.Store.Write(w.entries, w.last+1)
		switch {
		case werr == nil:
			full.stored(st, logs)
		case errors.Is(werr, statestore.ErrDiskFull):
			r.mu.Lock()
			live := r.parts[st.tp] == st && !r.closed
			r.mu.Unlock()
			if live {
				full.refused(st, werr, logs)
				return writeResult{step: stepRetry}
			}
		}
	}

	r.mu.Lock()
	if werr != nil {
		defer r.mu.Unlock()
		if r.parts[st.tp] != st {
			return writeResult{step: stepOver}
		}
		where := ""
		if ee := (*statestore.EntryError)(nil); errors.As(werr, &ee) && ee.Index < len(w.offsets) {
			where = fmt.Sprintf(" (the record at offset %d cannot be stored)", w.offsets[ee.Index])
		}
		c := r.completeLocked(st, fmt.Errorf("changelog: writing %d records from %s[%d] to store%s: %w",
			len(w.entries), st.tp.Topic, st.tp.Partition, where, werr), logs)
		return writeResult{step: stepOver, done: c, finished: true}
	}
	if w.last >= 0 {
		st.pos = w.last + 1
		st.restored += int64(len(w.entries))
	}
	if r.parts[st.tp] != st {
		r.mu.Unlock()
		return writeResult{step: stepOver} // unregistered during the write
	}
	if st.rebuilding && st.target >= 0 && st.pos >= st.target {
		st.rebuilding = false
		logs.Add(slog.LevelInfo, "changelog store rebuilt: consistent from here on", logAttrs(st, slog.Int64("position", st.pos))...)
	}
	if len(w.applied) > 0 {
		// After the position is in and outside mu: a live query that
		// missed these records sees a position past them.
		r.mu.Unlock()
		r.cfg.Applied(st.tp.Topic, st.tp.Partition, w.applied)
		r.mu.Lock()
		if r.parts[st.tp] != st {
			r.mu.Unlock()
			return writeResult{step: stepOver}
		}
	}
	defer r.mu.Unlock()
	if w.taken < len(recs) {
		return writeResult{step: stepNext, taken: w.taken}
	}
	if st.reg.Mode == Follow {
		st.end = max(st.end, b.hwm)
		return writeResult{step: stepOver}
	}
	if st.pos >= st.end {
		return writeResult{step: stepOver, done: r.completeLocked(st, nil, logs), finished: true}
	}
	return writeResult{step: stepOver}
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
// doubling up to diskFullMaxWait, and logged at most once per
// diskFullLogEvery.
const (
	diskFullFirstWait = 100 * time.Millisecond
	diskFullMaxWait   = time.Second
	diskFullLogEvery  = 30 * time.Second
)

// diskFullWait is a batch's waiting out of a full disk. A refusal for a
// full disk leaves the store unchanged (statestore.ErrDiskFull), so the
// same write is simply tried again for as long as the partition is
// registered and the reader open; failing instead would stop a standby
// following its changelog for good, or fail the restoration of an active
// task, and with it its stream thread, for a condition that passes once
// space is freed.
type diskFullWait struct {
	since  time.Time // of the first refusal of the write; zero if none
	logged time.Time
	wait   time.Duration
}

// refused notes a refusal of st's write for a full disk.
func (d *diskFullWait) refused(st *partState, err error, logs *heldlog.Lines) {
	now := time.Now()
	if d.since.IsZero() {
		d.since, d.wait = now, diskFullFirstWait
	}
	if now.Sub(d.logged) >= diskFullLogEvery {
		d.logged = now
		logs.Add(slog.LevelError, "disk full: changelog records cannot enter their store; the write is retried until space is freed",
			logAttrs(st, slog.Any("error", err), slog.Duration("waited", now.Sub(d.since).Round(time.Millisecond)))...)
	}
}

// sleep waits before the refused write is tried again, each wait twice the
// last up to diskFullMaxWait (short, so that Close, which waits for the
// batch, is not held long).
func (d *diskFullWait) sleep() {
	time.Sleep(d.wait)
	d.wait = min(2*d.wait, diskFullMaxWait)
}

// stored notes that st's write went in, after refusals or not.
func (d *diskFullWait) stored(st *partState, logs *heldlog.Lines) {
	if d.since.IsZero() {
		return
	}
	logs.Add(slog.LevelInfo, "disk space freed; changelog records stored",
		logAttrs(st, slog.Duration("waited", time.Since(d.since).Round(time.Millisecond)))...)
	*d = diskFullWait{}
}
