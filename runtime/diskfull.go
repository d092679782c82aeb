package runtime

import (
	"errors"
	"fmt"
	"time"

	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/statestore"
)

// Waiting out a full disk: the first retry comes quickly (space is often
// freed by a log rotation or a cleanup already under way), later ones
// back off, and the error is logged at most once per diskFullLogEvery.
const (
	diskFullFirstWait = 100 * time.Millisecond
	diskFullMaxWait   = 5 * time.Second
	diskFullLogEvery  = 30 * time.Second
)

// writeStores writes the tasks' committed writes into their stores,
// waiting out a full disk rather than failing the thread.
//
// By the time the stores are written the commit has happened where it
// counts: under exactly-once the transaction holding the changelog records
// has committed, and under at-least-once the changelog records are
// acknowledged. The writes must therefore land as they are, never dropped:
// a store refused with statestore.ErrDiskFull is left unchanged, and the
// tasks keep the writes in their caches (queries read them from there), so
// the same writes with the same positions are simply tried again, with
// backoff, until space is freed. Stores already written have nothing left
// to write and are skipped. The thread processes nothing meanwhile, and
// queries of its actives are refused as rebalancing past a short wait
// (landing.go): the commit counts with the group, not yet in the stores.
// Failing instead would not help: a replacement thread would restore the
// same stores on the same full disk.
//
// Stopping or killing the instance ends the wait: the stores then keep
// their last positions, and whoever runs the task next restores the
// missing writes from the changelog.
func (th *thread) writeStores(tasks []*taskrun.Active, last taskrun.LastOffsetFunc) error {
	wait := diskFullFirstWait
	var since, logged time.Time
	for attempt := 1; ; attempt++ {
		err := completeCommits(tasks, last, th.app.shared)
		if err == nil || !errors.Is(err, statestore.ErrDiskFull) {
			if err == nil && attempt > 1 {
				th.log.Info("disk space freed; store writes resumed", "waited", time.Since(since).Round(time.Millisecond), "attempts", attempt)
			}
			return err
		}
		now := time.Now()
		if attempt == 1 {
			since = now
		}
		if now.Sub(logged) >= diskFullLogEvery {
			logged = now
			th.log.Error("disk full: committed writes cannot enter their stores; processing is paused and the writes are retried until space is freed",
				"err", err, "waited", now.Sub(since).Round(time.Millisecond), "attempts", attempt)
		}
		th.app.diskFullWaits.Add(1)
		select {
		case <-th.ctx.Done():
			return fmt.Errorf("runtime: stopped while waiting for disk space: %w", err)
		case <-th.app.killCtx.Done():
			return fmt.Errorf("runtime: killed while waiting for disk space: %w", err)
		case <-time.After(wait):
		}
		wait = min(2*wait, diskFullMaxWait)
	}
}

// waitForSpace runs open, which opens the store or database in dir (or
// moves the store there into the shared database), and runs it again,
// with backoff, for as long as it fails for a full disk
// (statestore.ErrDiskFull), logging the directory and the space free at
// most once per diskFullLogEvery. Opening replays and flushes badger's logs,
// so it needs room as a write does (statestore.BadgerOptions.DiskReserve);
// a store that cannot open for want of it is intact, so its files are kept,
// and failing would not help: the task would be opened again, here or on
// another instance whose disk may be as full. Whoever waits (a stream
// thread claiming a task, the reconciliation of standbys, start-up) waits
// until space is freed or the instance stops.
func (a *App) waitForSpace(dir string, open func() error) error {
	wait := diskFullFirstWait
	var since, logged time.Time
	for attempt := 1; ; attempt++ {
		err := open()
		if err == nil || !errors.Is(err, statestore.ErrDiskFull) {
			if err == nil && attempt > 1 {
				a.log.Info("disk space freed; store opened", "dir", dir, "waited", time.Since(since).Round(time.Millisecond), "attempts", attempt)
			}
			return err
		}
		now := time.Now()
		if attempt == 1 {
			since = now
		}
		if now.Sub(logged) >= diskFullLogEvery {
			logged = now
			attrs := []any{"dir", dir, "err", err, "waited", now.Sub(since).Round(time.Millisecond), "attempts", attempt}
			if dfe, ok := errors.AsType[*statestore.DiskFullError](err); ok && dfe.Free >= 0 {
				attrs = append(attrs, "free_bytes", dfe.Free, "reserve_bytes", dfe.Reserve)
			}
			a.log.Error("disk full: a store cannot open; its files are kept and the open is retried until space is freed", attrs...)
		}
		a.diskFullWaits.Add(1)
		select {
		case <-a.closeAsked:
			return fmt.Errorf("runtime: closed while waiting for disk space: %w", err)
		case <-a.killCtx.Done():
			return fmt.Errorf("runtime: killed while waiting for disk space: %w", err)
		case <-a.done:
			return fmt.Errorf("runtime: stopped while waiting for disk space: %w", err)
		case <-time.After(wait):
		}
		wait = min(2*wait, diskFullMaxWait)
	}
}
