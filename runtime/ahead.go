package runtime

import (
	"sync"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/instancecore"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// aheadStores holds persistent stores opened before the task that uses
// them asks for them. A thread given thousands of new tasks would open
// their stores one at a time inside its assignment callback, as it builds
// each task; a restart opens every store on disk once to read its
// position (scanDisk) and then again for its task. Instead the thread
// opens its assignment's new stores several at once (openAll, see
// thread.openAhead; the instance's core names them) before building the
// tasks, scanDisk keeps the stores it opened (hold), and openStore takes
// the store from here when it is held (take). What no task takes is
// closed once every thread has its assignment
// (instancecore.ActReleaseAhead), before a task directory is deleted
// (registry.removeDir), and when the App stops.
//
// Only stores of no window layout are opened ahead: opening a window
// store may delete it first (checkWindowLayout).
type aheadStores struct {
	mu     sync.Mutex
	stores map[aheadKey]*aheadStore
	closed bool
}

// aheadKey names one store of one task.
type aheadKey struct {
	id   task.ID
	name string
}

// aheadStore is a store being opened (ready not yet closed) or open.
type aheadStore struct {
	ready chan struct{}
	// store is nil once ready if the opening failed: the task opens the
	// store itself, and meets the error there.
	store statestore.Store
}

// hold keeps an open store for its task, or closes it if the pool was
// closed or already holds that store.
func (p *aheadStores) hold(k aheadKey, s statestore.Store) {
	p.mu.Lock()
	if p.closed || p.stores[k] != nil {
		p.mu.Unlock()
		s.Close()
		return
	}
	if p.stores == nil {
		p.stores = make(map[aheadKey]*aheadStore)
	}
	e := &aheadStore{ready: make(chan struct{}), store: s}
	close(e.ready)
	p.stores[k] = e
	p.mu.Unlock()
}

// openAll opens the stores of keys not held yet, several at once
// (forStores), and returns once they are all open or failed.
func (p *aheadStores) openAll(keys []aheadKey, open func(aheadKey) (statestore.Store, error)) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if p.stores == nil {
		p.stores = make(map[aheadKey]*aheadStore)
	}
	var todo []aheadKey
	var entries []*aheadStore
	for _, k := range keys {
		if p.stores[k] != nil {
			continue
		}
		e := &aheadStore{ready: make(chan struct{})}
		p.stores[k] = e
		todo, entries = append(todo, k), append(entries, e)
	}
	p.mu.Unlock()
	forStores(len(todo), func(i int) {
		if s, err := open(todo[i]); err == nil {
			entries[i].store = s
		}
		close(entries[i].ready)
	})
}

// take hands over the store held for k, waiting for its opening, and
// reports false when none is held (or its opening failed).
func (p *aheadStores) take(k aheadKey) (statestore.Store, bool) {
	p.mu.Lock()
	e := p.stores[k]
	delete(p.stores, k)
	p.mu.Unlock()
	if e == nil {
		return nil, false
	}
	<-e.ready
	return e.store, e.store != nil
}

// release closes, several at once, the stores held for the tasks keep
// does not want, and returns those tasks. Stores still opening are left
// to the opener's task.
func (p *aheadStores) release(keep func(task.ID) bool) []task.ID {
	p.mu.Lock()
	var closing []statestore.Store
	var ids []task.ID
	for k, e := range p.stores {
		select {
		case <-e.ready:
		default:
			continue
		}
		if keep(k.id) {
			continue
		}
		delete(p.stores, k)
		if e.store != nil {
			closing = append(closing, e.store)
			ids = append(ids, k.id)
		}
	}
	p.mu.Unlock()
	forStores(len(closing), func(i int) { closing[i].Close() })
	return ids
}

// close closes every store held, once their openings are over, and
// holds none from then on.
func (p *aheadStores) close() {
	p.mu.Lock()
	p.closed = true
	entries := p.stores
	p.stores = nil
	p.mu.Unlock()
	for _, e := range entries {
		<-e.ready
		if e.store != nil {
			e.store.Close()
		}
	}
}

// removeDir deletes a task's stores and directory, closing first the
// stores opened ahead for it. The core holds the task as being deleted
// (ActDelete), so nothing opens it meanwhile.
func (r *registry) removeDir(id task.ID) error {
	r.app.ahead.release(func(x task.ID) bool { return x != id })
	return r.app.removeTaskState(id)
}

// openAhead opens, several at once, the stores the instance's core names
// (instancecore.ActOpenAhead) among the persistent stores of the tasks of
// an assignment, before the thread builds them one at a time (see
// aheadStores).
func (th *thread) openAhead(ids []task.ID) {
	subs := graph.Of(th.app.topo).SubTopologies()
	var stores []instancecore.AheadStore
	infos := make(map[aheadKey]topology.StoreInfo)
	for _, id := range ids {
		if id.SubTopology >= len(subs) {
			continue
		}
		for _, info := range subs[id.SubTopology].Stores {
			if info.Persistent {
				stores = append(stores, instancecore.AheadStore{Task: id, Name: info.Name, Windowed: info.Windowed()})
				infos[aheadKey{id, info.Name}] = info
			}
		}
	}
	var keys []aheadKey
	for _, s := range th.app.registry.ahead(th.idx, th.incarnationNow(), stores) {
		keys = append(keys, aheadKey{s.Task, s.Name})
	}
	th.app.ahead.openAll(keys, func(k aheadKey) (statestore.Store, error) {
		return th.app.hooked(k.id, infos[k], func() (statestore.Store, error) { return th.app.openPersistent(k.id, k.name) })
	})
}

// ahead asks the core which of a thread's stores to open ahead of their
// tasks' claims.
func (r *registry) ahead(idx, incarnation int, stores []instancecore.AheadStore) []instancecore.AheadStore {
	var open []instancecore.AheadStore
	r.mu.Lock()
	acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvAhead, Thread: idx, Incarnation: incarnation, Stores: stores}, func(a instancecore.Action) {
		if a.Kind == instancecore.ActOpenAhead && a.Thread == idx {
			open = append(open, a.Stores...)
		}
	})
	r.unlock()
	r.carry(acts)
	return open
}
