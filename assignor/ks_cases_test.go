package assignor

import (
	"fmt"
	"slices"

	"testing"

	"github.com/eddystreams/eddy/task"

	"github.com/stretchr/testify/require"
)

// Cases of Kafka Streams' own assignor tests, named after them.

// HighAvailabilityTaskAssignorTest.shouldDistributeStatelessTasksToBalanceTotalTaskLoad
// (Kafka Streams 3.9): acceptable lag 100, two warmups, one standby; p1 ran
// and is caught up on the four stateful tasks, p2 holds nothing, both have
// one thread, and there are three stateless tasks. p1 keeps its stateful
// actives while p2 warms up, p2 takes all three stateless tasks, so that
// the actives are four against three, not five against two, and the
// stateful replicas four against four (p2's standbys); a probing rebalance
// follows.
func TestShouldDistributeStatelessTasksToBalanceTotalTaskLoad(t *testing.T) {
	sf, sl := tasks(0, 4), tasks(1, 3)
	cfg := cfgWith(func(c *Config) {
		c.AcceptableRecoveryLag = 100
		c.MaxWarmups = 2
		c.NumStandbys = 1
	})
	in := Input{Tasks: taskMap(sf, sl), Clients: map[string]ClientState{
		"p1": {Capacity: 1, PrevActive: sf, Lags: lagsOf(0, sf...)},
		"p2": {Capacity: 1},
	}}
	out := Assign(cfg, in)
	require.NoError(t, validate(cfg, in, out))
	require.Equal(t, sf, out.Clients["p1"].Active)
	require.Empty(t, out.Clients["p1"].Standby)
	require.Equal(t, sl, out.Clients["p2"].Active)
	require.Equal(t, sf, out.Clients["p2"].Standby)
	require.True(t, out.FollowupRebalance)
}

// Nine clients over three zones and three clusters, the actives of two
// sub-topologies on the three clients of zone 1 (one per cluster), two
// standbys each over both tag keys. Assign spreads the actives out through
// warmups, but already in this first round no standby is in zone 1, where
// every active runs: each task's replicas span the three zones and, as
// Kafka Streams' rule places them (a standby goes to a client new on every
// key that still has values unused by the task's replicas), the three
// clusters, and the six clients outside zone 1 hold two standbys each.
func TestShouldDistributeStandbyTasksWhenActiveTasksAreLocatedOnSameZone(t *testing.T) {
	cfg := cfgWith(func(c *Config) {
		c.NumStandbys = 2
		c.RackAwareTags = []string{"zone", "cluster"}
	})
	t0, t1 := tasks(0, 3), tasks(1, 3)
	clients := map[string]ClientState{}
	for z := 1; z <= 3; z++ {
		for c := 1; c <= 3; c++ {
			cs := ClientState{Capacity: 2, Tags: map[string]string{"zone": fmt.Sprintf("z%d", z), "cluster": fmt.Sprintf("c%d", c)}}
			if z == 1 {
				cs.PrevActive = []task.ID{t0[c-1], t1[c-1]}
			}
			clients[fmt.Sprintf("p%d", (c-1)*3+z)] = cs
		}
	}
	in := Input{Tasks: taskMap(slices.Concat(t0, t1), nil), Clients: clients}
	out := Assign(cfg, in)
	require.NoError(t, validate(cfg, in, out))
	zones := map[task.ID]map[string]bool{}
	clusters := map[task.ID]map[string]bool{}
	for id, a := range out.Clients {
		z := clients[id].Tags["zone"]
		for _, tk := range slices.Concat(a.Active, a.Standby) {
			if clusters[tk] == nil {
				clusters[tk] = map[string]bool{}
			}
			clusters[tk][clients[id].Tags["cluster"]] = true
		}
		if z == "z1" {
			require.Empty(t, a.Standby, "client %s in the actives' zone", id)
		} else {
			require.Len(t, a.Standby, 2, "client %s", id)
		}
		for _, tk := range slices.Concat(a.Active, a.Standby) {
			if zones[tk] == nil {
				zones[tk] = map[string]bool{}
			}
			zones[tk][z] = true
		}
	}
	for tk, zs := range zones {
		require.Len(t, zs, 3, "task %v", tk)
		require.Len(t, clusters[tk], 3, "task %v spans clusters %v", tk, clusters[tk])
	}
}
