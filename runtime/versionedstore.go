package runtime

import (
	"errors"
	"fmt"

	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// versionedOrPlain readies a table's store s, just opened, for the kind
// the topology declares it: a versioned store is wrapped so that its
// changelog's records are put as versions (statestore.VersionedChangelog).
// A table moves between a plain and a versioned store by a change of its
// topology alone: both kinds' changelogs hold the same records, but the
// stores lay them out differently, so a store found holding the other
// layout is emptied, with its position, and restored from its changelog
// like a new one. Other stores are returned as they are.
func (a *App) versionedOrPlain(id task.ID, info topology.StoreInfo, s statestore.Store) (statestore.Store, error) {
	var check func(statestore.ReadWriter) error
	switch {
	case info.Kind == topology.VersionedKind:
		check = statestore.CheckVersionedLayout
	case info.Kind == topology.KeyValueKind && info.Timestamped:
		// A table's store, whose values are timestamped; no other
		// key-value store can be switched, and the check would be
		// unsound for values of any length.
		check = statestore.CheckPlainLayout
	default:
		return s, nil
	}
	if err := check(s); err != nil {
		if !errors.Is(err, statestore.ErrLayoutMismatch) {
			s.Close()
			return nil, fmt.Errorf("runtime: store %q of task %s: %w", info.Name, id, err)
		}
		was, now := "versioned", "plain"
		if info.Kind == topology.VersionedKind {
			was, now = now, was
		}
		a.log.Warn("store holds a "+was+" table's layout but its table is now "+now+": emptying it to restore it from its changelog",
			"task", id, "store", info.Name, "reason", err)
		if err := s.Reset(); err != nil {
			s.Close()
			return nil, fmt.Errorf("runtime: empty store %q of task %s for its new layout: %w", info.Name, id, err)
		}
	}
	if info.Kind == topology.VersionedKind {
		return statestore.NewVersionedChangelog(s, info.VersionedOptions()), nil
	}
	return s, nil
}
