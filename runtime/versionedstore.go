package runtime

import (
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// versionedOrPlain readies a table's store s, just opened, for the kind
// the topology declares it: a versioned store is wrapped so that its
// changelog's records are put as versions (statestore.VersionedChangelog).
// Other stores are returned as they are.
func (a *App) versionedOrPlain(id task.ID, info topology.StoreInfo, s statestore.Store) (statestore.Store, error) {
	if info.Kind == topology.VersionedKind {
		return statestore.NewVersionedChangelog(s, info.VersionedOptions()), nil
	}
	return s, nil
}
