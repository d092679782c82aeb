package changelog

// Starting to read a registered partition: listing its changelog's offsets,
// checking that the store's position fits them, resetting the store if not.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/eddystreams/eddy/internal/heldlog"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/statestore"
)

// listPending lists start and end offsets for partitions registered (or
// reset) since the last round, checks that each store's position fits its
// changelog, resetting the store if it does not, and starts reading, or
// completes a Restore partition with nothing to read. It reports whether
// some listing failed, or must be repeated, and so needs a retry.
func (r *Reader) listPending(ctx context.Context) (done []Completed, retry bool) {
	now := time.Now()
	r.mu.Lock()
	r.listDue = false
	var pending []*partState
	var tps []TopicPartition
	for _, st := range r.parts {
		if !st.needOffs {
			continue
		}
		if now.Before(st.retryAt) {
			retry = true
			continue
		}
		pending = append(pending, st)
		tps = append(tps, st.tp)
	}
	r.mu.Unlock()
	if len(pending) == 0 {
		return nil, retry
	}
	// What follows may reset stores: not while the last round writes
	// (a store may back several partitions, as a global store does).
	done = r.waitRound()

	l := r.listPendingOffsets(ctx, pending, tps)

	var resets []unfit
	var logs heldlog.Lines
	r.mu.Lock()
	for _, st := range pending {
		if r.parts[st.tp] != st {
			continue // unregistered meanwhile
		}
		start, sok := l.starts[st.tp]
		end, eok := l.ends[st.tp]
		hwm, hok := end, true
		if r.cfg.ReadCommitted && eok && (st.fitPos() > end || r.throughOpen(st)) {
			hwm, hok = l.hwms[st.tp]
		}
		lso := end
		if r.throughOpen(st) {
			end = hwm
		}
		if !sok || !eok || !hok {
			st.retryAt = now.Add(r.cfg.RetryBackoff)
			retry = true
			logs.Add(slog.LevelWarn, "changelog offset listing failed; will retry",
				logAttrs(st, slog.Any("error", l.err))...)
			continue
		}
		switch {
		case st.fitPos() > hwm && r.cfg.ReadCommitted && !st.pastEnd:
			// The transaction coordinator writes commit markers after
			// the commit returns, and a position after a commit is past
			// its marker (see the runtime's commit): for a moment the
			// position may be one past the high watermark. The next
			// listing settles it.
			st.pastEnd = true
			st.retryAt = now.Add(r.cfg.RetryBackoff)
			retry = true
			logs.Add(slog.LevelInfo, "changelog store position is past the changelog end; listing again before resetting the store",
				logAttrs(st, slog.Int64("position", st.pos), slog.Int64("end", hwm))...)
		case st.fitPos() > hwm:
			resets = append(resets, unfit{st, "position beyond the changelog end", start, hwm, end})
		case st.pos > 0 && st.pos < start:
			resets = append(resets, unfit{st, "position below the changelog start", start, hwm, end})
		default:
			if lso < end && st.fitPos() < end {
				logs.Add(slog.LevelInfo, "changelog restore waits for the transactions open on the changelog",
					logAttrs(st, slog.Int64("position", st.pos), slog.Int64("last_stable", lso), slog.Int64("end", end))...)
			}
			if c, ok := r.startLocked(st, start, end, now, &logs); ok {
				done = append(done, c)
			}
		}
	}
	r.mu.Unlock()
	logs.Write(r.log)

	done = append(done, r.resetUnfit(resets, now)...)
	return done, retry
}

// pendingListing is what listPending learns of the changelogs of the
// partitions it lists. A partition missing from a map could not be listed;
// err says why.
type pendingListing struct {
	starts, ends map[TopicPartition]int64
	// hwms holds high watermarks under read committed, only of the
	// partitions whose check needs one.
	hwms map[TopicPartition]int64
	err  error
}

// listPendingOffsets lists the start and end offsets of pending (whose
// partitions are tps), and the high watermarks they need. The caller has
// waited for the last round.
func (r *Reader) listPendingOffsets(ctx context.Context, pending []*partState, tps []TopicPartition) pendingListing {
	// Only writes change pos, and none is under way: no lock needed to
	// read it.
	starts, startErr := r.listOffsets(ctx, tps, -2, false)
	ends, endErr := r.listOffsets(ctx, tps, -1, r.cfg.ReadCommitted)
	// Under read committed the end is the last stable offset, which an
	// open transaction holds back, maybe below positions that are fine:
	// whether a position is past the log is a question for the high
	// watermark, and so is a restoration's end through open
	// transactions.
	var hwms map[TopicPartition]int64
	var hwmErr error
	if r.cfg.ReadCommitted {
		var need []TopicPartition
		for _, st := range pending {
			if end, ok := ends[st.tp]; ok && st.fitPos() > end || r.throughOpen(st) {
				need = append(need, st.tp)
			}
		}
		if len(need) > 0 {
			hwms, hwmErr = r.listOffsets(ctx, need, -1, false)
		}
	}
	return pendingListing{starts: starts, ends: ends, hwms: hwms, err: errors.Join(startErr, endErr, hwmErr)}
}

// unfit is a partition listPending found its store's position does not fit.
type unfit struct {
	st         *partState
	why        string
	start, end int64
	readTo     int64 // the end reading starts towards after the reset
}

// resetUnfit resets the stores of resets and starts reading each from the
// start of its changelog, as listed at listed.
func (r *Reader) resetUnfit(resets []unfit, listed time.Time) []Completed {
	var done []Completed
	for _, u := range resets {
		var logs heldlog.Lines
		failed, ready := r.resetStore(u.st, u.why, u.start, u.end, &logs)
		if failed != nil {
			done = append(done, *failed)
		}
		if ready {
			r.mu.Lock()
			if r.parts[u.st.tp] == u.st {
				// The log did not change with the store: this listing holds.
				if c, ok := r.startLocked(u.st, u.start, u.readTo, listed, &logs); ok {
					done = append(done, c)
				}
			}
			r.mu.Unlock()
		}
		logs.Write(r.log)
	}
	return done
}

// throughOpen reports whether st's restoration reads up to the high
// watermark through open transactions (ReaderConfig.ThroughOpenTransactions).
func (r *Reader) throughOpen(st *partState) bool {
	return r.cfg.ReadCommitted && r.cfg.ThroughOpenTransactions && st.reg.Mode == Restore
}

// fitPos is the position checked against the changelog's end: a torn
// store holds data up to its torn Write's position.
func (st *partState) fitPos() int64 { return max(st.pos, st.torn) }

// startLocked starts reading a listed partition whose position fits its
// changelog, or completes a Restore partition with nothing to read. listed
// is when the offsets were listed. Its log lines go to logs.
func (r *Reader) startLocked(st *partState, start, end int64, listed time.Time, logs *heldlog.Lines) (Completed, bool) {
	st.needOffs = false
	st.pastEnd = false
	st.confirmed = listed
	from := max(st.pos, start)
	if st.rebuilding {
		// Reading from empty: consistent only once everything the log
		// held now has been read, whatever compaction left of it.
		if st.target < 0 {
			st.target = end
		}
		if from >= st.target {
			st.rebuilding = false
		}
	}
	if st.reg.Mode == Follow {
		st.end = max(st.end, end)
		logs.Add(slog.LevelInfo, "changelog follow started", logAttrs(st, slog.Int64("from", from))...)
		r.consumeLocked(st, from)
		return Completed{}, false
	}
	st.end = end
	if from >= end {
		return r.completeLocked(st, nil, logs), true
	}
	logs.Add(slog.LevelInfo, "changelog restore started", logAttrs(st, slog.Int64("from", from), slog.Int64("to", end))...)
	r.consumeLocked(st, from)
	return Completed{}, false
}

// resetStore empties st's store because its position does not fit the
// changelog, and reports whether st is still registered and ready to read
// from the start. A failed reset drops st and is returned as its
// completion. The caller must have stopped consumption of st, must have no
// round under way, and must hold none of the Reader's locks. start and end
// are for the log (-1 if unknown). The lines logged after the reset go to
// logs.
func (r *Reader) resetStore(st *partState, why string, start, end int64, logs *heldlog.Lines) (failed *Completed, ready bool) {
	// No write is under way, so the position read here is the store's
	// when it is reset; the warning is written before taking applyMu,
	// which Unregister waits for.
	r.mu.Lock()
	live := r.parts[st.tp] == st
	pos := st.pos
	r.mu.Unlock()
	if !live {
		return nil, false
	}
	r.log.Warn("changelog store does not fit its changelog; resetting the store and reading the changelog from its start",
		logAttrs(st, slog.String("reason", why), slog.Int64("position", pos), slog.Int64("start", start), slog.Int64("end", end))...)
	st.applyMu.Lock()
	defer st.applyMu.Unlock()
	// Unregistered since the warning: once Unregister has returned, the
	// store is the caller's, and no reset may reach it.
	r.mu.Lock()
	live = r.parts[st.tp] == st
	r.mu.Unlock()
	if !live {
		return nil, false
	}
	err := st.reg.Store.Reset()
	if err == nil {
		r.resets.Add(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parts[st.tp] != st {
		return nil, false
	}
	if err != nil {
		c := r.completeLocked(st, fmt.Errorf("changelog: resetting the store of %s[%d]: %w", st.tp.Topic, st.tp.Partition, err), logs)
		return &c, false
	}
	st.pos = statestore.NoPosition
	st.end = -1
	st.pastEnd = false
	st.rebuilding, st.target, st.torn = true, -1, -1
	return nil, true
}

// completeLocked drops st and describes it. Its log line goes to logs.
func (r *Reader) completeLocked(st *partState, err error, logs *heldlog.Lines) Completed {
	r.dropLocked(st)
	c := Completed{
		Topic:     st.tp.Topic,
		Partition: st.tp.Partition,
		Task:      st.reg.Task,
		Store:     st.reg.Store,
		Mode:      st.reg.Mode,
		Restored:  st.restored,
		Position:  st.pos,
		Duration:  time.Since(st.started),
		Err:       err,
	}
	if err != nil {
		logs.Add(slog.LevelError, "changelog reading failed", logAttrs(st, slog.Any("error", err))...)
	} else {
		logs.Add(slog.LevelInfo, "changelog restore completed", logAttrs(st,
			slog.Int64("records", c.Restored), slog.Int64("position", c.Position),
			slog.Duration("duration", c.Duration))...)
	}
	return c
}

// listOffsets lists, per partition, the offset for timestamp (-1 end, -2
// start); the end is the last stable offset if committed is set, the high
// watermark otherwise. Partitions that could not be listed are missing
// from the result; the error says why.
func (r *Reader) listOffsets(ctx context.Context, tps []TopicPartition, timestamp int64, committed bool) (map[TopicPartition]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	if committed {
		req.IsolationLevel = 1
	}
	idx := make(map[string]int)
	for _, tp := range tps {
		i, ok := idx[tp.Topic]
		if !ok {
			i = len(req.Topics)
			idx[tp.Topic] = i
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = tp.Topic
			req.Topics = append(req.Topics, t)
		}
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition = tp.Partition
		p.Timestamp = timestamp
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
	}
	out := make(map[TopicPartition]int64, len(tps))
	var errs []error
	for _, shard := range r.cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			errs = append(errs, shard.Err)
			continue
		}
		resp := shard.Resp.(*kmsg.ListOffsetsResponse)
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, err))
					continue
				}
				out[TopicPartition{t.Topic, p.Partition}] = p.Offset
			}
		}
	}
	return out, errors.Join(errs...)
}
