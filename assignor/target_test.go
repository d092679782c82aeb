package assignor

import (
	"maps"
	"slices"
	"testing"

	"github.com/eddystreams/eddy/task"
	"github.com/stretchr/testify/require"
)

// twoClientMigration is a group whose client a runs four stateful tasks
// and whose client b has just joined with nothing: two tasks must move to
// b, one warmup at a time.
func twoClientMigration() (Config, Input) {
	sf := tasks(0, 4)
	cfg := cfgWith(func(c *Config) { c.NumStandbys, c.MaxWarmups = 0, 1 })
	in := Input{Tasks: taskMap(sf, nil), Clients: map[string]ClientState{
		"a": {Capacity: 1, PrevActive: sf, Lags: lagsOf(LagRunning, sf...)},
		"b": {Capacity: 1},
	}}
	return cfg, in
}

// headedTo lists the tasks whose target active is client c.
func headedTo(tg Target, c string) []task.ID {
	var out []task.ID
	for t, r := range tg {
		if r.Active == c {
			out = append(out, t)
		}
	}
	return slices.SortedFunc(slices.Values(out), task.ID.Compare)
}

func TestAssignHeadsForTheTargetItIsHandedOn(t *testing.T) {
	cfg, in := twoClientMigration()
	out := Assign(cfg, in)
	require.True(t, out.FollowupRebalance)
	fresh := headedTo(out.Target, "b")
	require.Len(t, fresh, 2)

	// Another target as balanced: b takes the two tasks the fresh one
	// leaves on a.
	other := Target{}
	for _, tk := range tasks(0, 4) {
		other[tk] = TargetReplicas{Active: "a", Standby: []string{}}
		if !slices.Contains(fresh, tk) {
			other[tk] = TargetReplicas{Active: "b", Standby: []string{}}
		}
	}
	in.Target = other
	out = Assign(cfg, in)
	require.NoError(t, validate(cfg, in, out))
	require.True(t, out.FollowupRebalance)
	require.Len(t, out.Clients["b"].Warmup, 1)
	require.Subset(t, headedTo(other, "b"), out.Clients["b"].Warmup, "the warmup goes towards the target handed on")
	require.True(t, maps.EqualFunc(other, out.Target, func(x, y TargetReplicas) bool {
		return x.Active == y.Active && slices.Equal(x.Standby, y.Standby)
	}), "the target is handed on unchanged: %v", out.Target)
}

func TestAssignDropsATargetThatNoLongerFits(t *testing.T) {
	cfg, in := twoClientMigration()
	handed := Assign(cfg, in).Target
	require.NotNil(t, handed)

	for name, change := range map[string]func(Input) Input{
		// c would hold nothing while four tasks spread over three clients
		// give each at least one.
		"join": func(in Input) Input {
			in.Clients["c"] = ClientState{Capacity: 1}
			return in
		},
		"leave": func(in Input) Input {
			delete(in.Clients, "b")
			return in
		},
		"new task": func(in Input) Input {
			in.Tasks[tid(0, 4)] = TaskInfo{Stateful: true}
			return in
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, base := twoClientMigration()
			base = change(base)
			want := Assign(cfg, base)
			base.Target = handed
			got := Assign(cfg, base)
			require.True(t, equalOutputs(want, got), "%v\nwant %v", got, want)
		})
	}
}

func TestAssignHandsOnATargetOnlyWithAFollowup(t *testing.T) {
	cfg, in := twoClientMigration()
	out, _, _ := converge(t, cfg, in, 10)
	require.False(t, out.FollowupRebalance)
	require.Nil(t, out.Target)
}

// TestAssignHandsOnTheStatelessFinalPlacement checks that the target names
// each stateless task's final client, chosen from where the tasks ran
// before the migration, and that the rounds after head for it: a lends b
// the stateless tasks it cannot run beside its stateful actives, and the
// target still gives them back to a, where they end.
func TestAssignHandsOnTheStatelessFinalPlacement(t *testing.T) {
	sf, sl := tasks(0, 6), tasks(1, 6)
	cfg := cfgWith(func(c *Config) { c.MaxWarmups = 1 })
	in := Input{Tasks: taskMap(sf, sl), Clients: map[string]ClientState{
		"a": {Capacity: 1, PrevActive: slices.Concat(sf, sl[:3])},
		"b": {Capacity: 1, PrevActive: sl[3:]},
	}}
	out := Assign(cfg, in)
	require.True(t, out.FollowupRebalance)
	require.Len(t, out.Clients["b"].Active, 6, "b runs six stateless tasks while its stateful actives warm up")
	for x, tk := range sl {
		want := "a"
		if x >= 3 {
			want = "b"
		}
		require.Equal(t, want, out.Target[tk].Active, "final client of %v", tk)
	}
	in = next(in, out)
	out = Assign(cfg, in)
	require.NoError(t, validate(cfg, in, out))
	for _, tk := range sl {
		require.Equal(t, in.Target[tk].Active, out.Target[tk].Active, "final client of %v handed on", tk)
	}
}
