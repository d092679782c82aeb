package groupproto

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/task"
)

const changelog = "app-counts-changelog"

// testTopology: sub-topology 0 reads "left" and "right" and is stateful with
// one changelog; sub-topology 1 reads "events" and is stateless.
func testTopology(sfParts, slParts int) (map[task.ID][]string, map[int][]string) {
	tasks := map[task.ID][]string{}
	for p := range sfParts {
		tasks[tid(0, int32(p))] = []string{"left", "right"}
	}
	for p := range slParts {
		tasks[tid(1, int32(p))] = []string{"events"}
	}
	return tasks, map[int][]string{0: {changelog}}
}

// testMember is one group member with its own Balancer.
type testMember struct {
	id  string
	b   *Balancer
	sub SubscriptionInfo
	mu  sync.Mutex
	got []AssignmentInfo
	// join and raw are the member's last JoinGroup metadata and SyncGroup
	// assignment bytes.
	join, raw []byte
	// owned are the partitions the member says it still consumes as it
	// joins (kgo's OwnedPartitions); nil for an eager member.
	owned map[string][]int32
}

func (m *testMember) last() AssignmentInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.got) == 0 {
		return AssignmentInfo{}
	}
	return m.got[len(m.got)-1]
}

type groupFixture struct {
	t       *testing.T
	tasks   map[task.ID][]string
	cls     map[int][]string
	ends    map[string]map[int32]int64
	endsErr error
	now     time.Time
	cfg     assignor.Config
	assign  assignor.AssignFunc
	racks   func(context.Context) (map[task.ID][]string, error)
	errs    []error
	members []*testMember
}

func newFixture(t *testing.T, sfParts, slParts int) *groupFixture {
	tasks, cls := testTopology(sfParts, slParts)
	return &groupFixture{t: t, tasks: tasks, cls: cls, cfg: assignor.DefaultConfig(),
		now: time.UnixMilli(1_700_000_000_000), ends: map[string]map[int32]int64{}}
}

func (g *groupFixture) add(id, process, endpoint string, f *format) *testMember {
	m := &testMember{id: id, sub: SubscriptionInfo{ProcessID: process, Endpoint: endpoint, Capacity: 1}}
	b, err := newBalancer(BalancerConfig{
		Subscription: func() SubscriptionInfo { return m.sub },
		Tasks:        g.tasks,
		Changelogs:   g.cls,
		EndOffsets: func(_ context.Context, topics []string) (map[string]map[int32]int64, error) {
			require.Equal(g.t, []string{changelog}, topics)
			return g.ends, g.endsErr
		},
		Assignor:     g.cfg,
		AssignFunc:   g.assign,
		TaskRacks:    g.racks,
		OnError:      func(err error) { g.errs = append(g.errs, err) },
		Now:          func() time.Time { return g.now },
		OnAssignment: func(a AssignmentInfo) { m.mu.Lock(); m.got = append(m.got, a); m.mu.Unlock() },
	}, f)
	require.NoError(g.t, err)
	m.b = b
	g.members = append(g.members, m)
	return m
}

// rebalance runs one generation with the first member as leader and returns
// what each member's ParseSyncAssignment returned.
func (g *groupFixture) rebalance() map[string]map[string][]int32 {
	g.t.Helper()
	var join []kmsg.JoinGroupResponseMember
	for _, m := range g.members {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.id
		jm.ProtocolMetadata = m.b.JoinGroupMetadata([]string{"events", "left", "right"}, m.owned, 1)
		m.join = jm.ProtocolMetadata
		join = append(join, jm)
	}
	mb, topics, err := g.members[0].b.MemberBalancer(join)
	require.NoError(g.t, err)
	want := map[string]struct{}{}
	for _, ts := range g.tasks {
		for _, t := range ts {
			want[t] = struct{}{}
		}
	}
	require.Equal(g.t, want, topics)
	plan, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"left": 16, "right": 16, "events": 16})
	require.NoError(g.t, err)
	sync := plan.IntoSyncAssignment()
	require.Len(g.t, sync, len(g.members))
	require.True(g.t, slices.IsSortedFunc(sync, func(a, b kmsg.SyncGroupRequestGroupAssignment) int {
		if a.MemberID < b.MemberID {
			return -1
		}
		return 1
	}))
	out := map[string]map[string][]int32{}
	for _, s := range sync {
		for _, m := range g.members {
			if m.id == s.MemberID {
				m.raw = s.MemberAssignment
				parts, err := m.b.ParseSyncAssignment(s.MemberAssignment)
				require.NoError(g.t, err)
				out[m.id] = parts
			}
		}
	}
	return out
}

// describe is the group as a coordinator describes it once Stable: each
// member's last JoinGroup metadata and SyncGroup assignment.
func (g *groupFixture) describe() kmsg.DescribeGroupsResponseGroup {
	d := kmsg.NewDescribeGroupsResponseGroup()
	d.Group, d.State, d.ProtocolType, d.Protocol = "app", "Stable", "consumer", ProtocolName
	for _, m := range g.members {
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.ProtocolMetadata, dm.MemberAssignment = m.id, m.join, m.raw
		d.Members = append(d.Members, dm)
	}
	return d
}

// requireWholeDisjoint checks that the members consume whole tasks, each
// task's partitions on exactly one member, and every active task somewhere.
func requireWholeDisjoint(t *testing.T, tasks map[task.ID][]string, got map[string]map[string][]int32) {
	t.Helper()
	owner := map[task.ID]string{}
	for id, parts := range got {
		have := map[string]map[int32]bool{}
		for topic, ps := range parts {
			have[topic] = map[int32]bool{}
			for _, p := range ps {
				have[topic][p] = true
			}
		}
		for tk, topics := range tasks {
			n := 0
			for _, topic := range topics {
				if have[topic][tk.Partition] {
					n++
				}
			}
			require.True(t, n == 0 || n == len(topics), "member %s has part of task %v", id, tk)
			if n > 0 {
				require.Empty(t, owner[tk], "task %v on %s and %s", tk, owner[tk], id)
				owner[tk] = id
			}
		}
	}
	require.Len(t, owner, len(tasks))
}

func TestBalancerSpreadsProcessesOverMembers(t *testing.T) {
	g := newFixture(t, 6, 3)
	g.cfg.NumStandbys = 1
	a1 := g.add("m-a1", "proc-a", "a:1", defaultFormat)
	a2 := g.add("m-a2", "proc-a", "a:1", defaultFormat)
	b1 := g.add("m-b1", "proc-b", "b:1", defaultFormat)

	got := g.rebalance()
	requireWholeDisjoint(t, g.tasks, got)

	// proc-a has two threads and proc-b one: 4 and 2 stateful tasks, 6 and
	// 3 tasks in all; each thread 2 stateful and 3 in all.
	for _, m := range []*testMember{a1, a2, b1} {
		info := m.last()
		require.Equal(t, ErrNone, info.ErrorCode)
		require.Len(t, info.Active, 3, m.id)
		sf := 0
		for _, tk := range info.Active {
			if tk.SubTopology == 0 {
				sf++
			}
		}
		require.Equal(t, 2, sf, m.id)
		require.Equal(t, int64(0), info.NextProbingRebalanceMs)
	}
	// Every stateful task has its standby on the other process.
	standbyA := slices.Concat(a1.last().Standby, a2.last().Standby)
	standbyB := b1.last().Standby
	require.Len(t, standbyA, 2)
	require.Len(t, standbyB, 4)
	for _, tk := range standbyA {
		require.Contains(t, b1.last().Active, tk)
	}
	// The routing table rebuilt from the group names processes.
	r, err := GroupRouting(g.describe())
	require.NoError(t, err)
	require.Equal(t, a1.last().Epoch, r.Epoch)
	require.Equal(t, sortedIDs(slices.Concat(a1.last().Active, a2.last().Active)), r.Active["a:1"])
	require.Equal(t, b1.last().Active, r.Active["b:1"])
	require.Equal(t, sortedIDs(standbyA), r.Standby["a:1"])
	require.Equal(t, standbyB, r.Standby["b:1"])

	// A second generation with nothing changed keeps every member's tasks.
	before := map[string]AssignmentInfo{a1.id: a1.last(), a2.id: a2.last(), b1.id: b1.last()}
	for _, m := range g.members {
		m.sub.Tasks = nil
		for _, tk := range m.last().Active {
			if tk.SubTopology == 0 {
				m.sub.Tasks = append(m.sub.Tasks, TaskOffsets{Task: tk, Role: RoleActive})
			}
		}
		for _, tk := range m.last().Standby {
			m.sub.Tasks = append(m.sub.Tasks, TaskOffsets{Task: tk, Role: RoleStandby, Positions: map[string]int64{changelog: 50}})
		}
	}
	got2 := g.rebalance()
	require.Equal(t, got, got2)
	for _, m := range g.members {
		require.Equal(t, before[m.id].Active, m.last().Active, m.id)
		require.Equal(t, before[m.id].Standby, m.last().Standby, m.id)
	}
}

func TestBalancerLagsFromPositions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ends    map[string]map[int32]int64
		endsErr error
		bPos    int64
		want    string // member that must get task 0_0
	}{
		// b's store is 100 behind the end: caught up; a's is far behind.
		{"end offsets", map[string]map[int32]int64{changelog: {0: 20_100}}, nil, 20_000, "m-b"},
		// Without end offsets the furthest position counts as the end.
		{"end offsets fail", nil, errors.New("broker down"), 20_000, "m-b"},
		// A position past the end belongs to another history of the
		// changelog (the topic was recreated): that store is rebuilt from
		// scratch, so its lag is the whole changelog, more than a's.
		{"position past the end", map[string]map[int32]int64{changelog: {0: 20_100}}, nil, 30_000, "m-a"},
		// One past the end is where an exactly-once store stands before
		// its transaction's commit marker is written: caught up.
		{"position at an unwritten marker", map[string]map[int32]int64{changelog: {0: 20_100}}, nil, 20_101, "m-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFixture(t, 1, 0)
			g.ends, g.endsErr = tc.ends, tc.endsErr
			a := g.add("m-a", "proc-a", "", defaultFormat)
			b := g.add("m-b", "proc-b", "", defaultFormat)
			a.sub.Tasks = []TaskOffsets{{Task: tid(0, 0), Positions: map[string]int64{changelog: 5_000}}}
			b.sub.Tasks = []TaskOffsets{{Task: tid(0, 0), Positions: map[string]int64{changelog: tc.bPos}}}
			got := g.rebalance()
			require.Equal(t, map[string][]int32{"left": {0}, "right": {0}}, got[tc.want])
		})
	}
}

func TestBalancerProbingRebalance(t *testing.T) {
	g := newFixture(t, 4, 0)
	a := g.add("m-a", "proc-a", "a:1", defaultFormat)
	b := g.add("m-b", "proc-b", "b:1", defaultFormat)
	for p := range 4 {
		a.sub.Tasks = append(a.sub.Tasks, TaskOffsets{Task: tid(0, int32(p)), Role: RoleActive})
	}
	g.ends = map[string]map[int32]int64{changelog: {0: 1e6, 1: 1e6, 2: 1e6, 3: 1e6}}
	got := g.rebalance()
	require.Len(t, got[a.id]["left"], 4, "no active moves to a cold process")
	require.Empty(t, got[b.id])
	require.Len(t, b.last().Warmup, 2)
	want := g.now.Add(assignor.DefaultProbingRebalanceInterval).UnixMilli()
	require.Equal(t, want, a.last().NextProbingRebalanceMs)
	require.Equal(t, want, b.last().NextProbingRebalanceMs)
	r, err := GroupRouting(g.describe())
	require.NoError(t, err)
	require.Equal(t, b.last().Warmup, r.Warmup["b:1"])

	// b reports its warmups caught up: they move.
	for _, tk := range b.last().Warmup {
		b.sub.Tasks = append(b.sub.Tasks, TaskOffsets{Task: tk, Role: RoleStandby, Positions: map[string]int64{changelog: 1e6 - 10}})
	}
	warm := b.last().Warmup
	got = g.rebalance()
	require.Len(t, got[b.id]["left"], 2)
	require.Equal(t, warm, b.last().Active)
	require.Zero(t, b.last().NextProbingRebalanceMs)
}

func TestBalancerVersionNegotiation(t *testing.T) {
	peek := func(b []byte) int32 {
		g, err := DecodeGroupSubscription(b)
		require.NoError(t, err)
		require.Equal(t, FramingConsumer, g.Framing)
		return g.Info.Version
	}

	t.Run("v1 leader, v3 member: version probing, then v1 everywhere", func(t *testing.T) {
		g := newFixture(t, 4, 0)
		old := g.add("m-1", "proc-1", "", formatV1) // leader
		nu := g.add("m-2", "proc-2", "", defaultFormat)
		require.Equal(t, int32(3), peek(nu.b.JoinGroupMetadata(nil, nil, 0)))

		got := g.rebalance()
		require.Empty(t, got[old.id])
		require.Empty(t, got[nu.id])
		require.Equal(t, ErrVersionProbing, nu.last().ErrorCode)
		require.Equal(t, int32(1), nu.last().Version)
		require.Equal(t, ErrVersionProbing, old.last().ErrorCode)

		// The new member rejoins with v1 and the group balances.
		require.Equal(t, int32(1), peek(nu.b.JoinGroupMetadata(nil, nil, 0)))
		got = g.rebalance()
		requireWholeDisjoint(t, g.tasks, got)
		require.Equal(t, ErrNone, nu.last().ErrorCode)
		require.Len(t, nu.last().Active, 2)
	})

	t.Run("v3 leader, mixed members: assignments in v1", func(t *testing.T) {
		g := newFixture(t, 4, 0)
		g.add("m-1", "proc-1", "", defaultFormat) // leader
		old := g.add("m-2", "proc-2", "", formatV1)
		got := g.rebalance()
		requireWholeDisjoint(t, g.tasks, got)
		require.Equal(t, int32(1), old.last().Version)
		require.Equal(t, ErrNone, old.last().ErrorCode)
	})

	// A group with a member of a build before version 3 gets the host
	// maps in every assignment, whoever leads, so that the old member
	// can route; the new members route from the maps too.
	for _, tc := range []struct {
		name        string
		leader, old *format
	}{
		{"v3 leader, v2 member", defaultFormat, formatV2},
		{"v2 leader, v3 member", formatV2, defaultFormat},
	} {
		t.Run(tc.name+": assignments in v2 with the full host maps", func(t *testing.T) {
			g := newFixture(t, 4, 2)
			g.cfg.NumStandbys = 1
			lead := g.add("m-1", "proc-1", "a:1", tc.leader)
			other := g.add("m-2", "proc-2", "b:1", tc.old)
			if tc.leader == formatV2 {
				// The old leader cannot read the v3 subscription: one
				// round of version probing first.
				g.rebalance()
				require.Equal(t, ErrVersionProbing, other.last().ErrorCode)
			}
			requireWholeDisjoint(t, g.tasks, g.rebalance())
			for _, m := range []*testMember{lead, other} {
				a := m.last()
				require.Equal(t, int32(2), a.Version, m.id)
				require.Zero(t, a.Epoch, m.id)
				r, ok := AssignmentRouting(a)
				require.True(t, ok)
				require.Equal(t, lead.last().Active, r.Active["a:1"])
				require.Equal(t, other.last().Active, r.Active["b:1"])
				require.Equal(t, lead.last().Standby, r.Standby["a:1"])
				require.Equal(t, other.last().Standby, r.Standby["b:1"])
			}
			// The group's description is no routing table: not one
			// balance's epoch.
			_, err := g.members[0].b.format.groupRouting(g.describe())
			require.ErrorIs(t, err, ErrRoutingUnsettled)
		})
	}

	t.Run("all v3: assignments in v3 without host maps; the group's description is the routing table", func(t *testing.T) {
		g := newFixture(t, 4, 2)
		g.cfg.NumStandbys = 1
		a := g.add("m-1", "proc-1", "a:1", defaultFormat)
		a2 := g.add("m-3", "proc-1", "a:1", defaultFormat)
		b := g.add("m-2", "proc-2", "b:1", defaultFormat)
		requireWholeDisjoint(t, g.tasks, g.rebalance())
		require.Equal(t, int32(3), a.last().Version)
		require.Nil(t, a.last().PartitionsByHost)
		_, ok := AssignmentRouting(a.last())
		require.False(t, ok)
		epoch := a.last().Epoch
		require.NotZero(t, epoch)
		require.Equal(t, epoch, b.last().Epoch)
		r, err := GroupRouting(g.describe())
		require.NoError(t, err)
		require.Equal(t, epoch, r.Epoch)
		require.Equal(t, sortedIDs(slices.Concat(a.last().Active, a2.last().Active)), r.Active["a:1"])
		require.Equal(t, b.last().Active, r.Active["b:1"])
		require.Equal(t, sortedIDs(slices.Concat(a.last().Standby, a2.last().Standby)), r.Standby["a:1"])
		require.Equal(t, b.last().Standby, r.Standby["b:1"])
		require.Len(t, r.Active, 2)

		// The next balance has another epoch.
		g.rebalance()
		require.NotEqual(t, epoch, a.last().Epoch)
		require.Equal(t, a.last().Epoch, b.last().Epoch)
	})

	t.Run("a downgraded member upgrades when the leader can read more", func(t *testing.T) {
		g := newFixture(t, 4, 0)
		m := g.add("m-1", "proc-1", "", defaultFormat)
		probe, err := formatV1.encodeAssignment(AssignmentInfo{ErrorCode: ErrVersionProbing}, 1)
		require.NoError(t, err)
		_, err = m.b.ParseSyncAssignment(probe)
		require.NoError(t, err)
		require.Equal(t, int32(1), peek(m.b.JoinGroupMetadata(nil, nil, 0)))
		fromV3Leader, err := defaultFormat.encodeAssignment(AssignmentInfo{}, 1)
		require.NoError(t, err)
		_, err = m.b.ParseSyncAssignment(fromV3Leader)
		require.NoError(t, err)
		require.Equal(t, int32(3), peek(m.b.JoinGroupMetadata(nil, nil, 0)))
	})

	t.Run("member given a version it cannot read rejoins with its own", func(t *testing.T) {
		g := newFixture(t, 4, 0)
		m := g.add("m-1", "proc-1", "", formatV1)
		enc, err := defaultFormat.encodeAssignment(AssignmentInfo{Active: []task.ID{tid(0, 0)}}, 2)
		require.NoError(t, err)
		parts, err := m.b.ParseSyncAssignment(enc)
		require.NoError(t, err)
		require.Empty(t, parts)
		require.Equal(t, ErrUnsupportedVersion, m.last().ErrorCode)
		require.Equal(t, int32(1), peek(m.b.JoinGroupMetadata(nil, nil, 0)))
	})
}

func TestBalancerEdgeCases(t *testing.T) {
	g := newFixture(t, 2, 1)
	m := g.add("m-1", "proc-1", "", defaultFormat)

	t.Run("empty assignment", func(t *testing.T) {
		parts, err := m.b.ParseSyncAssignment(nil)
		require.NoError(t, err)
		require.Empty(t, parts)
		require.Equal(t, AssignmentInfo{}, m.last())
	})
	t.Run("malformed assignment", func(t *testing.T) {
		_, err := m.b.ParseSyncAssignment([]byte{0xED, 0xD1, 0, 0, 0, 1, 0, 0, 0, 1, 0xff})
		require.ErrorIs(t, err, ErrMalformed)
	})
	t.Run("malformed subscription", func(t *testing.T) {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = "bad"
		jm.ProtocolMetadata = []byte("consumer protocol bytes")
		_, _, err := m.b.MemberBalancer([]kmsg.JoinGroupResponseMember{jm})
		require.ErrorIs(t, err, ErrMalformed)
	})
	t.Run("join metadata is deterministic", func(t *testing.T) {
		m.sub.Tasks = []TaskOffsets{
			{Task: tid(0, 1), Positions: map[string]int64{changelog: 1, "x": 2}},
			{Task: tid(0, 0), Role: RoleActive},
		}
		first := m.b.JoinGroupMetadata(nil, nil, 0)
		for range 10 {
			require.Equal(t, first, m.b.JoinGroupMetadata(nil, nil, 0))
		}
	})
	t.Run("protocol", func(t *testing.T) {
		require.Equal(t, "eddy", m.b.ProtocolName())
		require.True(t, m.b.IsCooperative())
	})
	t.Run("config validation", func(t *testing.T) {
		_, err := NewBalancer(BalancerConfig{})
		require.Error(t, err)
		_, err = NewBalancer(BalancerConfig{Subscription: func() SubscriptionInfo { return SubscriptionInfo{} },
			Tasks: map[task.ID][]string{tid(0, 0): nil}})
		require.Error(t, err)
	})
}

func TestSpreadOverMembersSticky(t *testing.T) {
	ms := []member{
		{id: "m1", sub: SubscriptionInfo{Capacity: 1, OwnedActive: []task.ID{tid(0, 3), tid(0, 4)}}},
		{id: "m2", sub: SubscriptionInfo{Capacity: 1, OwnedActive: []task.ID{tid(0, 0)}, OwnedStandby: []task.ID{tid(0, 9)}}},
		{id: "m3", sub: SubscriptionInfo{Capacity: 2}},
	}
	tasks := map[task.ID]assignor.TaskInfo{}
	for p := range 10 {
		tasks[tid(0, int32(p))] = assignor.TaskInfo{Stateful: true}
	}
	ca := assignor.ClientAssignment{Active: []task.ID{tid(0, 0), tid(0, 1), tid(0, 2), tid(0, 3), tid(0, 4), tid(0, 5), tid(0, 6), tid(0, 7)},
		Standby: []task.ID{tid(0, 8), tid(0, 9)}}
	out := spreadOverMembers(ms, ca, tasks)
	require.Subset(t, out[0].Active, []task.ID{tid(0, 3), tid(0, 4)})
	require.Contains(t, out[1].Active, tid(0, 0))
	require.Len(t, out[0].Active, 2)
	require.Len(t, out[1].Active, 2)
	require.Len(t, out[2].Active, 4)
	require.Equal(t, []task.ID{tid(0, 9)}, out[1].Standby)
	all := slices.Concat(out[0].Active, out[1].Active, out[2].Active)
	require.ElementsMatch(t, ca.Active, all)
}

// A process without a task's directory lags by the whole changelog: on an
// empty or short changelog it is caught up and takes its share of actives at
// once, without warmups; on a long one it warms up first.
func TestBalancerNewcomerLagIsChangelogEnd(t *testing.T) {
	for _, tc := range []struct {
		name       string
		end        int64
		wantActive int
		wantWarmup int
	}{
		{"empty changelogs", 0, 2, 0},
		{"short changelogs", assignor.DefaultAcceptableRecoveryLag, 2, 0},
		{"long changelogs", assignor.DefaultAcceptableRecoveryLag + 1, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFixture(t, 4, 0)
			a := g.add("m-a", "proc-a", "a:1", defaultFormat)
			b := g.add("m-b", "proc-b", "b:1", defaultFormat)
			g.ends = map[string]map[int32]int64{changelog: {}}
			for p := range 4 {
				g.ends[changelog][int32(p)] = tc.end
				a.sub.Tasks = append(a.sub.Tasks, TaskOffsets{Task: tid(0, int32(p)), Role: RoleActive, Positions: map[string]int64{changelog: tc.end}})
			}
			g.rebalance()
			require.Len(t, b.last().Active, tc.wantActive)
			require.Len(t, b.last().Warmup, tc.wantWarmup)
			require.Equal(t, tc.wantWarmup > 0, b.last().NextProbingRebalanceMs > 0)
		})
	}
}

func TestBalancerShutdownApplication(t *testing.T) {
	t.Run("one member asks: every member is told, with the reason", func(t *testing.T) {
		g := newFixture(t, 4, 2)
		a := g.add("m-1", "proc-1", "a:1", defaultFormat)
		b := g.add("m-2", "proc-2", "b:1", defaultFormat)
		c := g.add("m-3", "proc-3", "c:1", defaultFormat)
		requireWholeDisjoint(t, g.tasks, g.rebalance())
		b.sub.ShutdownReason = "task 0_1: poison record"
		got := g.rebalance()
		for _, m := range []*testMember{a, b, c} {
			require.Empty(t, got[m.id], "member %s keeps no partitions", m.id)
			require.Equal(t, ErrShutdownApplication, m.last().ErrorCode)
			require.Equal(t, "task 0_1: poison record", m.last().ShutdownReason)
			require.Empty(t, m.last().Active)
		}
	})
	t.Run("a version 1 encoding drops the request", func(t *testing.T) {
		enc, err := EncodeSubscription(SubscriptionInfo{ProcessID: "p", ShutdownReason: "why"}, 1)
		require.NoError(t, err)
		got, err := DecodeSubscription(enc)
		require.NoError(t, err)
		require.Empty(t, got.ShutdownReason)
		enc, err = EncodeSubscription(SubscriptionInfo{ProcessID: "p", ShutdownReason: "why"}, 2)
		require.NoError(t, err)
		got, err = DecodeSubscription(enc)
		require.NoError(t, err)
		require.Equal(t, "why", got.ShutdownReason)
		ea, err := EncodeAssignment(AssignmentInfo{ErrorCode: ErrShutdownApplication, ShutdownReason: "why"}, 2)
		require.NoError(t, err)
		ga, err := DecodeAssignment(ea)
		require.NoError(t, err)
		require.Equal(t, "why", ga.ShutdownReason)
	})
}

// A user's AssignFunc replaces Assign; an invalid output fails the balance.
func TestBalancerAssignFunc(t *testing.T) {
	g := newFixture(t, 2, 0)
	var seen assignor.Input
	g.assign = func(cfg assignor.Config, in assignor.Input) assignor.Output {
		seen = in
		out := assignor.Output{Clients: map[string]assignor.ClientAssignment{}}
		for id := range in.Clients {
			out.Clients[id] = assignor.ClientAssignment{}
		}
		all := slices.SortedFunc(maps.Keys(in.Tasks), task.ID.Compare)
		out.Clients["proc-b"] = assignor.ClientAssignment{Active: all}
		return out
	}
	g.add("m-a", "proc-a", "", defaultFormat)
	g.add("m-b", "proc-b", "", defaultFormat)
	got := g.rebalance()
	require.Empty(t, got["m-a"])
	require.Equal(t, map[string][]int32{"left": {0, 1}, "right": {0, 1}}, got["m-b"])
	require.Len(t, seen.Clients, 2)
	require.Len(t, seen.Tasks, 2)

	// An output that leaves a task unassigned is refused.
	g.assign = func(cfg assignor.Config, in assignor.Input) assignor.Output {
		return assignor.Output{Clients: map[string]assignor.ClientAssignment{}}
	}
	g2 := newFixture(t, 2, 0)
	g2.assign = g.assign
	g2.add("m-a", "proc-a", "", defaultFormat)
	var join []kmsg.JoinGroupResponseMember
	for _, m := range g2.members {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.id
		jm.ProtocolMetadata = m.b.JoinGroupMetadata([]string{"events", "left", "right"}, nil, 1)
		join = append(join, jm)
	}
	mb, _, err := g2.members[0].b.MemberBalancer(join)
	require.NoError(t, err)
	_, err = mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"left": 16, "right": 16, "events": 16})
	require.ErrorContains(t, err, "assignor.AssignFunc")
	require.Len(t, g2.errs, 1)
}

// With ActiveRackTag set, the leader asks for the racks of the tasks' input
// leaders and hands them to the placement; a failed lookup places actives
// without them rather than failing the rebalance.
func TestBalancerTaskRacks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tag     string
		err     error
		want    map[task.ID][]string
		lookups int
	}{
		{name: "rack tag set", tag: "rack", want: map[task.ID][]string{{SubTopology: 0, Partition: 0}: {"r1"}}, lookups: 1},
		{name: "lookup fails", tag: "rack", err: errors.New("metadata unavailable"), lookups: 1},
		{name: "no rack tag", lookups: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFixture(t, 2, 0)
			g.cfg.ActiveRackTag = tc.tag
			lookups := 0
			g.racks = func(ctx context.Context) (map[task.ID][]string, error) {
				lookups++
				_, ok := ctx.Deadline()
				require.True(t, ok, "the lookup is bounded")
				if tc.err != nil {
					return nil, tc.err
				}
				return map[task.ID][]string{{SubTopology: 0, Partition: 0}: {"r1"}}, nil
			}
			var seen assignor.Input
			g.assign = func(cfg assignor.Config, in assignor.Input) assignor.Output {
				seen = in
				return assignor.Assign(cfg, in)
			}
			g.add("m-a", "proc-a", "", defaultFormat)
			g.add("m-b", "proc-b", "", defaultFormat)
			g.rebalance()
			require.Equal(t, tc.lookups, lookups)
			require.Equal(t, tc.want, seen.TaskRacks)
			require.Empty(t, g.errs)
		})
	}
}

func tid(sub int, part int32) task.ID { return task.ID{SubTopology: sub, Partition: part} }

// A leader hands its balance's target to the next balance of the same
// members, so that a migration's probing rounds head for one placement,
// and computes it anew once the members change.
func TestBalancerHandsTheTargetOn(t *testing.T) {
	g := newFixture(t, 4, 0)
	var seen []assignor.Target
	var handed []assignor.Target
	g.assign = func(cfg assignor.Config, in assignor.Input) assignor.Output {
		seen = append(seen, in.Target)
		out := assignor.Assign(cfg, in)
		handed = append(handed, out.Target)
		return out
	}
	a := g.add("m-a", "proc-a", "a:1", defaultFormat)
	g.add("m-b", "proc-b", "b:1", defaultFormat)
	for p := range 4 {
		a.sub.Tasks = append(a.sub.Tasks, TaskOffsets{Task: tid(0, int32(p)), Role: RoleActive})
	}
	g.ends = map[string]map[int32]int64{changelog: {0: 1e6, 1: 1e6, 2: 1e6, 3: 1e6}}

	g.rebalance()
	require.Nil(t, seen[0])
	require.NotNil(t, handed[0], "a warmup starts: the balance has a target to hand on")
	g.rebalance()
	require.Equal(t, handed[0], seen[1])

	// b leads one balance: a's target is no longer the last one.
	g.members[0], g.members[1] = g.members[1], g.members[0]
	g.rebalance()
	g.members[0], g.members[1] = g.members[1], g.members[0]
	g.rebalance()
	require.Nil(t, seen[3], "another leader balanced since")
	require.NotNil(t, handed[3])

	g.add("m-c", "proc-c", "c:1", defaultFormat)
	g.rebalance()
	require.Nil(t, seen[4], "a member joined")
}
