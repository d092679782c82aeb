package changelog

// A Reader's round: one Poll, its fetch overlapping the previous round's
// store writes, and the periodic confirmation of the changelogs' ends.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Poll does one round of reading: it lists end offsets for newly
// registered partitions, waits for fetched records (until some arrive, ctx
// ends, or a Register or Unregister interrupts the wait), and applies
// them, each partition's in store writes of at most MaxBatchRecords. It
// takes MaxBatchRecords records, or all the client holds if that is at
// most four times as many (see takeSize). It returns the partitions
// finished since the last call. Concurrent calls are
// serialized; one polling goroutine is the intended use.
//
// The writes of a round go on after Poll returns, on a goroutine of their
// own, so that the next round's fetch overlaps them; the next Poll waits
// for them before it writes, and reports what they finished. A store is
// therefore written by one round at a time, each partition's batches in
// order, and no batch is written after an earlier one of its partition
// failed. Unregister, Release and Close wait for a write under way, and
// Poll waits for its round before it returns an error.
//
// Poll returns ctx's error when ctx ends, and ErrClosed once the Reader is
// closed; records fetched before either are still applied.
func (r *Reader) Poll(ctx context.Context) ([]Completed, error) {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()

	done, retryPending := r.listPending(ctx)
	r.confirmEnds(ctx)

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return append(done, r.waitRound()...), ErrClosed
	}
	// Records taken from the client belong to the registration that was
	// consuming when they were taken. Any partition whose consumption
	// (re)started after this point is ambiguous and is re-sought below.
	epoch := r.epoch
	var pctx context.Context
	var cancel context.CancelFunc
	switch {
	case len(done) > 0 || len(r.finished) > 0:
		// Report completions now; take only what is already buffered.
		// (The last round adds to finished and wakes the wait under mu,
		// so a completion never waits for a confirmation interval.)
		pctx, cancel = nil, func() {}
	case r.listDue:
		// Registered after listPending looked, before there was a wait
		// to interrupt: list it in the next round rather than wait for
		// records that may never come.
		pctx, cancel = nil, func() {}
	case retryPending:
		pctx, cancel = context.WithTimeout(ctx, min(r.cfg.RetryBackoff, r.untilConfirm()))
	default:
		// Wake for the next confirmation of the ends even if no
		// record comes.
		pctx, cancel = context.WithTimeout(ctx, r.untilConfirm())
	}
	r.wake = cancel
	r.mu.Unlock()

	fetches := r.cl.PollRecords(pctx, r.takeSize())

	r.mu.Lock()
	r.wake = nil
	closed := r.closed
	r.mu.Unlock()
	cancel()
	done = append(done, r.waitRound()...)
	if closed {
		return done, ErrClosed
	}

	done = append(done, r.apply(fetches, epoch)...)
	for _, fe := range fetches.Errors() {
		if errors.Is(fe.Err, kgo.ErrClientClosed) {
			return append(done, r.waitRound()...), ErrClosed
		}
	}
	if err := ctx.Err(); err != nil {
		return append(done, r.waitRound()...), err
	}
	return done, nil
}

// drainBatches bounds how many batches' worth of records (MaxBatchRecords
// each) a Poll takes to empty the client's buffer.
const drainBatches = 4

// takeSize is how many records Poll takes from the client: a batch, or all
// it holds if that is at most drainBatches batches. The client fetches
// again only once its buffer is empty, so emptying it while a few batches
// remain to be written lets the next fetch (and its decoding) overlap
// those writes instead of following them.
func (r *Reader) takeSize() int {
	n := r.cfg.MaxBatchRecords
	if buf := r.cl.BufferedFetchRecords(); buf > int64(n) && buf <= int64(drainBatches*n) {
		n = int(buf)
	}
	return n
}

// waitRound waits for the store writes of the last round and returns the
// partitions they finished. The caller holds pollMu.
func (r *Reader) waitRound() []Completed {
	if r.round == nil {
		return nil
	}
	<-r.round
	r.round = nil
	r.mu.Lock()
	defer r.mu.Unlock()
	done := r.finished
	r.finished = nil
	return done
}

// startRound writes batches, in order, on a goroutine of their own. The
// caller holds pollMu and has waited for the previous round.
func (r *Reader) startRound(batches []*batch) {
	if len(batches) == 0 {
		return
	}
	ch := make(chan struct{})
	r.round = ch
	go func() {
		defer close(ch)
		var done []Completed
		for _, b := range batches {
			if c, ok := r.applyBatch(b); ok {
				done = append(done, c)
			}
		}
		if len(done) > 0 {
			r.mu.Lock()
			r.finished = append(r.finished, done...)
			r.wakeLocked()
			r.mu.Unlock()
		}
	}()
}

// untilConfirm is how long until confirmEnds is due, at least a
// millisecond. Only Poll calls it.
func (r *Reader) untilConfirm() time.Duration {
	return max(r.cfg.ConfirmInterval-time.Since(r.confirmedAt), time.Millisecond)
}

// confirmEnds lists the end offsets of the partitions being read, once per
// ConfirmInterval, and records them as confirmed: a Follow partition's end
// moves up to the listing; a Restore partition keeps its target, but its
// lag to it is known to be current. Only these listings confirm an end:
// they are dated by their sending, which a fetch, taken from the client's
// buffer at some later time, cannot be. A listing that fails (the broker
// is unreachable) confirms nothing, and the confirmations age.
func (r *Reader) confirmEnds(ctx context.Context) {
	if time.Since(r.confirmedAt) < r.cfg.ConfirmInterval {
		return
	}
	now := time.Now()
	r.confirmedAt = now
	r.mu.Lock()
	var sts []*partState
	var tps []TopicPartition
	for _, st := range r.parts {
		if st.consumedAt != 0 && !st.needOffs {
			sts = append(sts, st)
			tps = append(tps, st.tp)
		}
	}
	r.mu.Unlock()
	if len(tps) == 0 {
		return
	}
	// Bounded, so that an unreachable broker delays the next fetch by one
	// interval at most.
	lctx, cancel := context.WithTimeout(ctx, r.cfg.ConfirmInterval)
	ends, err := r.listOffsets(lctx, tps, -1, r.cfg.ReadCommitted)
	cancel()
	if err != nil {
		r.log.Debug("changelog end confirmation failed", slog.Any("error", err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range sts {
		end, ok := ends[st.tp]
		if !ok || r.parts[st.tp] != st || st.consumedAt == 0 {
			continue
		}
		if st.reg.Mode == Follow {
			st.end = max(st.end, end)
		}
		// The time before the request: the end was at least this then.
		st.confirmed = now
	}
}
