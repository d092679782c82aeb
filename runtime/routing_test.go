package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/task"
)

// The routing table follows the instance's own assignment: for a version 3
// assignment only the instance's own share until the group's description
// shows the same epoch, then the group's; never a description of another
// epoch; a version 2 assignment's maps at once.
func TestRoutingTableFollowsTheAssignmentEpoch(t *testing.T) {
	b, _ := startBroker(t, "in")
	app, err := New(countTopology(t), Config{ApplicationID: "routing", Brokers: b.Addrs(), StateDir: t.TempDir(), Endpoint: "self:1"})
	require.NoError(t, err)
	require.NoError(t, app.prepare(context.Background()))
	t.Cleanup(app.releaseResources)
	app.state.Store(int32(StateRunning))
	app.serving.Store(true)
	sub, ok := app.storeSubTopology("counts")
	require.True(t, ok)
	id := func(p int32) task.ID { return task.ID{SubTopology: sub, Partition: p} }
	cp := func(p int32) []iq.StorePartition { return []iq.StorePartition{{Store: "counts", Partition: p}} }

	type answer struct {
		r   groupproto.Routing
		err error
	}
	answers := make(chan answer)
	asked := make(chan struct{}, 100)
	app.router.describeGroup = func() (groupproto.Routing, error) {
		asked <- struct{}{}
		select {
		case a := <-answers:
			return a.r, a.err
		case <-app.router.ctx.Done():
			return groupproto.Routing{}, app.router.ctx.Err()
		}
	}
	assign := func(idx int, info groupproto.AssignmentInfo) {
		app.assignment.Store(&info)
		app.router.assigned(idx, info)
	}
	hosts := func() []iq.HostMetadata {
		md, err := app.Queries().Metadata()
		require.NoError(t, err)
		require.Equal(t, map[string]int32{"counts": 2}, md.Partitions)
		return md.Hosts
	}
	waitHosts := func(want []iq.HostMetadata) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := hosts()
			if fmt.Sprint(got) == fmt.Sprint(want) {
				return
			}
			require.True(t, time.Now().Before(deadline), "routing table %v, want %v", got, want)
			time.Sleep(time.Millisecond)
		}
	}
	local := []iq.HostMetadata{{Host: "self:1", Active: cp(0), Standby: cp(1)}}

	// Two threads' shares of epoch 5: the table is this instance's own.
	assign(0, groupproto.AssignmentInfo{Version: 3, Active: []task.ID{id(0)}, Epoch: 5})
	assign(1, groupproto.AssignmentInfo{Version: 3, Standby: []task.ID{id(1)}, Epoch: 5})
	require.Equal(t, local, hosts())
	a, _ := app.Assignment()
	require.Nil(t, a.PartitionsByHost, "no group-wide maps before the group's table is known")

	// A description of another balance is not used.
	<-asked
	answers <- answer{r: groupproto.Routing{Epoch: 4, Active: map[string][]task.ID{"self:1": {id(1)}, "old:9": {id(0)}}}}
	<-asked
	answers <- answer{err: groupproto.ErrRoutingUnsettled}
	<-asked
	require.Equal(t, local, hosts())

	group := groupproto.Routing{Epoch: 5,
		Active:  map[string][]task.ID{"self:1": {id(0)}, "other:2": {id(1)}},
		Standby: map[string][]task.ID{"self:1": {id(1)}, "other:2": {id(0)}},
	}
	answers <- answer{r: group}
	full := []iq.HostMetadata{{Host: "other:2", Active: cp(1), Standby: cp(0)}, {Host: "self:1", Active: cp(0), Standby: cp(1)}}
	waitHosts(full)
	a, _ = app.Assignment()
	require.Equal(t, group.Active, a.PartitionsByHost)
	require.Equal(t, group.Standby, a.StandbyPartitionsByHost)

	// A thread's late share of the same balance keeps the group's table.
	assign(1, groupproto.AssignmentInfo{Version: 3, Standby: []task.ID{id(1)}, Epoch: 5})
	require.Equal(t, full, hosts())

	// The next balance: local again until described.
	assign(0, groupproto.AssignmentInfo{Version: 3, Active: []task.ID{id(0), id(1)}, Epoch: 6})
	require.Equal(t, []iq.HostMetadata{{Host: "self:1", Active: []iq.StorePartition{{Store: "counts", Partition: 0}, {Store: "counts", Partition: 1}}}}, hosts())

	// A version 2 assignment's maps are used as they are.
	assign(0, groupproto.AssignmentInfo{Version: 2, Active: []task.ID{id(0)},
		PartitionsByHost:        map[string][]task.ID{"self:1": {id(0)}, "v2:3": {id(1)}},
		StandbyPartitionsByHost: map[string][]task.ID{"self:1": nil, "v2:3": nil}})
	require.Equal(t, []iq.HostMetadata{{Host: "self:1", Active: cp(0)}, {Host: "v2:3", Active: cp(1)}}, hosts())
}

// Before its first assignment an instance routes on the group's table,
// marked Unassigned: the one Start read from the group, else the last one
// it used before it stopped, kept in the state directory; its first
// assignment replaces it.
func TestRoutingBeforeTheFirstAssignment(t *testing.T) {
	b, _ := startBroker(t, "in")
	app, err := New(countTopology(t), Config{ApplicationID: "routing", Brokers: b.Addrs(), StateDir: t.TempDir(), Endpoint: "self:1"})
	require.NoError(t, err)
	require.NoError(t, app.prepare(context.Background()))
	t.Cleanup(app.releaseResources)
	app.state.Store(int32(StateRebalancing))
	app.serving.Store(true)
	app.router.describeGroup = func() (groupproto.Routing, error) { return groupproto.Routing{}, groupproto.ErrRoutingUnsettled }
	sub, ok := app.storeSubTopology("counts")
	require.True(t, ok)
	id := func(p int32) task.ID { return task.ID{SubTopology: sub, Partition: p} }
	cp := func(p int32) []iq.StorePartition { return []iq.StorePartition{{Store: "counts", Partition: p}} }

	_, err = app.Queries().Metadata()
	require.ErrorIs(t, err, iq.ErrNotStarted, "no table known yet")

	last := groupproto.Routing{Epoch: 7,
		Active:  map[string][]task.ID{"other:1": {id(0)}, "self:1": {id(1)}},
		Standby: map[string][]task.ID{"other:1": {id(1)}, "self:1": {id(0)}}}
	require.NoError(t, saveRouting(app.dir.path, last))
	got, err := loadRouting(app.dir.path)
	require.NoError(t, err)
	require.Equal(t, last.Epoch, got.Epoch)
	require.Equal(t, last.Active, got.Active)
	require.Equal(t, last.Standby, got.Standby)

	app.router.learnGroup(nil)
	md, err := app.Queries().Metadata()
	require.NoError(t, err)
	require.True(t, md.Unassigned)
	require.Equal(t, []iq.HostMetadata{
		{Host: "other:1", Active: cp(0), Standby: cp(1)},
		{Host: "self:1", Active: cp(1), Standby: cp(0)},
	}, md.Hosts, "the saved table")

	// The first assignment takes over, and is saved in turn.
	app.router.assigned(0, groupproto.AssignmentInfo{Version: 2, Active: []task.ID{id(0), id(1)},
		PartitionsByHost: map[string][]task.ID{"self:1": {id(0), id(1)}}})
	md, err = app.Queries().Metadata()
	require.NoError(t, err)
	require.False(t, md.Unassigned)
	require.Equal(t, "self:1", md.Hosts[0].Host)
	saved, err := loadRouting(app.dir.path)
	require.NoError(t, err)
	require.Len(t, saved.Active["self:1"], 2)
}

// A saved routing table of another version, or unreadable, is refused.
func TestRoutingFileRefusesOtherVersions(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, routingFileName), []byte(`{"version":2,"epoch":1,"active":{}}`), 0o644))
	_, err := loadRouting(dir)
	require.ErrorContains(t, err, "version 2")
	require.NoError(t, os.WriteFile(filepath.Join(dir, routingFileName), []byte(`{"version":1,"active":{"h:1":["x"]}}`), 0o644))
	_, err = loadRouting(dir)
	require.Error(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, routingFileName), []byte(`{"vers`), 0o644))
	_, err = loadRouting(dir)
	require.Error(t, err)
}
