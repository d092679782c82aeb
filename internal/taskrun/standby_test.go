package taskrun

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// A store that fails to open fails the standby with its error, and the
// stores opened before it are closed: nothing panics (a full disk makes
// opens fail).
func TestNewStandbyOpenFailureClosesWhatItOpened(t *testing.T) {
	b := topology.NewBuilder()
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	g.Count("first")
	g.Count("second")
	topo, err := b.Build()
	require.NoError(t, err)

	full := errors.New("disk full")
	var opened []statestore.Store
	sb, err := NewStandby(StandbyConfig{ID: task.ID{SubTopology: 0, Partition: 0}, Topology: topo,
		Changelog: func(s string) string { return s },
		Open: func(task.ID, topology.StoreInfo) (statestore.Store, error) {
			if len(opened) == 1 {
				return nil, full
			}
			s := statestore.NewMemory()
			opened = append(opened, s)
			return s, nil
		}})
	require.ErrorIs(t, err, full)
	require.Nil(t, sb)
	require.Len(t, opened, 1)
	_, _, err = opened[0].Get([]byte("k"))
	require.ErrorIs(t, err, statestore.ErrClosed, "the store opened before the failure is closed")
}
