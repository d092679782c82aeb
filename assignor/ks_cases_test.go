package assignor

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Cases of Kafka Streams' own assignor tests, named after them.

// p1 runs four stateful tasks that p2, as new, must restore first, and
// there are three stateless tasks and one standby each: p1 keeps its
// stateful actives while p2 warms up, and p2 takes all three stateless
// tasks, so that the total load is four against three, not five against
// two.
func TestShouldDistributeStatelessTasksToBalanceTotalTaskLoad(t *testing.T) {
	sf, sl := tasks(0, 4), tasks(1, 3)
	cfg := cfgWith(func(c *Config) { c.NumStandbys = 1 })
	in := Input{Tasks: taskMap(sf, sl), Clients: map[string]ClientState{
		"p1": {Capacity: 1, PrevActive: sf},
		"p2": {Capacity: 1},
	}}
	out := Assign(cfg, in)
	require.NoError(t, validate(cfg, in, out))
	require.Equal(t, sf, out.Clients["p1"].Active)
	require.Equal(t, sl, out.Clients["p2"].Active)
	require.Equal(t, sf, out.Clients["p2"].Standby)
}
