package runtime

// The registry's standbys and warmups: their stores opened, followed and closed, and the directories left on disk deleted.

import (
	"context"
	"errors"
	"time"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/instancecore"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/task"
)

// openStandby opens the stores of a standby or warmup replica, adopting
// open ones if given, and follows their changelogs. It returns nil if the
// standby cannot start.
func (r *registry) openStandby(id task.ID, stores []*taskrun.StoreHandle, to task.State) *taskrun.Standby {
	sb, err := taskrun.NewStandby(taskrun.StandbyConfig{
		ID:        id,
		Topology:  r.app.topo,
		Changelog: r.app.changelogTopic,
		Open:      r.app.openStore,
		Stores:    stores,
		Logger:    r.log,
	})
	if errors.Is(err, ErrTooManyDamagedStores) {
		r.app.fail(err)
		return nil
	}
	if err != nil {
		r.log.Warn("cannot open standby", "task", id, "err", err)
		return nil
	}
	for _, h := range sb.Stores() {
		err := r.follower.Register(changelog.Partition{Topic: h.Changelog, Partition: id.Partition, Store: h.Inner, Mode: changelog.Follow,
			Task: id.String(), StoreName: h.Info.Name})
		if err != nil {
			r.log.Warn("cannot follow changelog", "task", id, "topic", h.Changelog, "err", err)
		}
	}
	r.log.Info("standby opened", "task", id, "as", to.String())
	return sb
}

// unfollow stops the standby reader following a replica's changelogs,
// waiting for a write to its stores under way.
func (r *registry) unfollow(id task.ID, stores []*taskrun.StoreHandle) {
	for _, h := range stores {
		r.follower.Unregister(h.Changelog, id.Partition)
	}
}

// closeStandby stops following a standby and closes it, returning the
// positions its stores were left at.
func (r *registry) closeStandby(rep *replica) map[string]int64 {
	r.unfollow(rep.id, rep.stores)
	pos := positions(rep.stores)
	if err := rep.standby.Close(); err != nil {
		r.log.Warn("close standby", "task", rep.id, "err", err)
	}
	r.log.Info("standby closed", "task", rep.id)
	return pos
}

// follow runs the standby changelog reader and tracks when each standby was
// last caught up: as of the sending of the end listing its position has
// reached, not of when that was noticed, which may be a confirmation
// window later.
func (r *registry) follow(ctx context.Context) {
	r.mu.Lock()
	rd, exited := r.follower, r.exited
	r.unlock()
	defer close(exited)
	for {
		completed, err := rd.Poll(ctx)
		for _, c := range completed {
			if c.Err != nil {
				r.log.Warn("standby stopped following its changelog", "task", c.Task, "topic", c.Topic, "err", c.Err)
			}
		}
		if err != nil && (errors.Is(err, changelog.ErrClosed) || ctx.Err() != nil) {
			return
		}
		r.mu.Lock()
		for id, rep := range r.reps {
			if r.stateLocked(id).Following() && r.core.Visible(id) {
				if at, ok := r.standbyCaughtUpLocked(rep); ok && at.After(rep.caughtUp) {
					rep.caughtUp = at
				}
			}
		}
		r.unlock()
	}
}

// standbyCaughtUpLocked reports, for a standby whose every store has a
// lag of 0 to an end the broker confirmed within LagConfirmWindow, the
// oldest of those confirmations: the time as of which the standby holds
// all its changelogs held. Not while a store rebuilds.
func (r *registry) standbyCaughtUpLocked(rep *replica) (time.Time, bool) {
	var at time.Time
	for _, h := range rep.stores {
		p, ok := r.follower.Progress(h.Changelog, rep.id.Partition)
		if !ok || p.Lag != 0 || p.Rebuilding || time.Since(p.EndConfirmed) > LagConfirmWindow {
			return time.Time{}, false
		}
		if at.IsZero() || p.EndConfirmed.Before(at) {
			at = p.EndConfirmed
		}
	}
	return at, !at.IsZero()
}

// tick steps the core with the time, often enough that a directory left
// on disk is deleted within half a StateCleanupDelay (or 30s) of its
// expiry: the core decides which have expired.
func (r *registry) tick(ctx context.Context) {
	every := min(r.app.cfg.StateCleanupDelay/2, 30*time.Second)
	tick := time.NewTicker(max(every, 10*time.Millisecond))
	defer tick.Stop()
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-tick.C:
		}
		r.mu.Lock()
		acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvTick, At: now}, nil)
		r.unlock()
		for _, a := range acts {
			if a.Kind == instancecore.ActDelete {
				r.log.Info("deleting task directory left unassigned", "task", a.Task, "after", r.app.cfg.StateCleanupDelay)
			}
		}
		r.carry(acts)
	}
}
