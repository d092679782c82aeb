package runtime

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/task"
)

// transitionLog records the state transitions an App's replicas and tasks
// make, and those refused.
type transitionLog struct {
	mu      sync.Mutex
	moves   map[string][]string // kind/task → "from>to", in order
	refused []string
}

func watchTransitions(a *App) *transitionLog {
	l := &transitionLog{moves: make(map[string][]string)}
	a.transitionHook = func(kind string, id task.ID, from, to task.State, err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil {
			l.refused = append(l.refused, kind+" "+err.Error())
			return
		}
		k := kind + "/" + id.String()
		l.moves[k] = append(l.moves[k], from.String()+">"+to.String())
	}
	return l
}

func (l *transitionLog) of(kind string, id task.ID) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.moves[kind+"/"+id.String()]...)
}

// The registry's replicas and the threads' tasks move only along the
// transition table through a standby opened, retagged as a warmup and
// promoted; an active demoted (parked) by a revocation and adopted as a
// standby, then closed; an active parked and claimed back by another
// thread; and a close. Each step is checked against the state queries and
// the assignor see.
func TestReplicaLifecycleTransitions(t *testing.T) {
	r := newHandoverRig(t)
	log := watchTransitions(r.app)
	state := func(id task.ID) task.State {
		ri, ok := r.app.registry.replica(id, "counts")
		require.True(t, ok, "%s not listed", id)
		return ri.State
	}
	subscribed := func(id task.ID) groupproto.TaskRole {
		for _, to := range r.app.registry.subscription() {
			if to.Task == id {
				return to.Role
			}
		}
		t.Fatalf("%s not in the subscription", id)
		return 0
	}

	// 0_1 active on thread 0, 0_0 a standby (opened by thread 1's
	// reconciliation), then a warmup.
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task01}})
	r.assign(1, groupproto.AssignmentInfo{Standby: []task.ID{task00}})
	r.waitRunning(t, 0, task01)
	require.Equal(t, task.Standby, state(task00))
	r.assign(1, groupproto.AssignmentInfo{Warmup: []task.ID{task00}})
	require.Equal(t, task.Warmup, state(task00))
	require.Equal(t, groupproto.RoleStandby, subscribed(task00))
	require.Equal(t, groupproto.RoleActive, subscribed(task01))

	// Revocation: 0_1 is parked. The warmup is promoted on thread 0 and
	// the parked active adopted as thread 1's standby.
	r.revokeAll()
	require.Equal(t, task.Parked, state(task01))
	require.Equal(t, groupproto.RoleNone, subscribed(task01))
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task00}})
	require.Equal(t, task.Restoring, state(task00))
	r.assign(1, groupproto.AssignmentInfo{Standby: []task.ID{task01}})
	require.Equal(t, task.Standby, state(task01))
	r.waitRunning(t, 0, task00)

	// Revoked again, 0_0 moves to thread 1 (claimed back from Parked) and
	// 0_1's standby, wanted by nobody, closes once both threads know.
	r.revokeAll()
	require.Equal(t, task.Parked, state(task00))
	r.assign(1, groupproto.AssignmentInfo{Active: []task.ID{task00}})
	r.assign(0, groupproto.AssignmentInfo{})
	r.waitRunning(t, 1, task00)
	_, open := r.app.registry.replica(task01, "counts")
	require.False(t, open, "the standby nobody wants is closed")

	// Close.
	th := r.th[1]
	th.lockIdle()
	th.dropAll()
	th.mu.Unlock()
	_, open = r.app.registry.replica(task00, "counts")
	require.False(t, open)

	require.Equal(t, []string{
		"created>standby", "standby>warmup", "warmup>restoring", "restoring>running", "running>parked",
		"parked>restoring", "restoring>running", "running>closed",
	}, log.of("replica", task00))
	require.Equal(t, []string{
		"created>restoring", "restoring>running", "running>parked", "parked>standby", "standby>closed",
	}, log.of("replica", task01))
	log.mu.Lock()
	defer log.mu.Unlock()
	require.Empty(t, log.refused)
	require.NoError(t, r.app.Err())
}

// A task revoked while it restores is parked, claimed back restoring, and
// closed when its thread loses its partitions.
func TestReplicaRevokedWhileRestoringThenLost(t *testing.T) {
	r := newHandoverRig(t)
	log := watchTransitions(r.app)
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task01}})
	r.assign(1, groupproto.AssignmentInfo{})
	r.revokeAll()
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task01}})
	r.assign(1, groupproto.AssignmentInfo{})
	ri, ok := r.app.registry.replica(task01, "counts")
	require.True(t, ok)
	require.Equal(t, task.Restoring, ri.State)
	r.th[0].onLost(t.Context(), nil, nil)
	_, ok = r.app.registry.replica(task01, "counts")
	require.False(t, ok)

	require.Equal(t, []string{"created>restoring", "restoring>parked", "parked>restoring", "restoring>closed"}, log.of("replica", task01))
	log.mu.Lock()
	defer log.mu.Unlock()
	require.Empty(t, log.refused)
}

func TestEdgeRoles(t *testing.T) {
	type roles struct {
		assignor groupproto.TaskRole
		query    iq.Role
	}
	want := map[task.State]roles{
		task.Created:   {groupproto.RoleNone, iq.RoleRestoring},
		task.Restoring: {groupproto.RoleNone, iq.RoleRestoring},
		task.Running:   {groupproto.RoleActive, iq.RoleActive},
		task.Parked:    {groupproto.RoleNone, iq.RoleStandby},
		task.Standby:   {groupproto.RoleStandby, iq.RoleStandby},
		task.Warmup:    {groupproto.RoleStandby, iq.RoleWarmup},
	}
	for s, w := range want {
		a, q := edgeRoles(s)
		require.Equal(t, w, roles{a, q}, "%s", s)
		now := time.Now()
		require.Equal(t, w.query, toIQAt(ReplicaInfo{State: s, End: -1, Lag: -1, Contact: now}, now, time.Second).Role, "queries see %s through edgeRoles", s)
	}
}

// A stopping instance's threads report their exits to the registry's core
// once they have closed their actives: it forgets their shares and owns
// nothing on their behalf.
func TestStoppedThreadsReportTheirExit(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	app, err := New(countTopology(t), Config{ApplicationID: "exits", Brokers: b.Addrs(), StateDir: t.TempDir(),
		NumStreamThreads: 2, Logger: testLogger(t)})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	waitFor(t, 30*time.Second, "both tasks running", func() bool { return runningTasks(app) == 2 })
	require.NoError(t, app.Close(context.Background()))
	r := app.registry
	r.mu.Lock()
	defer r.mu.Unlock()
	for th := range 2 {
		_, known := r.core.Share(th)
		require.False(t, known, "thread %d's share outlives its exit", th)
	}
	for _, id := range r.core.Tasks() {
		c, _ := r.core.Replica(id)
		require.Negative(t, c.Owner, "%s still owned after the threads exited: %+v", id, c)
	}
}
