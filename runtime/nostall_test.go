package runtime

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

func tid(p int32) task.ID { return task.ID{SubTopology: 0, Partition: p} }

// blockingOpens makes an App's openings of one task's stores wait until
// released, reporting when one starts waiting.
type blockingOpens struct {
	id       task.ID
	started  chan struct{}
	release  chan struct{}
	once     sync.Once
	released sync.Once
}

func blockOpens(t *testing.T, a *App, id task.ID) *blockingOpens {
	b := &blockingOpens{id: id, started: make(chan struct{}), release: make(chan struct{})}
	a.openStoreHook = func(id task.ID, info topology.StoreInfo, open func() (statestore.Store, error)) (statestore.Store, error) {
		if id == b.id {
			b.once.Do(func() { close(b.started) })
			<-b.release
		}
		return open()
	}
	// A failing test must not leave a reconciliation blocked for ever.
	t.Cleanup(b.unblock)
	return b
}

func (b *blockingOpens) unblock() { b.released.Do(func() { close(b.release) }) }

func (b *blockingOpens) blocked() bool {
	select {
	case <-b.release:
		return false
	default:
		return true
	}
}

// within runs f in its own goroutine and fails the test if it does not
// return within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
	}
}

// keyOn finds a key of the rig's changelogs that the default partitioner
// places on a partition.
func keyOn(t *testing.T, a *App, p int32) []byte {
	for i := range handoverRecords {
		k := fmt.Appendf(nil, "k%d", i)
		if got, err := a.Queries().KeyPartition("counts", k); err == nil && got == p {
			return k
		}
	}
	t.Fatalf("no key of partition %d", p)
	return nil
}

// Queries, local reads and metrics answer while a reconciliation waits on
// a store that is slow to open: the open happens outside any lock they
// take, and the replica being opened is simply not listed until it is.
func TestQueriesDoNotWaitForAStoreOpening(t *testing.T) {
	r := newHandoverRig(t)
	open := blockOpens(t, r.app, task00)
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task01}})
	r.waitRunning(t, 0, task01)

	assigned := make(chan struct{})
	go func() {
		defer close(assigned)
		r.assign(1, groupproto.AssignmentInfo{Standby: []task.ID{task00}})
	}()
	select {
	case <-open.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the standby's store was never opened")
	}

	q := r.app.Queries()
	metrics := prometheus.NewRegistry()
	require.NoError(t, metrics.Register(r.app.Metrics()))
	const deadline = time.Second
	within(t, deadline, "Replica of the running active", func() {
		rep, err := q.Replica("counts", 1)
		require.NoError(t, err)
		require.Equal(t, iq.RoleActive, rep.Info().Role)
	})
	within(t, deadline, "Replica of the standby being opened", func() {
		_, err := q.Replica("counts", 0)
		require.True(t, errors.Is(err, iq.ErrNotHostedHere) || errors.Is(err, iq.ErrRebalancing), "got %v", err)
	})
	within(t, deadline, "LocalReplicas", func() {
		var parts []int32
		for _, ri := range q.LocalReplicas() {
			parts = append(parts, ri.Partition)
		}
		require.Equal(t, []int32{1}, parts, "only the active is listed while the standby opens")
	})
	within(t, deadline, "App.Replicas", func() {
		require.Len(t, r.app.Replicas(), 1)
	})
	within(t, deadline, "a key query", func() {
		_, found, p, err := activeGet(r.app, "counts", keyOn(t, r.app, 1))
		require.NoError(t, err)
		require.EqualValues(t, 1, p)
		require.True(t, found)
	})
	within(t, deadline, "a metrics scrape", func() {
		_, err := metrics.Gather()
		require.NoError(t, err)
	})
	require.True(t, open.blocked(), "the opening was let go before the queries ran")

	open.unblock()
	select {
	case <-assigned:
	case <-time.After(10 * time.Second):
		t.Fatal("the assignment never finished")
	}
	ri, ok := r.app.registry.replica(task00, "counts")
	require.True(t, ok, "the standby is not listed once open")
	require.Equal(t, task.Standby, ri.State)
	require.NoError(t, r.app.Err())
}

// A task assigned to a thread while a reconciliation is still opening its
// stores as a standby (the thread is a generation ahead) waits for the
// opening, then promotes the standby: the directory is never opened twice.
func TestTaskClaimedWhileItsStandbyOpensWaits(t *testing.T) {
	r := newHandoverRig(t)
	open := blockOpens(t, r.app, task00)
	r.assign(0, groupproto.AssignmentInfo{})

	assigned := make(chan struct{})
	go func() {
		defer close(assigned)
		r.assign(1, groupproto.AssignmentInfo{Standby: []task.ID{task00}})
	}()
	select {
	case <-open.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the standby's store was never opened")
	}

	// Thread 0 is assigned 0_0 in a generation thread 1 has not joined.
	// Its callbacks neither wait for the opening nor open the store
	// themselves.
	within(t, time.Second, "the revocation and assignment of thread 0", func() {
		r.th[0].onRevoked(t.Context(), nil, nil)
		r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task00}})
	})
	th0 := r.th[0]
	th0.lockIdle()
	started := th0.task(task00) != nil
	slot, _ := th0.core.Slot(task00)
	th0.mu.Unlock()
	require.False(t, started, "thread 0 started 0_0 while its standby was opening")
	require.Equal(t, threadcore.Waiting, slot)

	open.unblock()
	select {
	case <-assigned:
	case <-time.After(10 * time.Second):
		t.Fatal("thread 1's assignment never finished")
	}
	standby, ok := r.app.registry.replica(task00, "counts")
	require.True(t, ok)
	r.waitRunning(t, 0, task00)
	require.Same(t, standby.Backing, r.backing(t, 0, task00), "0_0 was opened again instead of promoted")
	require.NoError(t, r.app.Err())
}

// slowClose is a store whose Close waits until released.
type slowClose struct {
	statestore.Store
	started chan struct{}
	release chan struct{}
}

func (s *slowClose) Close() error {
	close(s.started)
	<-s.release
	return s.Store.Close()
}

// Queries answer while a reconciliation waits on a store that is slow to
// close; the standby being closed is no longer listed.
func TestQueriesDoNotWaitForAStoreClosing(t *testing.T) {
	r := newHandoverRig(t)
	slow := &slowClose{started: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(slow.release) }) }
	t.Cleanup(unblock)
	r.app.openStoreHook = func(id task.ID, info topology.StoreInfo, open func() (statestore.Store, error)) (statestore.Store, error) {
		s, err := open()
		if err != nil || id != task00 {
			return s, err
		}
		slow.Store = s
		return slow, nil
	}
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task01}})
	r.assign(1, groupproto.AssignmentInfo{Standby: []task.ID{task00}})
	r.waitRunning(t, 0, task01)
	_, ok := r.app.registry.replica(task00, "counts")
	require.True(t, ok)

	// Every thread has its assignment and none wants 0_0 any more.
	assigned := make(chan struct{})
	go func() {
		defer close(assigned)
		r.assign(1, groupproto.AssignmentInfo{})
	}()
	select {
	case <-slow.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the standby's store was never closed")
	}
	q := r.app.Queries()
	within(t, time.Second, "Replica of the running active", func() {
		rep, err := q.Replica("counts", 1)
		require.NoError(t, err)
		require.Equal(t, iq.RoleActive, rep.Info().Role)
	})
	within(t, time.Second, "Replica of the standby being closed", func() {
		_, err := q.Replica("counts", 0)
		require.ErrorIs(t, err, iq.ErrNotHostedHere)
	})
	within(t, time.Second, "LocalReplicas", func() {
		require.Len(t, q.LocalReplicas(), 1)
	})
	within(t, time.Second, "a key query", func() {
		_, found, _, err := activeGet(r.app, "counts", keyOn(t, r.app, 1))
		require.NoError(t, err)
		require.True(t, found)
	})
	unblock()
	select {
	case <-assigned:
	case <-time.After(10 * time.Second):
		t.Fatal("the assignment never finished")
	}
	_, ok = r.app.registry.replica(task00, "counts")
	require.False(t, ok, "the standby nobody wants is still open")
	require.NoError(t, r.app.Err())
}

// A revoked active, parked, stays queryable while it is adopted as a
// standby, even when the same reconciliation first waits on another
// standby's store closing: the adoption opens nothing and goes first, and
// the replica answers as parked until it follows its changelog, with the
// lag it committed at (a survivor's copy during a cooperative rebalance,
// which the routing table names as the partition's standby).
func TestParkedReplicaAnswersWhileAdoptedAsStandby(t *testing.T) {
	r := newHandoverRig(t)
	slow := &slowClose{started: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(slow.release) }) }
	t.Cleanup(unblock)
	r.app.openStoreHook = func(id task.ID, info topology.StoreInfo, open func() (statestore.Store, error)) (statestore.Store, error) {
		s, err := open()
		if err != nil || id != task00 {
			return s, err
		}
		slow.Store = s
		return slow, nil
	}
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task01}})
	r.assign(1, groupproto.AssignmentInfo{Standby: []task.ID{task00}})
	r.waitRunning(t, 0, task01)

	// Round one of a cooperative rebalance: 0_1 is revoked (parked); the
	// new balance wants it as a standby here and 0_0's standby elsewhere.
	r.revokeAll()
	require.Equal(t, task.Parked, r.counts(task01).State)
	r.assign(0, groupproto.AssignmentInfo{})
	assigned := make(chan struct{})
	go func() {
		defer close(assigned)
		r.assign(1, groupproto.AssignmentInfo{Standby: []task.ID{task01}})
	}()
	select {
	case <-slow.started:
	case <-time.After(10 * time.Second):
		t.Fatal("0_0's standby store was never closed")
	}
	q := iq.NewQuerier(r.app.Queries())
	within(t, time.Second, "a lookup on the parked replica being adopted", func() {
		res, err := q.GetBytes(t.Context(), "counts", keyOn(t, r.app, 1), iq.WithStaleness(iq.MaxLag(10_000)))
		require.NoError(t, err)
		require.True(t, res.Found)
		require.Equal(t, iq.RoleStandby, res.Provenance.Role)
		require.GreaterOrEqual(t, res.Provenance.Lag, int64(0))
	})
	unblock()
	select {
	case <-assigned:
	case <-time.After(10 * time.Second):
		t.Fatal("the assignment never finished")
	}
	ri := r.counts(task01)
	require.Equal(t, task.Standby, ri.State)
	_, open := r.app.registry.replica(task00, "counts")
	require.False(t, open, "0_0's standby, wanted by nobody, is still open")
	// The adopted standby keeps a known lag until its reader lists the
	// changelog end: a lag bound does not refuse it meanwhile.
	rep, err := r.app.Queries().Replica("counts", 1)
	require.NoError(t, err)
	require.NoError(t, iq.MaxLag(10_000).Check(rep.Info()))
	require.NoError(t, r.app.Err())
}

// Query latency on a steady instance and while reconciliations open and
// close a standby's badger store over and over; the figures are logged (run
// with -v), not asserted. Every query must answer.
func TestQueryLatencyThroughReconciliations(t *testing.T) {
	r := newHandoverRig(t)
	r.assign(0, groupproto.AssignmentInfo{Active: []task.ID{task01}})
	r.assign(1, groupproto.AssignmentInfo{})
	r.waitRunning(t, 0, task01)
	key := keyOn(t, r.app, 1)
	q := r.app.Queries()

	var (
		mu      sync.Mutex
		phase   int // 0 steady, 1 reconciling, 2 stop
		lat     [2][]time.Duration
		failure error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			mu.Lock()
			p := phase
			mu.Unlock()
			if p == 2 {
				return
			}
			start := time.Now()
			_, found, _, err := activeGet(r.app, "counts", key)
			if err == nil && !found {
				err = errors.New("key not found")
			}
			if err == nil {
				_, err = q.Replica("counts", 1)
			}
			q.LocalReplicas()
			d := time.Since(start)
			mu.Lock()
			if err != nil && failure == nil {
				failure = err
			}
			lat[p] = append(lat[p], d)
			mu.Unlock()
		}
	}()
	var spans [2]time.Duration
	began := time.Now()
	time.Sleep(time.Second) // the steady phase: a span of time, not a wait for a condition
	mu.Lock()
	phase = 1
	mu.Unlock()
	spans[0] = time.Since(began)
	began = time.Now()
	// At least 20 rounds, and as many more as it takes for queries to run
	// during them: a store opens in microseconds in the shared layout, so
	// 20 rounds can end before the querying goroutine is scheduled.
	queried := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(lat[1])
	}
	deadline := time.Now().Add(20 * time.Second)
	for round := 0; round < 20 || queried() < 1000 && time.Now().Before(deadline); round++ {
		r.assign(1, groupproto.AssignmentInfo{Standby: []task.ID{task00}})
		waitFor(t, 10*time.Second, "standby 0_0 open", func() bool {
			_, ok := r.app.registry.replica(task00, "counts")
			return ok
		})
		r.assign(1, groupproto.AssignmentInfo{})
		waitFor(t, 10*time.Second, "standby 0_0 closed", func() bool {
			_, ok := r.app.registry.replica(task00, "counts")
			return !ok
		})
	}
	mu.Lock()
	phase = 2
	mu.Unlock()
	spans[1] = time.Since(began)
	<-done
	require.NoError(t, failure)
	pct := func(ds []time.Duration, p float64) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, int(float64(len(s))*p))]
	}
	for i, name := range []string{"steady", "reconciling"} {
		require.NotEmpty(t, lat[i])
		t.Logf("%s: %d queries in %s, p50 %s, p99 %s, p99.9 %s, max %s", name, len(lat[i]), spans[i].Round(time.Millisecond),
			pct(lat[i], 0.5), pct(lat[i], 0.99), pct(lat[i], 0.999), slices.Max(lat[i]))
	}
}
