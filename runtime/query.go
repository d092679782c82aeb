package runtime

import (
	"errors"
	"fmt"

	"github.com/eddystreams/eddy/iq"

	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

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
	s, ok := a.registry.activeStore(store, partition)
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
