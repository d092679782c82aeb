package assignor

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/task"
)

// Regression tests for the cases where Assign once chose what a Kafka
// Streams operator would call wrong (issue 16).

// restorations counts the stateful replicas out places on clients that are
// not caught up on them in in.
func restorations(cfg Config, in Input, out Output) int {
	n := 0
	for id, a := range out.Clients {
		for _, t := range slices.Concat(a.Active, a.Standby, a.Warmup) {
			if !in.Tasks[t].Stateful {
				continue
			}
			lag, ok := effectiveLag(in.Clients[id], t)
			if !ok || (lag != LagRunning && lag > cfg.AcceptableRecoveryLag) {
				n++
			}
		}
	}
	return n
}

// Client 1 runs three tasks, client 2 holds caught-up standbys of all three
// and client 3 is empty: the standbys stay on client 2 and client 3 gets one
// warmup, not two cold standbys and a warmup.
func TestRegressionRestoreOnlyThroughWarmups(t *testing.T) {
	sf := tasks(0, 3)
	cfg := cfgWith(func(c *Config) { c.NumStandbys = 1; c.MaxWarmups = 1 })
	in := Input{Tasks: taskMap(sf, nil), Clients: map[string]ClientState{
		"c1": {Capacity: 1, PrevActive: sf},
		"c2": {Capacity: 1, PrevStandby: sf, Lags: lagsOf(0, sf...)},
		"c3": {Capacity: 1},
	}}
	out := Assign(cfg, in)
	require.NoError(t, validate(cfg, in, out))
	require.Equal(t, 1, restorations(cfg, in, out), "only the warmup restores")
	require.Empty(t, out.Clients["c3"].Standby)
	require.Len(t, out.Clients["c3"].Warmup, 1)
	for _, tk := range sf {
		held := slices.Contains(out.Clients["c2"].Active, tk) || slices.Contains(out.Clients["c2"].Standby, tk)
		require.True(t, held, "c2's caught-up copy of %v is unused", tk)
	}
	require.True(t, out.FollowupRebalance)

	// Every round of the migration restores at most the one warmup.
	for round := 0; out.FollowupRebalance; round++ {
		require.Less(t, round, 20)
		in = next(in, out)
		out = Assign(cfg, in)
		require.NoError(t, validate(cfg, in, out))
		require.LessOrEqual(t, restorations(cfg, in, out), 1)
	}
	require.NoError(t, balanced(in, out, true))
	for id, a := range out.Clients {
		require.Len(t, a.Active, 1, id)
		require.Len(t, a.Standby, 1, id)
	}
}

// Two clients of two threads each, two tasks, both caught up on client 2
// as well: one task moves to client 2 at once.
func TestRegressionNoIdleClient(t *testing.T) {
	sf := tasks(0, 2)
	in := Input{Tasks: taskMap(sf, nil), Clients: map[string]ClientState{
		"c1": {Capacity: 2, PrevActive: sf},
		"c2": {Capacity: 2, PrevStandby: sf, Lags: lagsOf(0, sf...)},
	}}
	out := Assign(DefaultConfig(), in)
	require.NoError(t, validate(DefaultConfig(), in, out))
	require.Len(t, out.Clients["c1"].Active, 1)
	require.Len(t, out.Clients["c2"].Active, 1)
	require.False(t, out.FollowupRebalance)
}

// Capacities 100, 50 and 1 and nine caught-up tasks: the one-thread client
// gets a task.
func TestRegressionSmallClientGetsShare(t *testing.T) {
	sf := tasks(0, 9)
	in := Input{Tasks: taskMap(sf, nil), Clients: map[string]ClientState{
		"big":   {Capacity: 100, PrevActive: sf},
		"mid":   {Capacity: 50, Lags: lagsOf(0, sf...)},
		"small": {Capacity: 1, Lags: lagsOf(0, sf...)},
	}}
	out := Assign(DefaultConfig(), in)
	require.NoError(t, validate(DefaultConfig(), in, out))
	require.NoError(t, balancedByClient(in, out, true))
	require.Len(t, out.Clients["small"].Active, 1)
	require.Len(t, out.Clients["mid"].Active, 3)
	require.Len(t, out.Clients["big"].Active, 5)
	require.False(t, out.FollowupRebalance)
}

// While warmups run, stateless tasks balance the load as it is: no client
// runs 9 tasks while another runs 3 (placing them by the target did). The
// final placement is the one balanced against the target, reached from
// where the tasks ran before the migration: b's stateful actives arrive
// one by one, so a lends b the stateless tasks it cannot run beside its
// stateful ones and takes them back as those leave, and every stateless
// task ends where it started, having moved at most there and back (the
// final placement following the tasks that moved instead ended with all
// six stateless tasks on other clients).
func TestRegressionLoadBalancedDuringMigration(t *testing.T) {
	sf, sl := tasks(0, 6), tasks(1, 6)
	cfg := cfgWith(func(c *Config) { c.MaxWarmups = 1 })
	in := Input{Tasks: taskMap(sf, sl), Clients: map[string]ClientState{
		"a": {Capacity: 1, PrevActive: slices.Concat(sf, sl[:3])},
		"b": {Capacity: 1, PrevActive: sl[3:]},
	}}
	changes := map[task.ID]int{}
	prev := map[task.ID]string{}
	for _, tk := range slices.Concat(sf, sl[:3]) {
		prev[tk] = "a"
	}
	for _, tk := range sl[3:] {
		prev[tk] = "b"
	}
	start := maps.Clone(prev)
	for round := 0; ; round++ {
		require.Less(t, round, 20)
		out := Assign(cfg, in)
		require.NoError(t, validate(cfg, in, out))
		na, nb := len(out.Clients["a"].Active), len(out.Clients["b"].Active)
		require.LessOrEqual(t, max(na, nb)-min(na, nb), 2, "round %d: %d actives against %d", round, na, nb)
		for tk, o := range owners(out) {
			if prev[tk] != o {
				changes[tk]++
				require.LessOrEqual(t, changes[tk], 2, "round %d: %v moved a third time", round, tk)
			}
		}
		prev = owners(out)
		if !out.FollowupRebalance {
			break
		}
		in = next(in, out)
	}
	for _, tk := range sl {
		require.Equal(t, start[tk], prev[tk], "stateless task %v", tk)
	}
}

// Nine clients over two tag keys (zone and rack, three of each) with two
// standbys: each task's three replicas must span three zones and three
// racks, which pins single standby moves, yet replicas spread evenly.
func TestRegressionStandbysOverTwoTagKeys(t *testing.T) {
	cfg := cfgWith(func(c *Config) { c.NumStandbys = 2; c.RackAwareTags = []string{"zone", "rack"} })
	clients := map[string]ClientState{}
	i := 0
	for _, z := range []string{"a", "b", "c"} {
		for _, r := range []string{"r1", "r2", "r3"} {
			clients[fmt.Sprintf("c%d", i)] = ClientState{Capacity: 1, Tags: map[string]string{"zone": z, "rack": r}}
			i++
		}
	}
	for n := 1; n <= 30; n++ {
		in := Input{Tasks: taskMap(tasks(0, n), nil), Clients: clients}
		out := Assign(cfg, in)
		require.NoError(t, validate(cfg, in, out), "%d tasks", n)
		require.NoError(t, balanced(in, out, true), "%d tasks", n)
		require.NoError(t, balancedByClient(in, out, true), "%d tasks", n)
		for tk, holders := range replicasOf(out) {
			zones, racks := map[string]bool{}, map[string]bool{}
			for _, h := range holders {
				zones[clients[h].Tags["zone"]] = true
				racks[clients[h].Tags["rack"]] = true
			}
			require.Len(t, zones, 3, "task %v", tk)
			require.Len(t, racks, 3, "task %v", tk)
		}
	}
}

// In 400 small clusters over two tag keys (a fixed seed; half with random
// tags, half zone × rack grids), a new group's replicas are within the
// capacity limits of bounds whenever an exhaustive search finds a placement
// that is, keeping Assign's actives and each task's spread on both keys.
// Assign chains at most three tasks' re-placements, so this need not hold
// for every cluster; it held in 12,000 clusters of this generator.
func TestStandbysOverTwoTagKeysReachEvenSpread(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 16))
	for trial := range 400 {
		cfg := cfgWith(func(c *Config) { c.NumStandbys = 1 + rng.IntN(2); c.RackAwareTags = []string{"zone", "rack"} })
		zones, racks := 2+rng.IntN(2), 2+rng.IntN(2)
		clients := map[string]ClientState{}
		if trial%2 == 0 {
			// Random tags.
			for c := range 3 + rng.IntN(6) {
				clients[fmt.Sprintf("c%d", c)] = ClientState{Capacity: 1 + rng.IntN(2), Tags: map[string]string{
					"zone": fmt.Sprint(rng.IntN(zones)), "rack": fmt.Sprint(rng.IntN(racks)),
				}}
			}
		} else {
			// A zone × rack grid, where keys pin single moves most.
			for z := range zones {
				for r := range racks {
					clients[fmt.Sprintf("c%d%d", z, r)] = ClientState{Capacity: 1 + rng.IntN(2), Tags: map[string]string{
						"zone": fmt.Sprint(z), "rack": fmt.Sprint(r),
					}}
				}
			}
		}
		in := Input{Tasks: taskMap(tasks(0, 1+rng.IntN(8)), nil), Clients: clients}
		out := Assign(cfg, in)
		require.NoError(t, validate(cfg, in, out), "trial %d", trial)
		if evenSpread(cfg, in, out) {
			continue
		}
		require.False(t, evenSpreadExists(cfg, in, out), "trial %d: an even spread exists: clients %v, %v", trial, clients, out)
	}
}

// A zone × rack grid of nine clients of one and two threads, four tasks, two
// standbys: its even spread needs three tasks' standby sets re-placed
// together, which two at a time did not find (trial 1947 of the generator
// above, one in 3,000).
func TestRegressionStandbysOverTwoTagKeysThreeTasksChain(t *testing.T) {
	cfg := cfgWith(func(c *Config) { c.NumStandbys = 2; c.RackAwareTags = []string{"zone", "rack"} })
	caps := map[string]int{"c00": 2, "c01": 1, "c02": 2, "c10": 2, "c11": 1, "c12": 1, "c20": 1, "c21": 2, "c22": 2}
	clients := map[string]ClientState{}
	for id, c := range caps {
		clients[id] = ClientState{Capacity: c, Tags: map[string]string{"zone": id[1:2], "rack": id[2:3]}}
	}
	in := Input{Tasks: taskMap(tasks(0, 4), nil), Clients: clients}
	out := Assign(cfg, in)
	require.NoError(t, validate(cfg, in, out))
	require.True(t, evenSpread(cfg, in, out), "%v", out.Clients)
}

// replicaBounds are the limits of bounds on each client's stateful replicas,
// clients in sorted order.
func replicaBounds(cfg Config, in Input) (lo, hi []int) {
	ids := slices.Sorted(maps.Keys(in.Clients))
	caps := make([]int, len(ids))
	for c, id := range ids {
		caps[c] = max(1, in.Clients[id].Capacity)
	}
	ns := len(in.Tasks)
	return bounds(ns*(1+min(cfg.NumStandbys, len(ids)-1)), caps, ns)
}

// evenSpread reports whether every client's stateful replicas in out are
// within replicaBounds.
func evenSpread(cfg Config, in Input, out Output) bool {
	lo, hi := replicaBounds(cfg, in)
	for c, id := range slices.Sorted(maps.Keys(in.Clients)) {
		n := len(out.Clients[id].Active) + len(out.Clients[id].Standby)
		if n < lo[c] || n > hi[c] {
			return false
		}
	}
	return true
}

// evenSpreadExists searches every standby placement that keeps out's actives
// and, per task, at least out's number of distinct values of each tag key,
// for one whose replicas are balanced across clients by capacity.
func evenSpreadExists(cfg Config, in Input, out Output) bool {
	ids := slices.Sorted(maps.Keys(in.Clients))
	owner := owners(out)
	reps := replicasOf(out)
	spread := func(holders []string) [2]int {
		var n [2]int
		for j, key := range cfg.RackAwareTags {
			seen := map[string]bool{}
			for _, h := range holders {
				seen[in.Clients[h].Tags[key]] = true
			}
			n[j] = len(seen)
		}
		return n
	}
	k := min(cfg.NumStandbys, len(ids)-1)
	ts := slices.SortedFunc(maps.Keys(in.Tasks), task.ID.Compare)
	// Every allowed standby set per task.
	sets := make([][][]string, len(ts))
	for x, tk := range ts {
		want := spread(reps[tk])
		var rec func(from int, cur []string)
		rec = func(from int, cur []string) {
			if len(cur) == k {
				got := spread(append([]string{owner[tk]}, cur...))
				if got[0] >= want[0] && got[1] >= want[1] {
					sets[x] = append(sets[x], slices.Clone(cur))
				}
				return
			}
			for y := from; y < len(ids); y++ {
				if ids[y] != owner[tk] {
					rec(y+1, append(cur, ids[y]))
				}
			}
		}
		rec(0, nil)
	}
	load := map[string]int{}
	for _, tk := range ts {
		load[owner[tk]]++
	}
	lo, hi := replicaBounds(cfg, in)
	balancedNow := func() bool {
		for c, id := range ids {
			if load[id] < lo[c] || load[id] > hi[c] {
				return false
			}
		}
		return true
	}
	var search func(x int) bool
	search = func(x int) bool {
		if x == len(ts) {
			return balancedNow()
		}
		for _, set := range sets[x] {
			for _, c := range set {
				load[c]++
			}
			ok := search(x + 1)
			for _, c := range set {
				load[c]--
			}
			if ok {
				return true
			}
		}
		return false
	}
	return search(0)
}

func replicasOf(out Output) map[task.ID][]string {
	m := map[task.ID][]string{}
	for id, a := range out.Clients {
		for _, t := range slices.Concat(a.Active, a.Standby) {
			m[t] = append(m[t], id)
		}
	}
	return m
}

// A new group spreads every sub-topology over the clients.
func TestRegressionSubTopologySpread(t *testing.T) {
	in := Input{Tasks: taskMap(slices.Concat(tasks(0, 3), tasks(1, 3), tasks(2, 3)), slices.Concat(tasks(3, 3), tasks(4, 3))), Clients: map[string]ClientState{
		"a": {Capacity: 1}, "b": {Capacity: 1}, "c": {Capacity: 1},
	}}
	out := Assign(DefaultConfig(), in)
	require.NoError(t, validate(DefaultConfig(), in, out))
	for id, a := range out.Clients {
		per := map[int]int{}
		for _, tk := range a.Active {
			per[tk.SubTopology]++
		}
		require.Equal(t, map[int]int{0: 1, 1: 1, 2: 1, 3: 1, 4: 1}, per, id)
	}
}

// A new group spreads each sub-topology by capacity when capacities differ
// and groups differ in size: no client holds more actives of a sub-topology
// than its share of the capacity, rounded up. Filling clients by the first
// partition of every sub-topology, then the second and so on, left the big
// sub-topologies' last partitions to the clients with room left (a one-thread
// client held two of four where its share is one; a one-thread client beside
// stateful ones held three of nine).
func TestRegressionSubTopologySpreadUnequalCapacities(t *testing.T) {
	cases := []Input{{
		Tasks:   taskMap(slices.Concat(tasks(0, 4), tasks(1, 2)), tasks(2, 3)),
		Clients: map[string]ClientState{"a": {Capacity: 1}, "b": {Capacity: 3}},
	}, {
		Tasks: taskMap(tasks(3, 4), slices.Concat(tasks(0, 4), tasks(1, 9), tasks(2, 4), tasks(4, 3))),
		Clients: map[string]ClientState{
			"a": {Capacity: 2}, "b": {Capacity: 2}, "c": {Capacity: 1}, "d": {Capacity: 3}, "e": {Capacity: 1},
		},
	}, {
		Tasks:   taskMap(slices.Concat(tasks(0, 4), tasks(1, 2)), nil),
		Clients: map[string]ClientState{"a": {Capacity: 3}, "b": {Capacity: 2}, "c": {Capacity: 3}},
	}}
	for n, in := range cases {
		cfg := DefaultConfig()
		out := Assign(cfg, in)
		require.NoError(t, validate(cfg, in, out), "case %d", n)
		require.NoError(t, balancedByClient(in, out, true), "case %d", n)
		require.Zero(t, subTopologyExcess(in, out), "case %d: %v", n, out.Clients)
	}
}

// Two clients, one added, warmups one at a time: no task's owner changes
// more than twice while the group converges.
func TestRegressionNoFlapping(t *testing.T) {
	sf, sl := tasks(0, 12), tasks(1, 3)
	cfg := cfgWith(func(c *Config) { c.MaxWarmups = 1 })
	in := Input{Tasks: taskMap(sf, sl), Clients: map[string]ClientState{
		"a": {Capacity: 1},
		"b": {Capacity: 1},
	}}
	out, in, _ := converge(t, cfg, in, 5)
	in = next(in, out)
	in.Clients["c"] = ClientState{Capacity: 1}
	changes := map[task.ID]int{}
	for round := 0; ; round++ {
		require.Less(t, round, 30)
		prev := owners(out)
		out = Assign(cfg, in)
		require.NoError(t, validate(cfg, in, out))
		for tk, o := range owners(out) {
			if prev[tk] != o {
				changes[tk]++
				require.LessOrEqual(t, changes[tk], 2, "task %v changed owner again in round %d", tk, round)
			}
		}
		if !out.FollowupRebalance {
			break
		}
		in = next(in, out)
	}
	require.NoError(t, balancedByClient(in, out, true))
}

// Actives prefer the rack of their input leaders, but never at the cost of
// a restoration.
func TestRackAwareActives(t *testing.T) {
	cfg := cfgWith(func(c *Config) { c.ActiveRackTag = "rack" })
	sf := tasks(0, 4)
	racks := map[task.ID][]string{sf[0]: {"r1"}, sf[1]: {"r2"}, sf[2]: {"r1"}, sf[3]: {"r2"}}
	clients := map[string]ClientState{
		"a": {Capacity: 1, Tags: map[string]string{"rack": "r1"}},
		"b": {Capacity: 1, Tags: map[string]string{"rack": "r2"}},
	}
	in := Input{Tasks: taskMap(sf, nil), Clients: clients, TaskRacks: racks}
	out := Assign(cfg, in)
	require.NoError(t, validate(cfg, in, out))
	require.Equal(t, []task.ID{sf[0], sf[2]}, out.Clients["a"].Active)
	require.Equal(t, []task.ID{sf[1], sf[3]}, out.Clients["b"].Active)

	// b runs everything and a has no state: the task that moves to a
	// for balance is one on a's rack, through a warmup.
	clients["b"] = ClientState{Capacity: 1, Tags: map[string]string{"rack": "r2"}, PrevActive: sf}
	out = Assign(cfg, in)
	require.NoError(t, validate(cfg, in, out))
	require.Equal(t, sf, out.Clients["b"].Active, "no active goes where it must restore")
	for _, w := range out.Clients["a"].Warmup {
		require.Equal(t, []string{"r1"}, racks[w])
	}

	// Without ActiveRackTag the racks are ignored.
	plain := Assign(DefaultConfig(), Input{Tasks: taskMap(sf, nil), Clients: map[string]ClientState{
		"a": {Capacity: 1, Tags: map[string]string{"rack": "r1"}},
		"b": {Capacity: 1, Tags: map[string]string{"rack": "r2"}},
	}, TaskRacks: racks})
	require.Equal(t, []task.ID{sf[0], sf[2]}, plain.Clients["a"].Active)
}

func TestValidateOutput(t *testing.T) {
	sf := tasks(0, 2)
	in := Input{Tasks: taskMap(sf, nil), Clients: map[string]ClientState{"a": {}, "b": {}}}
	require.NoError(t, ValidateOutput(in, Assign(DefaultConfig(), in)))
	for _, bad := range []Output{
		{Clients: map[string]ClientAssignment{"a": {Active: sf[:1]}}},
		{Clients: map[string]ClientAssignment{"a": {Active: sf}, "b": {Active: sf[:1]}}},
		{Clients: map[string]ClientAssignment{"a": {Active: sf, Standby: sf[:1]}}},
		{Clients: map[string]ClientAssignment{"z": {Active: sf}}},
		{Clients: map[string]ClientAssignment{"a": {Active: append(slices.Clone(sf), tid(9, 9))}}},
	} {
		require.Error(t, ValidateOutput(in, bad), "%+v", bad)
	}
}
