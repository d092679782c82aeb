package assignor

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/task"
)

func tid(sub int, part int32) task.ID { return task.ID{SubTopology: sub, Partition: part} }

// tasks returns n partitions of sub-topology sub.
func tasks(sub, n int) []task.ID {
	out := make([]task.ID, n)
	for p := range out {
		out[p] = tid(sub, int32(p))
	}
	return out
}

func taskMap(stateful, stateless []task.ID) map[task.ID]TaskInfo {
	m := map[task.ID]TaskInfo{}
	for _, t := range stateful {
		m[t] = TaskInfo{Stateful: true}
	}
	for _, t := range stateless {
		m[t] = TaskInfo{}
	}
	return m
}

func lagsOf(lag int64, ts ...task.ID) map[task.ID]int64 {
	m := map[task.ID]int64{}
	for _, t := range ts {
		m[t] = lag
	}
	return m
}

func cfgWith(f func(*Config)) Config {
	c := DefaultConfig()
	if f != nil {
		f(&c)
	}
	return c
}

// next returns the input of the following round: every replica of out
// reported as caught up (actives running, standbys and warmups at lag 0),
// earlier state kept as it was, and out's target handed on.
func next(in Input, out Output) Input {
	nin := Input{Tasks: in.Tasks, Clients: map[string]ClientState{}, Ends: in.Ends, Target: out.Target}
	for id, cs := range in.Clients {
		a := out.Clients[id]
		lags := map[task.ID]int64{}
		for t, l := range cs.Lags {
			if l == LagRunning {
				l = 0
			}
			lags[t] = l
		}
		for _, t := range a.Active {
			if in.Tasks[t].Stateful {
				lags[t] = LagRunning
			}
		}
		for _, t := range slices.Concat(a.Standby, a.Warmup) {
			lags[t] = 0
		}
		nin.Clients[id] = ClientState{
			Capacity:    cs.Capacity,
			Tags:        cs.Tags,
			PrevActive:  slices.Clone(a.Active),
			PrevStandby: slices.Concat(a.Standby, a.Warmup),
			Lags:        lags,
		}
	}
	return nin
}

// converge runs rounds until no follow-up is requested and returns the last
// output, the input it came from and the number of rounds.
func converge(t *testing.T, cfg Config, in Input, maxRounds int) (Output, Input, int) {
	t.Helper()
	for round := 1; ; round++ {
		out := Assign(cfg, in)
		require.NoError(t, validate(cfg, in, out), "round %d", round)
		if !out.FollowupRebalance {
			require.Empty(t, warmupsOf(out), "no follow-up, yet warmups remain")
			return out, in, round
		}
		require.Less(t, round, maxRounds, "no convergence")
		in = next(in, out)
	}
}

func warmupsOf(out Output) map[string][]task.ID {
	m := map[string][]task.ID{}
	for id, a := range out.Clients {
		if len(a.Warmup) > 0 {
			m[id] = a.Warmup
		}
	}
	return m
}

func owners(out Output) map[task.ID]string {
	m := map[task.ID]string{}
	for id, a := range out.Clients {
		for _, t := range a.Active {
			m[t] = id
		}
	}
	return m
}

func TestReplicaPlacement(t *testing.T) {
	zones := func(zs ...string) map[string]ClientState {
		m := map[string]ClientState{}
		for i, z := range zs {
			m[fmt.Sprintf("c%d", i)] = ClientState{Capacity: 1, Tags: map[string]string{"zone": z}}
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		cfg      Config
		clients  map[string]ClientState
		standbys int // expected per stateful task
		// distinctZones is the number of distinct zones each stateful
		// task's replicas must span; 0 skips the check.
		distinctZones int
	}{
		{"no standbys", cfgWith(nil), zones("a", "a", "a"), 0, 0},
		{"one standby", cfgWith(func(c *Config) { c.NumStandbys = 1 }), zones("a", "a", "a"), 1, 0},
		{"two standbys", cfgWith(func(c *Config) { c.NumStandbys = 2 }), zones("a", "a", "a", "a"), 2, 0},
		{"more standbys than clients allow", cfgWith(func(c *Config) { c.NumStandbys = 5 }), zones("a", "a", "a"), 2, 0},
		{"single client", cfgWith(func(c *Config) { c.NumStandbys = 2 }), zones("a"), 0, 0},
		{"two zones", cfgWith(func(c *Config) { c.NumStandbys = 1; c.RackAwareTags = []string{"zone"} }), zones("a", "a", "b", "b"), 1, 2},
		{"three zones two standbys", cfgWith(func(c *Config) { c.NumStandbys = 2; c.RackAwareTags = []string{"zone"} }), zones("a", "b", "c", "a", "b", "c"), 2, 3},
		{"more standbys than zones", cfgWith(func(c *Config) { c.NumStandbys = 2; c.RackAwareTags = []string{"zone"} }), zones("a", "a", "b", "b"), 2, 2},
		{"uneven zones", cfgWith(func(c *Config) { c.NumStandbys = 1; c.RackAwareTags = []string{"zone"} }), zones("a", "b", "b", "b"), 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Tasks: taskMap(slices.Concat(tasks(0, 6), tasks(1, 6)), tasks(2, 6)), Clients: tc.clients}
			out := Assign(tc.cfg, in)
			require.NoError(t, validate(tc.cfg, in, out))
			require.False(t, out.FollowupRebalance)
			replicas := map[task.ID][]string{}
			for id, a := range out.Clients {
				for _, tk := range a.Active {
					replicas[tk] = append(replicas[tk], id)
				}
				for _, tk := range a.Standby {
					replicas[tk] = append(replicas[tk], id)
				}
			}
			for tk, ti := range in.Tasks {
				if !ti.Stateful {
					require.Len(t, replicas[tk], 1, "stateless task %v has standbys", tk)
					continue
				}
				require.Len(t, replicas[tk], 1+tc.standbys, "task %v", tk)
				if tc.distinctZones > 0 {
					zs := map[string]bool{}
					for _, id := range replicas[tk] {
						zs[tc.clients[id].Tags["zone"]] = true
					}
					require.Len(t, zs, tc.distinctZones, "task %v replicas %v", tk, replicas[tk])
				}
			}
			if len(tc.cfg.RackAwareTags) == 0 || tc.name == "two zones" || tc.name == "three zones two standbys" {
				require.NoError(t, balanced(in, out, true))
			}
		})
	}
}

func TestTwoTagKeys(t *testing.T) {
	cfg := cfgWith(func(c *Config) { c.NumStandbys = 1; c.RackAwareTags = []string{"zone", "rack"} })
	clients := map[string]ClientState{}
	for i, zr := range [][2]string{{"a", "r1"}, {"a", "r2"}, {"b", "r1"}, {"b", "r2"}} {
		clients[fmt.Sprintf("c%d", i)] = ClientState{Capacity: 1, Tags: map[string]string{"zone": zr[0], "rack": zr[1]}}
	}
	in := Input{Tasks: taskMap(tasks(0, 8), nil), Clients: clients}
	out := Assign(cfg, in)
	require.NoError(t, validate(cfg, in, out))
	for id, a := range out.Clients {
		for _, tk := range a.Standby {
			act := clients[owners(out)[tk]].Tags
			require.NotEqual(t, act["zone"], clients[id].Tags["zone"], "task %v", tk)
			require.NotEqual(t, act["rack"], clients[id].Tags["rack"], "task %v", tk)
		}
	}
	require.NoError(t, balanced(in, out, true))
}

func TestActiveGoesToCaughtUpClient(t *testing.T) {
	t0 := tid(0, 0)
	for _, tc := range []struct {
		name    string
		clients map[string]ClientState
		want    string
	}{
		{
			name: "standby within acceptable lag beats empty clients",
			clients: map[string]ClientState{
				"a": {Capacity: 1},
				"b": {Capacity: 1, PrevStandby: []task.ID{t0}, Lags: lagsOf(9_000, t0)},
				"c": {Capacity: 1},
			},
			want: "b",
		},
		{
			name: "running beats a smaller lag",
			clients: map[string]ClientState{
				"a": {Capacity: 1, Lags: lagsOf(0, t0)},
				"b": {Capacity: 1, Lags: lagsOf(LagRunning, t0)},
			},
			want: "b",
		},
		{
			name: "previous active counts as running",
			clients: map[string]ClientState{
				"a": {Capacity: 1, Lags: lagsOf(0, t0)},
				"b": {Capacity: 1, PrevActive: []task.ID{t0}},
			},
			want: "b",
		},
		{
			name: "none caught up: the most caught up",
			clients: map[string]ClientState{
				"a": {Capacity: 1, Lags: lagsOf(50_000, t0)},
				"b": {Capacity: 1, Lags: lagsOf(20_000, t0)},
				"c": {Capacity: 1},
			},
			want: "b",
		},
		{
			name: "caught up but loaded still wins over idle and empty",
			clients: map[string]ClientState{
				"a": {Capacity: 1, Lags: lagsOf(0, slices.Concat([]task.ID{t0}, tasks(1, 3))...), PrevActive: tasks(1, 3)},
				"b": {Capacity: 1},
			},
			want: "a",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Tasks: taskMap(slices.Concat([]task.ID{t0}, tasks(1, 3)), nil), Clients: tc.clients}
			if len(tc.clients["a"].PrevActive) == 0 {
				in.Tasks = taskMap([]task.ID{t0}, nil)
			}
			out := Assign(DefaultConfig(), in)
			require.NoError(t, validate(DefaultConfig(), in, out))
			require.Equal(t, tc.want, owners(out)[t0])
		})
	}
}

func TestWarmups(t *testing.T) {
	all := tasks(0, 6)
	for _, tc := range []struct {
		name       string
		maxWarmups int
		standbys   int
		wantWarm   int
	}{
		{"default max two", 2, 0, 2},
		{"max one", 1, 0, 1},
		{"max ten, only three needed", 10, 0, 3},
		// b's standbys warm it up already: no warmups needed.
		{"standbys", 2, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cfgWith(func(c *Config) { c.MaxWarmups = tc.maxWarmups; c.NumStandbys = tc.standbys })
			// a runs everything; new client b has no state.
			in := Input{Tasks: taskMap(all, nil), Clients: map[string]ClientState{
				"a": {Capacity: 1, PrevActive: all},
				"b": {Capacity: 1},
			}}
			out := Assign(cfg, in)
			require.NoError(t, validate(cfg, in, out))
			require.True(t, out.FollowupRebalance)
			require.Equal(t, all, out.Clients["a"].Active, "no active moves before its destination is warm")
			require.Len(t, out.Clients["b"].Warmup, tc.wantWarm)
			if tc.standbys > 0 {
				require.Equal(t, all, out.Clients["b"].Standby)
			}

			// Next round, with b's replicas caught up, warm tasks move
			// and, once everything is, b holds half.
			final, _, rounds := converge(t, cfg, in, 20)
			require.Len(t, final.Clients["b"].Active, 3)
			require.Len(t, final.Clients["a"].Active, 3)
			if tc.standbys == 0 {
				require.Equal(t, 1+(3+tc.maxWarmups-1)/tc.maxWarmups, rounds)
			}
		})
	}
}

func TestWarmupMovesOnceCaughtUp(t *testing.T) {
	all := tasks(0, 4)
	in := Input{Tasks: taskMap(all, nil), Clients: map[string]ClientState{
		"a": {Capacity: 1, PrevActive: all},
		"b": {Capacity: 1},
	}}
	out := Assign(DefaultConfig(), in)
	require.Len(t, out.Clients["b"].Warmup, 2)
	warm := out.Clients["b"].Warmup

	// Still lagging: nothing moves, the warmups stay.
	lagging := next(in, out)
	for _, tk := range warm {
		lagging.Clients["b"].Lags[tk] = 50_000
	}
	out2 := Assign(DefaultConfig(), lagging)
	require.Equal(t, all, out2.Clients["a"].Active)
	require.Equal(t, warm, out2.Clients["b"].Warmup)
	require.True(t, out2.FollowupRebalance)

	// Caught up: they move.
	out3 := Assign(DefaultConfig(), next(in, out))
	require.Equal(t, warm, out3.Clients["b"].Active)
	require.False(t, out3.FollowupRebalance)
	require.Empty(t, warmupsOf(out3))
}

func TestCapacityBalance(t *testing.T) {
	for _, tc := range []struct {
		name     string
		caps     []int
		nsf, nsl int
		standbys int
		want     []int // actives per client
	}{
		{"equal", []int{1, 1, 1}, 9, 0, 0, []int{3, 3, 3}},
		{"weighted", []int{1, 2, 3}, 12, 0, 1, []int{2, 4, 6}},
		{"weighted with stateless", []int{1, 2, 3}, 6, 6, 1, []int{2, 4, 6}},
		{"fewer tasks than threads", []int{2, 2}, 3, 0, 1, nil},
		{"uneven", []int{1, 1, 1, 1}, 10, 3, 2, nil},
		{"saturated standbys", []int{3, 1}, 4, 0, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cfgWith(func(c *Config) { c.NumStandbys = tc.standbys })
			clients := map[string]ClientState{}
			for i, c := range tc.caps {
				clients[fmt.Sprintf("c%d", i)] = ClientState{Capacity: c}
			}
			in := Input{Tasks: taskMap(tasks(0, tc.nsf), tasks(1, tc.nsl)), Clients: clients}
			out := Assign(cfg, in)
			require.NoError(t, validate(cfg, in, out))
			require.NoError(t, balanced(in, out, true))
			for i, want := range tc.want {
				require.Len(t, out.Clients[fmt.Sprintf("c%d", i)].Active, want)
			}
		})
	}
}

func TestSticky(t *testing.T) {
	cfg := cfgWith(func(c *Config) { c.NumStandbys = 1 })
	clients := map[string]ClientState{}
	for _, id := range []string{"a", "b", "c"} {
		clients[id] = ClientState{Capacity: 1}
	}
	in := Input{Tasks: taskMap(slices.Concat(tasks(0, 6), tasks(1, 6)), tasks(2, 6)), Clients: clients}
	first, in, _ := converge(t, cfg, in, 10)

	t.Run("stable group keeps its assignment", func(t *testing.T) {
		again := Assign(cfg, next(in, first))
		require.Equal(t, first, again)
	})

	t.Run("adding a client moves only what balance needs", func(t *testing.T) {
		grown := next(in, first)
		grown.Clients["d"] = ClientState{Capacity: 1}
		out, _, _ := converge(t, cfg, grown, 20)
		require.NoError(t, balanced(grown, out, true))
		require.NoError(t, balancedByClient(grown, out, true))
		before, after := owners(first), owners(out)
		moved := 0
		for tk, o := range after {
			if before[tk] != o && in.Tasks[tk].Stateful {
				moved++
				require.Equal(t, "d", o, "stateful task %v moved between old clients", tk)
			}
		}
		// Stateful: 12 over 4, so exactly 3 of them move. Stateless
		// tasks follow the load while the stateful ones warm up on d,
		// and d ends with 4 or 5 of the 18.
		require.Equal(t, 3, moved)
		require.Contains(t, []int{4, 5}, len(out.Clients["d"].Active))
	})

	t.Run("removing a client moves only its tasks", func(t *testing.T) {
		shrunk := next(in, first)
		delete(shrunk.Clients, "c")
		round1 := Assign(cfg, shrunk)
		before := owners(first)
		for tk, o := range owners(round1) {
			if before[tk] != "c" && in.Tasks[tk].Stateful {
				require.Equal(t, before[tk], o, "task %v moved though its owner stayed", tk)
			}
		}
		// c's actives go to their caught-up standbys at once; the
		// standbys c held restore on the other client, the only one
		// left that can hold them.
		require.Empty(t, warmupsOf(round1))
		out, fin, _ := converge(t, cfg, shrunk, 20)
		require.NoError(t, balanced(fin, out, true))
	})
}

func TestNewGroupConvergesInOneRound(t *testing.T) {
	for _, standbys := range []int{0, 1, 2} {
		cfg := cfgWith(func(c *Config) { c.NumStandbys = standbys })
		clients := map[string]ClientState{}
		for i, c := range []int{1, 2, 1, 3} {
			clients[fmt.Sprintf("c%d", i)] = ClientState{Capacity: c}
		}
		in := Input{Tasks: taskMap(slices.Concat(tasks(0, 7), tasks(1, 5)), tasks(2, 9)), Clients: clients}
		out := Assign(cfg, in)
		require.NoError(t, validate(cfg, in, out))
		require.False(t, out.FollowupRebalance)
		require.Empty(t, warmupsOf(out))
		require.NoError(t, balanced(in, out, true))
	}
}

// Stateless tasks balance the load as it is while stateful tasks wait for
// their warmups, not as it will be, within one task per thread of the
// balanced range; each moves at most once.
func TestStatelessBalanceTotalLoad(t *testing.T) {
	// a runs everything and b is new: a keeps all stateful tasks until
	// b's copies are restored, so b takes every stateless task at once and
	// the total load is three against three in every round, as in Kafka
	// Streams. A stateless task goes back to a as a stateful one arrives
	// on b.
	sf, sl := tasks(0, 3), tasks(1, 3)
	in := Input{Tasks: taskMap(sf, sl), Clients: map[string]ClientState{
		"a": {Capacity: 1, PrevActive: slices.Concat(sf, sl)},
		"b": {Capacity: 1},
	}}
	cfg := cfgWith(func(c *Config) { c.NumStandbys = 1 })
	out := Assign(cfg, in)
	require.NoError(t, validate(cfg, in, out))
	require.Equal(t, sf, out.Clients["a"].Active)
	require.Equal(t, sl, out.Clients["b"].Active)
	for _, a := range out.Clients {
		for _, tk := range a.Standby {
			require.Zero(t, tk.SubTopology, "stateless task %v got a standby", tk)
		}
	}

	changes := map[task.ID]int{}
	for round := 0; out.FollowupRebalance; round++ {
		require.Less(t, round, 10)
		prev := owners(out)
		in = next(in, out)
		out = Assign(cfg, in)
		require.NoError(t, validate(cfg, in, out))
		require.Len(t, out.Clients["a"].Active, 3, "round %d", round)
		for tk, o := range owners(out) {
			if prev[tk] != o {
				changes[tk]++
			}
		}
	}
	require.NoError(t, balanced(in, out, true))
	require.Len(t, out.Clients["a"].Active, 3)
	require.Len(t, out.Clients["b"].Active, 3)
	for _, tk := range sl {
		require.LessOrEqual(t, changes[tk], 1, "stateless task %v moved again", tk)
	}
}

func TestDeterministicAndOrderIndependent(t *testing.T) {
	build := func(order []int) Input {
		in := Input{Tasks: map[task.ID]TaskInfo{}, Clients: map[string]ClientState{}}
		for _, i := range order {
			in.Tasks[tid(0, int32(i))] = TaskInfo{Stateful: true}
			in.Tasks[tid(1, int32(i))] = TaskInfo{}
			id := fmt.Sprintf("client-%d", i)
			in.Clients[id] = ClientState{
				Capacity:    1 + i%3,
				Tags:        map[string]string{"zone": fmt.Sprint(i % 2)},
				PrevActive:  []task.ID{tid(0, int32((i+3)%10)), tid(1, int32(i))},
				PrevStandby: []task.ID{tid(0, int32((i+5)%10))},
				Lags:        map[task.ID]int64{tid(0, int32((i+5)%10)): int64(i * 3000), tid(0, int32((i+1)%10)): int64(i * 500)},
			}
		}
		return in
	}
	cfg := cfgWith(func(c *Config) { c.NumStandbys = 2; c.RackAwareTags = []string{"zone"} })
	in := build([]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	want := Assign(cfg, in)
	require.NoError(t, validate(cfg, in, want))
	for _, order := range [][]int{{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, {3, 1, 4, 0, 5, 9, 2, 6, 8, 7}} {
		for range 5 {
			require.Equal(t, want, Assign(cfg, build(order)))
		}
	}
}

func TestEdgeCases(t *testing.T) {
	t.Run("no clients", func(t *testing.T) {
		out := Assign(DefaultConfig(), Input{Tasks: taskMap(tasks(0, 3), tasks(1, 1))})
		require.Empty(t, out.Clients)
		require.False(t, out.FollowupRebalance)
	})
	t.Run("no tasks", func(t *testing.T) {
		out := Assign(DefaultConfig(), Input{Clients: map[string]ClientState{"a": {}, "b": {}}})
		require.Equal(t, map[string]ClientAssignment{"a": {}, "b": {}}, out.Clients)
	})
	t.Run("unknown tasks in client state are ignored", func(t *testing.T) {
		in := Input{Tasks: taskMap(tasks(0, 2), nil), Clients: map[string]ClientState{
			"a": {PrevActive: []task.ID{tid(9, 9)}, PrevStandby: []task.ID{tid(8, 8)}, Lags: lagsOf(0, tid(7, 7))},
		}}
		out := Assign(DefaultConfig(), in)
		require.NoError(t, validate(DefaultConfig(), in, out))
		require.Equal(t, tasks(0, 2), out.Clients["a"].Active)
	})
	t.Run("task claimed active by two clients", func(t *testing.T) {
		t0 := tid(0, 0)
		in := Input{Tasks: taskMap([]task.ID{t0}, nil), Clients: map[string]ClientState{
			"a": {PrevActive: []task.ID{t0}}, "b": {PrevActive: []task.ID{t0}},
		}}
		out := Assign(DefaultConfig(), in)
		require.NoError(t, validate(DefaultConfig(), in, out))
		require.False(t, out.FollowupRebalance)
	})
	t.Run("zero config takes defaults where zero is meaningless", func(t *testing.T) {
		out := Assign(Config{}, Input{Clients: map[string]ClientState{"a": {}}})
		require.Equal(t, DefaultProbingRebalanceInterval, out.ProbingRebalanceInterval)
	})
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	for _, bad := range []Config{
		{NumStandbys: -1},
		{AcceptableRecoveryLag: -1},
		{MaxWarmups: -1},
		{ProbingRebalanceInterval: -1},
		{RackAwareTags: []string{"zone", "zone"}},
		{RackAwareTags: []string{" "}},
	} {
		require.Error(t, bad.Validate(), "%+v", bad)
	}
}

func TestLargeGroup(t *testing.T) {
	for _, zones := range []int{0, 3} {
		cfg := DefaultConfig()
		cfg.NumStandbys = 2
		if zones > 0 {
			cfg.RackAwareTags = []string{"zone"}
		}
		in := benchInput(zones)
		out := Assign(cfg, in)
		require.NoError(t, validate(cfg, in, out))
		require.False(t, out.FollowupRebalance)
		// Three zones of unequal capacity must each hold a replica of
		// every task, so per-thread replica balance cannot hold there.
		require.NoError(t, balanced(in, out, zones == 0), "zones %d", zones)

		grown := next(in, out)
		grown.Clients["client-new"] = ClientState{Capacity: 2}
		final, fin, _ := converge(t, cfg, grown, 1000)
		require.NoError(t, balanced(fin, final, zones == 0), "zones %d", zones)
	}
}

// A client without state for a task is caught up when the task's changelog
// is within AcceptableRecoveryLag, but one with state is preferred; with the
// ends unknown, a client without state is never caught up.
func TestChangelogEndsMakeStatelessClientsCaughtUp(t *testing.T) {
	sf := tasks(0, 2)
	base := func(ends map[task.ID]int64) Input {
		return Input{
			Tasks: taskMap(sf, nil),
			Clients: map[string]ClientState{
				"a": {PrevActive: sf, Lags: lagsOf(LagRunning, sf...)},
				"b": {Lags: lagsOf(5, sf[0])},
				"c": {},
			},
			Ends: ends,
		}
	}
	short := Assign(DefaultConfig(), base(map[task.ID]int64{sf[0]: 100, sf[1]: 100}))
	require.False(t, short.FollowupRebalance, "everyone is caught up on short changelogs")
	require.Empty(t, warmupsOf(short))
	own := owners(short)
	require.NotEqual(t, "c", own[sf[0]], "task 0 has warm homes (a runs it, b has a standby)")
	moved := 0
	for _, id := range sf {
		if own[id] != "a" {
			moved++
		}
	}
	require.Equal(t, 1, moved, "balance moves one of a's two tasks")

	long := Assign(DefaultConfig(), base(map[task.ID]int64{sf[0]: 1e6, sf[1]: 1e6}))
	require.Empty(t, long.Clients["c"].Active, "no active goes to a client that must restore a long changelog")
	unknown := Assign(DefaultConfig(), base(nil))
	require.Empty(t, unknown.Clients["c"].Active, "with ends unknown a client without state is not caught up")
}

// Among caught-up clients with state, one with everything (a standby at lag
// 0) is preferred to one that is behind within the acceptable lag.
func TestActivePrefersReplicaWithNoLag(t *testing.T) {
	sf := tasks(0, 1)
	in := Input{
		Tasks: taskMap(sf, nil),
		Clients: map[string]ClientState{
			"a": {Lags: lagsOf(500, sf...)},
			"b": {Lags: lagsOf(0, sf...)},
		},
	}
	out := Assign(DefaultConfig(), in)
	require.Equal(t, "b", owners(out)[sf[0]])
	require.False(t, out.FollowupRebalance)
}
