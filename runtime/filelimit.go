package runtime

import (
	"errors"
	"fmt"

	"github.com/eddystreams/eddy/internal/graph"
)

// ErrFileLimit is wrapped by the error Start returns when the process's
// open-file limit (RLIMIT_NOFILE) cannot hold the stores of every task.
var ErrFileLimit = errors.New("runtime: open-file limit too low for the topology's stores")

// Descriptor estimates of checkFileLimit. They are floors: the check
// refuses only a limit that cannot work.
const (
	// descriptorsPerStore is what one persistent (badger) store holds
	// open while it is small: its directory (the lock), MANIFEST,
	// KEYREGISTRY, DISCARD, the memtable's log, the current value-log
	// file and, after a restart, the previous one, and a table (6 after a
	// first start, 8 after a restart, for a store of a few keys). Every
	// further table adds one: a store of a few GiB holds hundreds.
	descriptorsPerStore = 8
	// descriptorsShared is what the shared database of the task stores
	// (see layout.go) holds open while small: as a store of its own, with
	// up to three memtable logs. Its tables add one each as it grows,
	// whatever the number of stores.
	descriptorsShared = 10
	// descriptorsBase covers what an instance holds besides its stores
	// and threads: standard streams, the state directory's lock, the
	// admin and global clients' connections, the Go runtime's poller.
	descriptorsBase = 64
	// descriptorsPerThread covers a stream thread's clients (consumer,
	// producer, restore consumer), each with a few connections per broker.
	descriptorsPerThread = 16
)

// descriptorsNeeded estimates the descriptors of an instance holding
// every task of the topology, which it does when it is alone in its group
// (the first instance of a deployment to start, or the last one left):
// the estimate, the tasks and the persistent stores in databases of their
// own it counts (the global stores, and in the per-store layout every
// task store).
func (a *App) descriptorsNeeded() (need, tasks, stores int) {
	g := graph.Of(a.topo)
	taskStores := 0
	for i, st := range g.SubTopologies() {
		n := int(a.plan.subPartitions[i])
		tasks += n
		for _, s := range st.Stores {
			if s.Persistent {
				taskStores += n
			}
		}
	}
	for _, s := range g.GlobalStores() {
		if s.Store.Persistent {
			stores++
		}
	}
	need = descriptorsBase + descriptorsPerThread*a.cfg.NumStreamThreads
	switch {
	case a.cfg.StoreLayout == StoreLayoutPerStore:
		stores += taskStores
	case taskStores > 0:
		need += descriptorsShared
	}
	need += descriptorsPerStore * stores
	return need, tasks, stores
}

// checkFileLimit raises the soft open-file limit to the hard limit and
// fails, wrapping ErrFileLimit, when even that cannot hold every task's
// stores: badger running out of descriptors midway through opening a
// store fails the task, or the instance, far from the cause. Go raises the
// soft limit when the process starts, but the program may have lowered it
// since.
func (a *App) checkFileLimit() error {
	limit, err := a.fileLimit()
	if err != nil {
		a.log.Warn("cannot read or raise the open-file limit; not checking it", "err", err)
		return nil
	}
	if limit == 0 {
		return nil // no such limit here
	}
	need, tasks, stores := a.descriptorsNeeded()
	if uint64(need) <= limit {
		return nil
	}
	shared := ""
	if a.cfg.StoreLayout == StoreLayoutShared {
		shared = fmt.Sprintf(", ~%d for the shared database of the task stores", descriptorsShared)
	}
	return fmt.Errorf("%w: RLIMIT_NOFILE is %d (soft limit raised to the hard limit), and an instance holding all %d tasks, as one alone in its group does, needs at least %d descriptors: %d persistent stores in databases of their own at ~%d each (more for stores of many tables)%s, %d per stream thread and %d more; raise the hard limit (ulimit -Hn, systemd's LimitNOFILE)",
		ErrFileLimit, limit, tasks, need, stores, descriptorsPerStore, shared, descriptorsPerThread, descriptorsBase)
}
