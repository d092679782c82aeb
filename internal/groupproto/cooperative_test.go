package groupproto

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// coopRound runs one cooperative generation: every member joins owning what
// it consumed after the previous one, as kgo reports it. It checks that no
// member is assigned a partition another member still owns, and returns the
// partitions each member must revoke (owned but no longer assigned).
func coopRound(t *testing.T, g *groupFixture) (got map[string]map[string][]int32, revoked map[string]map[string][]int32) {
	t.Helper()
	before := map[string]map[string][]int32{}
	for _, m := range g.members {
		before[m.id] = m.owned
	}
	got = g.rebalance()
	revoked = map[string]map[string][]int32{}
	for _, m := range g.members {
		for topic, ps := range got[m.id] {
			for _, p := range ps {
				for _, o := range g.members {
					if o.id != m.id {
						require.NotContains(t, before[o.id][topic], p, "%s/%d assigned to %s while %s owns it", topic, p, m.id, o.id)
					}
				}
			}
		}
		for topic, ps := range before[m.id] {
			for _, p := range ps {
				if !slices.Contains(got[m.id][topic], p) {
					if revoked[m.id] == nil {
						revoked[m.id] = map[string][]int32{}
					}
					revoked[m.id][topic] = append(revoked[m.id][topic], p)
				}
			}
		}
		m.owned = got[m.id]
	}
	return got, revoked
}

func TestBalancerIsCooperative(t *testing.T) {
	tasks, cls := testTopology(1, 0)
	for _, tc := range []struct {
		eager, bare, want bool
	}{{false, false, true}, {true, false, false}, {false, true, false}} {
		b, err := NewBalancer(BalancerConfig{Subscription: func() SubscriptionInfo { return SubscriptionInfo{} },
			Tasks: tasks, Changelogs: cls, Eager: tc.eager, BareFraming: tc.bare})
		require.NoError(t, err)
		require.Equal(t, tc.want, b.IsCooperative(), "eager=%v bare=%v", tc.eager, tc.bare)
	}
}

// A probing rebalance that moves no task revokes nothing: every member is
// assigned again all it owns, and the warmups stay where they are.
func TestCooperativeProbingRebalanceRevokesNothing(t *testing.T) {
	g := newFixture(t, 4, 2)
	a := g.add("m-a", "proc-a", "a:1", defaultFormat)
	b := g.add("m-b", "proc-b", "b:1", defaultFormat)
	for p := range 4 {
		a.sub.Tasks = append(a.sub.Tasks, TaskOffsets{Task: tid(0, int32(p)), Role: RoleActive})
	}
	g.ends = map[string]map[int32]int64{changelog: {0: 1e6, 1: 1e6, 2: 1e6, 3: 1e6}}
	first, _ := coopRound(t, g)
	require.Len(t, first[a.id]["left"], 4, "no active moves to a cold process")
	warm := b.last().Warmup
	require.Len(t, warm, 2)
	require.NotZero(t, a.last().NextProbingRebalanceMs)

	// The probing rebalances: b's warmups are still far behind.
	for range 3 {
		for _, tk := range warm {
			b.sub.Tasks = []TaskOffsets{{Task: tk, Role: RoleStandby, Positions: map[string]int64{changelog: 1000}}}
		}
		got, revoked := coopRound(t, g)
		require.Empty(t, revoked, "a probing rebalance without moves revokes nothing")
		require.Equal(t, first, got)
		require.Equal(t, warm, b.last().Warmup)
	}
}

// A task that moves is first revoked by its owner, held back from its new
// member for one round, and assigned to it in the next.
func TestCooperativeMoveTakesTwoRounds(t *testing.T) {
	g := newFixture(t, 4, 0)
	a := g.add("m-a", "proc-a", "a:1", defaultFormat)
	b := g.add("m-b", "proc-b", "b:1", defaultFormat)
	for p := range 4 {
		a.sub.Tasks = append(a.sub.Tasks, TaskOffsets{Task: tid(0, int32(p)), Role: RoleActive})
	}
	g.ends = map[string]map[int32]int64{changelog: {0: 1e6, 1: 1e6, 2: 1e6, 3: 1e6}}
	coopRound(t, g)
	warm := b.last().Warmup
	require.Len(t, warm, 2)

	// b's warmups caught up: the assignor moves them to b. a still owns
	// them, so this round b gets nothing new and keeps following them.
	b.sub.Tasks = nil
	for _, tk := range warm {
		b.sub.Tasks = append(b.sub.Tasks, TaskOffsets{Task: tk, Role: RoleStandby, Positions: map[string]int64{changelog: 1e6 - 10}})
	}
	got, revoked := coopRound(t, g)
	require.Empty(t, got[b.id])
	require.Empty(t, b.last().Active)
	require.Equal(t, warm, sortedIDs(slices.Concat(b.last().Standby, b.last().Warmup)))
	require.Len(t, revoked[a.id]["left"], 2)
	require.Empty(t, revoked[b.id])
	kept := a.last().Active
	require.Len(t, kept, 2)

	// a revoked them and rejoins: now b is assigned them, and a keeps the
	// rest without revoking anything.
	a.sub.Tasks = nil
	for _, tk := range kept {
		a.sub.Tasks = append(a.sub.Tasks, TaskOffsets{Task: tk, Role: RoleActive})
	}
	got, revoked = coopRound(t, g)
	require.Empty(t, revoked)
	require.Equal(t, warm, b.last().Active)
	require.Equal(t, kept, a.last().Active)
	requireWholeDisjoint(t, g.tasks, got)
}

// A member joining a loaded group of stateless tasks takes its share in two
// rounds, and the first member never gives up a task it keeps.
func TestCooperativeMemberJoins(t *testing.T) {
	g := newFixture(t, 0, 6)
	a := g.add("m-a", "proc-a", "a:1", defaultFormat)
	got, _ := coopRound(t, g)
	require.Len(t, got[a.id]["events"], 6)
	b := g.add("m-b", "proc-b", "b:1", defaultFormat)
	got, revoked := coopRound(t, g)
	require.Empty(t, got[b.id])
	require.Len(t, revoked[a.id]["events"], 3)
	kept := slices.Clone(a.last().Active)
	got, revoked = coopRound(t, g)
	require.Empty(t, revoked)
	require.Equal(t, kept, a.last().Active)
	require.Len(t, b.last().Active, 3)
	requireWholeDisjoint(t, g.tasks, got)

	// Eager members own nothing as they join: nothing is held back.
	for _, m := range g.members {
		m.owned = nil
	}
	got = g.rebalance()
	requireWholeDisjoint(t, g.tasks, got)
}
