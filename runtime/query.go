package runtime

import (
	"errors"
	"fmt"
	"sync"

	"github.com/eddystreams/eddy/iq"

	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// replicas tracks the stores of running active tasks, so that queries find
// them without waiting for the stream thread that owns them.
type replicas struct {
	mu     sync.RWMutex
	stores map[string]map[int32]statestore.Store // store → partition → store
}

func (r *replicas) add(t *task.Active) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stores == nil {
		r.stores = make(map[string]map[int32]statestore.Store)
	}
	for _, h := range t.Stores() {
		m := r.stores[h.Info.Name]
		if m == nil {
			m = make(map[int32]statestore.Store)
			r.stores[h.Info.Name] = m
		}
		m[t.ID().Partition] = h.Inner
	}
}

func (r *replicas) remove(t *task.Active) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range t.Stores() {
		if m := r.stores[h.Info.Name]; m != nil && m[t.ID().Partition] == h.Inner {
			delete(m, t.ID().Partition)
		}
	}
}

func (r *replicas) get(store string, partition int32) (statestore.Store, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.stores[store][partition]
	return s, ok
}

// storeSubTopology finds the sub-topology that owns a store.
func (a *App) storeSubTopology(store string) (int, bool) {
	for i, st := range a.topo.SubTopologies() {
		for _, s := range st.Stores {
			if s.Name == store {
				return i, true
			}
		}
	}
	return 0, false
}

// KeyPartition returns the partition of a store that holds a serialized key,
// computed as Kafka's default partitioner places the key.
func (a *App) KeyPartition(store string, key []byte) (int32, error) {
	st, ok := a.storeSubTopology(store)
	if !ok {
		return 0, fmt.Errorf("%w %q", iq.ErrUnknownStore, store)
	}
	if a.plan == nil {
		return 0, iq.ErrNotRunning
	}
	return topology.Partition(key, a.plan.subPartitions[st]), nil
}

// LocalGet reads a serialized key from the local replica of its partition.
// It answers only from a running active task and sees what that task last
// committed. The partition is returned with the answer.
func (a *App) LocalGet(store string, key []byte) (value []byte, found bool, partition int32, err error) {
	if a.State() != StateRunning {
		return nil, false, 0, iq.ErrNotRunning
	}
	partition, err = a.KeyPartition(store, key)
	if err != nil {
		return nil, false, 0, err
	}
	s, ok := a.replicas.get(store, partition)
	if !ok {
		return nil, false, partition, fmt.Errorf("%w: store %q partition %d", iq.ErrNotHostedHere, store, partition)
	}
	value, found, err = s.Get(key)
	if errors.Is(err, statestore.ErrClosed) {
		return nil, false, partition, fmt.Errorf("%w: store %q partition %d moved while reading", iq.ErrNotHostedHere, store, partition)
	}
	return value, found, partition, err
}

// Ready reports whether the instance is running, every thread has received
// an assignment, and no task is restoring.
func (a *App) Ready() bool {
	if a.State() != StateRunning {
		return false
	}
	for _, th := range a.threads {
		if !th.assigned.Load() || th.rest.active() {
			return false
		}
	}
	return true
}
