package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// handoverRig is an instance with two stream threads that never join a
// group: the test calls their rebalance callbacks itself, in the order it
// chooses, as the group client of each would.
type handoverRig struct {
	app *App
	th  []*thread
}

const handoverRecords = 50

var (
	task00 = task.ID{SubTopology: 0, Partition: 0}
	task01 = task.ID{SubTopology: 0, Partition: 1}
)

func newHandoverRig(t *testing.T) *handoverRig {
	b, _ := startBroker(t, "in")
	app, err := New(countTopology(t), Config{ApplicationID: "handover", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 2})
	require.NoError(t, err)
	require.NoError(t, app.prepare(context.Background()))
	r := &handoverRig{app: app}
	for i := range 2 {
		th := unconnectedThread(app, i, cache.NewBudget(0))
		th.rest, err = newRestorer(app, th.log)
		require.NoError(t, err)
		cl, err := kgo.NewClient(app.clientOpts()...)
		require.NoError(t, err)
		th.attach(cl)
		r.th = append(r.th, th)
	}
	app.threads = r.th
	app.threadsUp.Store(true)
	app.state.Store(int32(StateRunning))
	app.serving.Store(true)
	t.Cleanup(func() {
		for _, th := range r.th {
			th.lockIdle()
			th.dropAll()
			th.mu.Unlock()
			th.cl.Close()
			th.out.close()
			th.rest.close()
		}
		app.releaseResources()
	})

	// The changelog of both tasks' store already holds records, so a
	// replica opened anew would have to read them again.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	topic := changelog.TopicName("handover", "counts")
	for p := range int32(2) {
		for i := range handoverRecords {
			rec := &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "k%d", i), Value: []byte{0, 0, 0, 0, 0, 0, 0, 1}}
			require.NoError(t, cl.ProduceSync(context.Background(), rec).FirstErr())
		}
	}
	return r
}

// assign hands thread i an assignment, as a sync the coordinator answered
// does; the rig's threads have no client to probe the group with, so their
// contact counts from every assignment.
func (r *handoverRig) assign(i int, info groupproto.AssignmentInfo) {
	r.th[i].contact.confirm(time.Now())
	r.th[i].synced.Store(&info)
	r.th[i].onAssigned(context.Background(), nil, nil)
}

func (r *handoverRig) revokeAll() {
	for _, th := range r.th {
		th.onRevoked(context.Background(), nil, nil)
	}
}

func (r *handoverRig) counts(id task.ID) ReplicaInfo {
	ri, _ := r.app.registry.replica(id, "counts")
	return ri
}

// restored is what the instance reports as restored into a task.
func (r *handoverRig) restored(id task.ID) int64 {
	for _, ti := range r.app.Tasks() {
		if ti.ID == id {
			return ti.Restored
		}
	}
	return -1
}

// waitRunning steps a thread's restoration, as its loop would, until the
// task runs.
func (r *handoverRig) waitRunning(t *testing.T, i int, id task.ID) {
	t.Helper()
	th := r.th[i]
	waitFor(t, 10*time.Second, fmt.Sprintf("task %s running on thread %d", id, i), func() bool {
		require.NoError(t, th.startWaiting())
		require.NoError(t, th.restoreStep())
		th.publishTasks() // as the loop's pass ends: App.Tasks reads what it published
		th.lockIdle()
		defer th.mu.Unlock()
		return th.running(id) != nil
	})
}

// backing returns the store a thread's task runs on.
func (r *handoverRig) backing(t *testing.T, i int, id task.ID) statestore.Store {
	t.Helper()
	th := r.th[i]
	th.lockIdle()
	defer th.mu.Unlock()
	tk := th.task(id)
	require.NotNil(t, tk, "thread %d has no task %s", i, id)
	h, ok := tk.Store("counts")
	require.True(t, ok)
	return h.Inner
}

// A standby promoted to active on another thread of its instance keeps its
// open store whichever of the two threads handles its new assignment first:
// the thread that does not get the task must not close the standby under
// the one that does. The ordering is forced here; in a group it is a race
// between the threads' callbacks.
func TestStandbyPromotedOnAnotherThreadKeepsItsStore(t *testing.T) {
	t.Parallel()
	for _, order := range [][]int{{0, 1}, {1, 0}} {
		t.Run(fmt.Sprintf("thread %d assigned first", order[0]), func(t *testing.T) {
			r := newHandoverRig(t)
			// Thread 0 follows 0_0 as a standby; thread 1 runs 0_1.
			r.assign(0, groupproto.AssignmentInfo{Standby: []task.ID{task00}})
			r.assign(1, groupproto.AssignmentInfo{Active: []task.ID{task01}})
			waitFor(t, 10*time.Second, "standby 0_0 caught up", func() bool {
				ri := r.counts(task00)
				return ri.State == task.Standby && ri.Position == handoverRecords && ri.Lag == 0
			})
			r.waitRunning(t, 1, task01)
			standbyStore := r.counts(task00).Backing

			// The next assignment moves 0_0 to thread 1 as active, and
			// 0_1 to thread 0.
			r.revokeAll()
			next := map[int]groupproto.AssignmentInfo{
				0: {Active: []task.ID{task01}},
				1: {Active: []task.ID{task00}},
			}
			for _, i := range order {
				r.assign(i, next[i])
				ri, open := r.app.registry.replica(task00, "counts")
				require.True(t, open, "0_0 not open here after thread %d's assignment", i)
				require.Same(t, standbyStore, ri.Backing, "0_0 reopened after thread %d's assignment", i)
			}
			r.waitRunning(t, 1, task00)
			r.waitRunning(t, 0, task01)
			require.Same(t, standbyStore, r.backing(t, 1, task00), "the promoted task runs on the standby's store")
			require.Zero(t, r.restored(task00), "the promoted standby restored records again")
			require.Equal(t, task.Running, r.counts(task00).State)
			require.NoError(t, r.app.Err())
		})
	}
}

// An active task released by one thread and claimed by another thread of the
// same instance moves with its open store, whichever thread handles the
// assignment first; a replica nobody claims is closed once every thread has
// its assignment, not before.
func TestActiveMovesBetweenThreadsWithoutReopening(t *testing.T) {
	t.Parallel()
	for _, order := range [][]int{{0, 1}, {1, 0}} {
		t.Run(fmt.Sprintf("thread %d assigned first", order[0]), func(t *testing.T) {
			r := newHandoverRig(t)
			r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task00, task01}})
			r.assign(1, groupproto.AssignmentInfo{})
			r.waitRunning(t, 0, task00)
			r.waitRunning(t, 0, task01)
			stores := map[task.ID]statestore.Store{task00: r.backing(t, 0, task00), task01: r.backing(t, 0, task01)}
			require.EqualValues(t, handoverRecords, r.restored(task00), "0_0 restored from scratch on thread 0")

			// 0_0 moves to thread 1; 0_1 leaves the instance.
			r.revokeAll()
			next := map[int]groupproto.AssignmentInfo{
				0: {},
				1: {Active: []task.ID{task00}},
			}
			r.assign(order[0], next[order[0]])
			for id, s := range stores {
				ri, open := r.app.registry.replica(id, "counts")
				require.True(t, open, "%s closed before every thread had its assignment", id)
				require.Same(t, s, ri.Backing)
			}
			r.assign(order[1], next[order[1]])
			_, open := r.app.registry.replica(task01, "counts")
			require.False(t, open, "0_1, assigned nowhere here, is still open")
			r.waitRunning(t, 1, task00)
			require.Same(t, stores[task00], r.backing(t, 1, task00), "0_0 was reopened on thread 1")
			// The count of records restored into 0_0 belongs to the
			// instance: it neither grows (nothing was read again) nor
			// starts over on the new thread.
			require.EqualValues(t, handoverRecords, r.restored(task00))
			require.EqualValues(t, handoverRecords, r.counts(task00).Restored)
			require.EqualValues(t, 2*handoverRecords, r.app.Stats().RestoredRecords)
			require.NoError(t, r.app.Err())
		})
	}
}

// A task assigned to a thread while another thread of the instance still
// holds it (that thread fell out of the group and has not noticed yet)
// waits, input paused, until the holder lets it go, then starts on the
// store the holder released; it never opens the store a second time.
func TestTaskHeldByAnotherThreadStartsWhenReleased(t *testing.T) {
	r := newHandoverRig(t)
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task00}})
	r.assign(1, groupproto.AssignmentInfo{})
	r.waitRunning(t, 0, task00)
	held := r.backing(t, 0, task00)

	// Thread 1 is assigned 0_0 in a generation thread 0 is not part of.
	r.th[1].onRevoked(context.Background(), nil, nil)
	r.assign(1, groupproto.AssignmentInfo{Active: []task.ID{task00}})
	in := r.th[1].inputPartitions(task00)
	th1 := r.th[1]
	for range 3 {
		require.NoError(t, th1.startWaiting())
		th1.lockIdle()
		started := th1.task(task00) != nil
		th1.mu.Unlock()
		require.False(t, started, "thread 1 started 0_0 while thread 0 runs it")
	}
	require.Equal(t, in, th1.cl.PauseFetchPartitions(nil), "input of the waiting task is not paused")
	require.False(t, r.app.Ready(), "ready with a task waiting to start")
	require.Equal(t, task.Running, r.counts(task00).State, "0_0 no longer runs on thread 0")
	require.Same(t, held, r.counts(task00).Backing)

	// Thread 0 notices and lets it go, committing first.
	r.th[0].onRevoked(context.Background(), nil, nil)
	r.waitRunning(t, 1, task00)
	require.Same(t, held, r.backing(t, 1, task00))
	require.Empty(t, th1.cl.PauseFetchPartitions(nil), "input of the started task still paused")
	require.NoError(t, r.app.Err())
}

// A task revoked before its restoration finished is parked standing
// behind its changelog: its replica must not report the changelog's end as
// reached (lag 0, caught up as of the parking), as a task parked after
// running does, but an unknown lag until a reader lists the end.
func TestTaskParkedWhileRestoringClaimsNoLag(t *testing.T) {
	r := newHandoverRig(t)
	// Parked once it ran, the task stands at its changelog's end.
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task00}})
	r.waitRunning(t, 0, task00)
	r.revokeAll()
	ri := r.counts(task00)
	require.Equal(t, task.Parked, ri.State)
	require.Equal(t, int64(handoverRecords), ri.Position)
	require.Equal(t, int64(0), ri.Lag)

	// Another owner writes the changelog on, then the task comes back
	// here and is revoked again before it restored what it lacks.
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.app.cfg.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	for i := range handoverRecords {
		rec := &kgo.Record{Topic: changelog.TopicName("handover", "counts"), Partition: 0, Key: fmt.Appendf(nil, "k%d", i), Value: []byte{0, 0, 0, 0, 0, 0, 0, 2}}
		require.NoError(t, cl.ProduceSync(context.Background(), rec).FirstErr())
	}
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task00}})
	require.Equal(t, task.Restoring, r.counts(task00).State)
	r.revokeAll()
	ri = r.counts(task00)
	require.Equal(t, task.Parked, ri.State)
	// Its restoration may have read the records meanwhile, but the
	// parking cannot tell: it claims no lag either way.
	require.Equal(t, int64(-1), ri.Lag, "a task parked while restoring claims no lag: %+v", ri)
	info := toIQAt(ri, time.Now(), contactWindow(r.app.cfg))
	require.False(t, iq.MaxLag(handoverRecords-1).Allows(info), "passes a lag bound it cannot vouch for: %+v", info)
	require.False(t, iq.MaxAge(time.Hour).Allows(info), "passes an age bound it cannot vouch for: %+v", info)
}

// A heartbeat the coordinator answers with an unknown member or an old
// generation (the group rebalanced without this instance's member) makes
// the replicas held for that member refuse queries as rebalancing at once,
// actives and standbys alike, rather than after the session timeout; the
// next confirmation lifts it. An answer about a member the client has
// already replaced refutes nothing.
func TestRefutedMemberStopsAnswering(t *testing.T) {
	r := newHandoverRig(t)
	r.app.threadsUp.Store(true) // as Start leaves it: replicas no thread owns take the threads' contact
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task00}})
	r.waitRunning(t, 0, task00)
	r.assign(1, groupproto.AssignmentInfo{Standby: []task.ID{task01}})
	q := r.app.Queries()
	waitFor(t, 10*time.Second, "the active and the standby answer", func() bool {
		_, err0 := q.Replica("counts", 0)
		_, err1 := q.Replica("counts", 1)
		return err0 == nil && err1 == nil
	})

	r.th[0].contact.heard(time.Now(), kerr.UnknownMemberID.Code, false, 0)
	_, err := q.Replica("counts", 0)
	require.NoError(t, err, "an answer about a member the client no longer has refutes nothing")

	r.th[0].contact.heard(time.Now(), kerr.UnknownMemberID.Code, true, 0)
	_, err = q.Replica("counts", 0)
	require.ErrorIs(t, err, iq.ErrRebalancing, "the active of a member the coordinator no longer knows")
	_, err = q.Replica("counts", 1)
	require.NoError(t, err, "the standby's thread was not refuted")
	r.th[1].contact.heard(time.Now(), kerr.IllegalGeneration.Code, true, 0)
	_, err = q.Replica("counts", 1)
	require.ErrorIs(t, err, iq.ErrRebalancing, "the standby of a member the group rebalanced without")

	r.th[0].contact.heard(time.Now(), 0, true, 0)
	_, err = q.Replica("counts", 0)
	require.NoError(t, err, "confirmed again")
}

// A replaced thread's new client may hear its assignment before the exit
// of the thread it replaces is reported: the registry keeps what the
// replacement took for when that exit lands, rather than the exit
// forgetting it, and opens the standby it names then.
func TestReplacementsShareHeardBeforeItsPredecessorsExitIsKept(t *testing.T) {
	b, _ := startBroker(t, "in")
	app, err := New(countTopology(t), Config{ApplicationID: "repl", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1})
	require.NoError(t, err)
	require.NoError(t, app.prepare(context.Background()))
	t.Cleanup(app.releaseResources)
	r := app.registry

	r.setShare(0, 0, groupproto.AssignmentInfo{})
	// The replacement (incarnation 1) takes its share: held for the exit.
	r.setShare(0, 1, groupproto.AssignmentInfo{Standby: []task.ID{task00}})
	_, standby, _ := r.instanceShare()
	require.Empty(t, standby, "applied before the predecessor's exit")
	r.threadExited(0, 0, true)
	_, standby, _ = r.instanceShare()
	require.Equal(t, []task.ID{task00}, standby)
	r.mu.Lock()
	_, open := r.core.Replica(task00)
	r.mu.Unlock()
	require.True(t, open, "the replacement's standby is not opened")
}
