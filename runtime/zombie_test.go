package runtime

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// logSink collects the logs of the instances of a test, to show them when
// it fails and to tell which way a zombie found out it was one.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// storeSnapshot is what the counts store of one task held at one moment:
// its changelog position and, when the store was open, its contents (nil
// for a store closed and left on disk).
type storeSnapshot struct {
	position int64
	contents map[string]string
}

// snapshotStore reads the counts store of a task that app holds: from the
// open replica if there is one, else the position recorded when the task was
// closed and its store left on disk. A store written or closed while it was
// read gives no snapshot.
func snapshotStore(app *App, id task.ID) (storeSnapshot, bool) {
	for _, ri := range app.Replicas() {
		if ri.Task != id || ri.Store != "counts" {
			continue
		}
		pos, err := ri.Backing.Position()
		if err != nil {
			return storeSnapshot{}, false
		}
		it, err := ri.Backing.All()
		if err != nil {
			return storeSnapshot{}, false
		}
		contents := make(map[string]string)
		for it.Next() {
			contents[string(it.Key())] = string(it.Value())
		}
		err = it.Err()
		it.Close()
		if again, err2 := ri.Backing.Position(); err != nil || err2 != nil || again != pos {
			return storeSnapshot{}, false
		}
		return storeSnapshot{position: pos, contents: contents}, true
	}
	r := app.registry
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, open := r.core.Replica(id); open {
		return storeSnapshot{}, false
	}
	d, ok := r.disk[id]
	if !ok || !r.core.OnDisk(id) {
		return storeSnapshot{}, false
	}
	pos, ok := d.positions[app.changelogTopic("counts")]
	return storeSnapshot{position: pos}, ok
}

// committedChangelog reads every committed record of a changelog's
// partitions, as a restoring reader would see them. It appends a
// non-transactional marker record to each partition and reads up to it, so
// it must run after every writer has stopped.
func committedChangelog(t *testing.T, brokers []string, topic string, partitions int32) map[int32][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const marker = "\x00end-of-test"
	w, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer w.Close()
	offsets := make(map[string]map[int32]kgo.Offset)
	offsets[topic] = make(map[int32]kgo.Offset)
	for p := range partitions {
		require.NoError(t, w.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(marker), Value: []byte{}}).FirstErr())
		offsets[topic][p] = kgo.NewOffset().AtStart()
	}
	r, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(offsets), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	defer r.Close()
	out := make(map[int32][]*kgo.Record)
	done := make(map[int32]bool)
	for len(done) < int(partitions) {
		fs := r.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s up to the end marker", topic)
		fs.EachRecord(func(rec *kgo.Record) {
			if string(rec.Key) == marker {
				done[rec.Partition] = true
				return
			}
			out[rec.Partition] = append(out[rec.Partition], rec)
		})
	}
	return out
}

// fold is what a store restored from records holds once it has applied
// every record below position.
func fold(records []*kgo.Record, position int64) map[string]string {
	out := make(map[string]string)
	for _, r := range records {
		if r.Offset >= position {
			break
		}
		if r.Value == nil {
			delete(out, string(r.Key))
			continue
		}
		out[string(r.Key)] = string(r.Value)
	}
	return out
}

// afterCommitOf reports whether position is where a store stands after one
// of producer's transactions committed: the store's last write is the
// transaction's last record, committed, and the commit marker follows it.
func afterCommitOf(records []*kgo.Record, producer int64, position int64) bool {
	last := false
	for _, r := range records {
		switch r.Offset {
		case position - 2:
			last = r.ProducerID == producer
		case position - 1:
			return false
		}
	}
	return last
}

// A zombie — an instance cut off from the brokers past its session timeout
// while input keeps arriving — cannot commit once the group has moved its
// tasks: its stale transaction counts nothing twice, it drops its tasks
// without writing their uncommitted work into its stores, and it rejoins the
// group when it can reach the brokers again. The cut comes either in the
// middle of a commit, with changelog records of the open transaction not yet
// on the broker (they reach it after the partition heals), or while the
// instance has nothing uncommitted.
func TestExactlyOnceZombieIsFencedAndRejoins(t *testing.T) {
	for _, tc := range []struct {
		name      string
		midCommit bool
	}{
		{"cut mid-commit", true},
		{"cut between commits", false},
	} {
		t.Run(tc.name, func(t *testing.T) { testZombie(t, tc.midCommit) })
	}
}

func testZombie(t *testing.T, midCommit bool) {
	c := newEOSCluster(t)
	logs := &logSink{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("instance logs:\n%s", logs.String())
		}
	})
	// The commit hook is set before any thread runs and cleared after
	// they all stopped (cleanups run last-registered first); cutHook
	// says what it does meanwhile.
	var cutHook atomic.Pointer[func()]
	hook := func(step string) bool {
		if f := cutHook.Load(); f != nil && step == "before-commit" {
			(*f)()
		}
		return false
	}
	crashAt.Store(&hook)
	t.Cleanup(func() { crashAt.Store(nil) })
	dirs := map[string]string{}
	start := func(name string) *App {
		dirs[name] = t.TempDir()
		app, err := New(countTopology(t), Config{
			ApplicationID: "zombie", Brokers: c.b.Addrs(), StateDir: dirs[name],
			ProcessingGuarantee: ExactlyOnce, SessionTimeout: 2 * time.Second,
			// One group member per instance: the zombie is one thread.
			NumStreamThreads: 1,
			// A commit may take this long; it bounds how long a zombie
			// can stay stuck in the commit the partition cut short.
			RebalanceTimeout: 6 * time.Second,
			Logger:           slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("instance", name),
		})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		t.Cleanup(func() { app.Close(context.Background()) })
		return app
	}
	a := start("A")
	waitFor(t, 20*time.Second, "A ready", a.Ready)
	b := start("B")
	waitFor(t, 20*time.Second, "A and B ready with one task each", func() bool {
		return a.Ready() && b.Ready() && len(a.Tasks()) == 1 && len(b.Tasks()) == 1
	})
	heldID := a.Tasks()[0].ID

	// Input arrives throughout — before the partition, while A is cut off
	// and after it is back — except while paused.
	var wantMu sync.Mutex
	want := map[string]int64{}
	var paused atomic.Bool
	stopInput, inputDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(inputDone)
		for i := 0; ; {
			select {
			case <-stopInput:
				return
			case <-time.After(5 * time.Millisecond):
			}
			// Checked under wantMu, which is held across the produce,
			// so that no record lands after a pause has read want.
			wantMu.Lock()
			if !paused.Load() {
				k := "k" + strconv.Itoa(i%10)
				i++
				if c.cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(k), Value: []byte("v")}).FirstErr() == nil {
					want[k]++
				}
			}
			wantMu.Unlock()
		}
	}()
	stopInputOnce := sync.OnceFunc(func() { close(stopInput); <-inputDone })
	defer stopInputOnce()
	wanted := func() map[string]int64 {
		wantMu.Lock()
		defer wantMu.Unlock()
		return maps.Clone(want)
	}

	waitFor(t, 20*time.Second, "A commits work on its task", func() bool {
		s, ok := snapshotStore(a, heldID)
		return ok && s.position > 0
	})
	// A's transactional producer, to tell its changelog records from B's.
	a.threads[0].lockIdle()
	aCl := a.threads[0].cl
	a.threads[0].mu.Unlock()
	pidCtx, cancelPID := context.WithTimeout(context.Background(), 10*time.Second)
	aPID, _, err := aCl.ProducerID(pidCtx)
	cancelPID()
	require.NoError(t, err)

	// Watch A's store of its task from before the partition until A
	// receives its next assignment, including after A closes it: all it
	// holds in that window must be what A's committed transactions wrote.
	before := a.assignment.Load()
	var samplesMu sync.Mutex
	var samples []storeSnapshot
	stopSampling, samplingDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(samplingDone)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			snap, ok := snapshotStore(a, heldID)
			// Checked after the snapshot: one taken before A's next
			// assignment arrived is kept.
			if a.assignment.Load() != before {
				return
			}
			if ok {
				samplesMu.Lock()
				samples = append(samples, snap)
				samplesMu.Unlock()
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()
	stopSamplingOnce := sync.OnceFunc(func() { close(stopSampling); <-samplingDone })
	defer stopSamplingOnce()

	var cut time.Time
	if midCommit {
		// Cut A off in a commit of its own whose changelog records its
		// client still holds: the hook runs on every thread's commit,
		// B's too, but only A's client has records in flight then.
		done := make(chan struct{})
		var once sync.Once
		hook := func() {
			if aCl.BufferedProduceRecords() > 0 {
				once.Do(func() {
					a.net.partition(true)
					cut = time.Now()
					close(done)
				})
			}
		}
		cutHook.Store(&hook)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("A never committed changelog records to be cut off in")
		}
		cutHook.Store(nil)
	} else {
		// Cut A off with everything it processed committed.
		paused.Store(true)
		settled := wanted()
		waitFor(t, 20*time.Second, "A commits all its input", func() bool {
			got := counts(a)
			for k, n := range settled {
				if v, ok := got[k]; ok && v != n {
					return false
				}
			}
			return len(got) > 0
		})
		a.net.partition(true)
		cut = time.Now()
		paused.Store(false)
	}

	// B takes over A's task once the broker gives up on A, and commits
	// new work on it.
	waitTakeover(t, b, heldID)
	t.Logf("B took over task %s and committed on it %s after the partition began", heldID, time.Since(cut).Round(time.Millisecond))
	require.Greater(t, time.Since(cut), 2*time.Second, "the partition outlasted the session timeout")
	a.net.partition(false)
	healed := time.Now()

	// A finds out it is a zombie, drops its tasks and rejoins: the group
	// hands it a task again and it runs it.
	waitFor(t, 30*time.Second, "A back in the group with a new assignment", func() bool {
		return !a.State().IsRunningOrRebalancing() || a.assignment.Load() != before
	})
	require.True(t, a.State().IsRunningOrRebalancing(), "A must survive being a zombie: %v", a.Err())
	t.Logf("A received a new assignment %s after the partition healed", time.Since(healed).Round(time.Millisecond))
	waitFor(t, 20*time.Second, "A and B ready, each task active on one of them, A running one", func() bool {
		return a.Ready() && b.Ready() && len(activeOf(a))+len(activeOf(b)) == 2 && len(a.Tasks()) > 0
	})

	stopInputOnce()
	final := wanted()
	waitFor(t, 20*time.Second, fmt.Sprintf("exact counts %v across A and B", final), func() bool {
		got := counts(b)
		maps.Copy(got, counts(a))
		return maps.Equal(got, final)
	})
	for _, app := range []*App{a, b} {
		require.True(t, app.State().IsRunningOrRebalancing())
		require.NoError(t, app.Err())
	}
	aLogs := instanceLogs(logs.String(), "A")
	t.Logf("what A logged: fenced=%v transaction-aborted=%v partitions-lost=%v",
		strings.Contains(aLogs, "fenced"), strings.Contains(aLogs, "transaction aborted"), strings.Contains(aLogs, "partitions lost"))

	// Every state A's store held while A was a zombie is one its own
	// committed transactions left: its position is just past the commit
	// marker of one of them, and its contents are the committed changelog
	// up to there. A store that took in the work of a transaction that did
	// not commit stands past records no committed transaction holds, or
	// holds counts no committed record carries.
	stopSamplingOnce()
	require.NoError(t, a.Close(context.Background()))
	require.NoError(t, b.Close(context.Background()))
	committed := committedChangelog(t, c.b.Addrs(), "zombie-counts-changelog", 2)
	samplesMu.Lock()
	defer samplesMu.Unlock()
	var closed int
	for _, s := range samples {
		log := committed[heldID.Partition]
		require.True(t, afterCommitOf(log, aPID, s.position),
			"A's store stands at %d, which is not past a commit of A's (open: %v)", s.position, s.contents != nil)
		if s.contents == nil {
			closed++
			continue
		}
		require.Equal(t, fold(log, s.position), s.contents,
			"A's store at position %d holds state no committed transaction wrote", s.position)
	}
	t.Logf("checked %d snapshots of A's store, %d of them closed on disk", len(samples), closed)
	// Whatever the sampling caught, A's store as A left it on disk holds
	// committed data only: exactly the committed changelog up to its
	// position, which follows a commit marker.
	aDir := dirs["A"]
	st := openStoreOnDisk(t, filepath.Join(aDir, "zombie"), heldID, "counts")
	pos, err := st.Position()
	require.NoError(t, err)
	onDisk := map[string]string{}
	it, err := st.All()
	require.NoError(t, err)
	for it.Next() {
		onDisk[string(it.Key())] = string(it.Value())
	}
	require.NoError(t, it.Err())
	it.Close()
	log := committed[heldID.Partition]
	require.Equal(t, fold(log, max(pos, 0)), onDisk, "A's store on disk at position %d holds state no committed transaction wrote", pos)
	// The committed changelogs, which every restore reads, count each
	// input record once.
	total := make(map[string]string)
	for p := range int32(2) {
		maps.Copy(total, fold(committed[p], 1<<62))
	}
	require.Len(t, total, len(final))
	for k, n := range final {
		enc, err := serde.Int64.Encode(n)
		require.NoError(t, err)
		logged, _ := statestore.SplitTimestamped([]byte(total[k]))
		require.Equal(t, string(enc), string(logged), "changelog count of %s", k)
	}
}

// waitTakeover waits until b runs both tasks and has committed new work on
// id, a task another instance held.
func waitTakeover(t *testing.T, b *App, id task.ID) {
	t.Helper()
	var takeover int64 = -1
	waitFor(t, 20*time.Second, "B runs every task and commits on A's former task", func() bool {
		running := 0
		for _, ti := range b.Tasks() {
			if ti.State == task.Running {
				running++
			}
		}
		if running != 2 {
			return false
		}
		for _, ri := range b.Replicas() {
			if ri.Task == id && ri.State == task.Running {
				if takeover < 0 {
					takeover = ri.Position
				}
				return ri.Position > takeover
			}
		}
		return false
	})
}

func activeOf(app *App) []task.ID {
	info, ok := app.Assignment()
	if !ok {
		return nil
	}
	return info.Active
}

// instanceLogs keeps the log lines of one instance.
func instanceLogs(all, name string) string {
	var out strings.Builder
	for line := range strings.Lines(all) {
		if strings.Contains(line, "instance="+name) {
			out.WriteString(line)
		}
	}
	return out.String()
}

// An at-least-once instance cut off past its session timeout in the middle
// of a commit, with the commit's changelog records still in its client,
// sends none of them once the network is back: the task's new owner has
// written the changelog by then, and nothing fences an at-least-once
// producer, so the old owner's records would land after the new owner's
// and set the logged counts back for every replica restored from them.
// The cut-off instance rejoins, and no count ends below its input.
func TestAtLeastOnceZombieSendsNothingOnceItsSessionExpired(t *testing.T) {
	var a *App
	aloZombie(t, zombieCase{cut: func() { a.net.partition(true) }, heal: func() { a.net.partition(false) }, app: &a})
}

// The same with the cut a network partition makes: the connections stay
// open, and the produce request the instance writes as the cut begins sits
// in its connection's unacknowledged bytes, which TCP delivers once the
// network is back unless the connection was reset meanwhile. The instance
// resets its connections when its session bound passes, so the request
// never arrives after the new owner's records.
func TestAtLeastOnceZombieRequestInFlightNeverLands(t *testing.T) {
	hole := newTCPHole()
	aloZombie(t, zombieCase{wrap: hole.wrap, cut: func() { hole.set(true) }, heal: hole.heal})
}

// An at-least-once instance whose partitions are lost before its session
// bound, because the coordinator dropped it early (an operator removed
// it, or a coordinator restarted after a crash did not keep its members),
// sends none of the records it held once its path to the partition leader
// is back, though its session bound has not passed: it hears of the loss
// from its coordinator while its produce requests are held.
func TestAtLeastOnceZombieDroppedEarlySendsNothing(t *testing.T) {
	hole := newProduceHole()
	aloZombie(t, zombieCase{wrap: hole.wrap, cut: func() { hole.set(true) }, heal: hole.heal, dropEarly: true})
}

// zombieCase is how aloZombie cuts A off and brings it back: wrap, if set,
// wraps A's connections; the App A is stored in *app, if set, before cut
// or heal is called. With dropEarly, A is removed from the group as soon
// as it is cut off, and healed once B has taken its task over, well
// within A's session timeout.
type zombieCase struct {
	wrap      func(net.Conn) net.Conn
	cut, heal func()
	app       **App
	dropEarly bool
}

// aloZombie runs the zombie scenario: instances A and B count, A is cut
// off (cut) while its client holds a commit's changelog records, B takes
// A's task over and writes its changelog, then A's network comes back
// (heal). No record of A's producer may follow B's in the changelog, and
// no count ends below its input.
func aloZombie(t *testing.T, zc zombieCase) {
	session := 2 * time.Second
	if zc.dropEarly {
		session = 10 * time.Second
	}
	c := newEOSCluster(t)
	logs := &logSink{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("instance logs:\n%s", logs.String())
		}
	})
	var cutHook atomic.Pointer[func()]
	hook := func(step string) bool {
		if f := cutHook.Load(); f != nil && step == "before-flush" {
			(*f)()
		}
		return false
	}
	crashAt.Store(&hook)
	t.Cleanup(func() { crashAt.Store(nil) })
	start := func(name string, wrap func(net.Conn) net.Conn) *App {
		app, err := New(countTopology(t), Config{
			ApplicationID: "alozombie", Brokers: c.b.Addrs(), StateDir: t.TempDir(),
			SessionTimeout: session, NumStreamThreads: 1, RebalanceTimeout: 3 * session,
			// For the test to remove A by its instance ID.
			StaticMembership: zc.dropEarly,
			Logger:           slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("instance", name),
		})
		require.NoError(t, err)
		app.net.wrap = wrap
		require.NoError(t, app.Start(context.Background()))
		t.Cleanup(func() { app.Close(context.Background()) })
		return app
	}
	a := start("A", zc.wrap)
	if zc.app != nil {
		*zc.app = a
	}
	waitFor(t, 20*time.Second, "A ready", a.Ready)
	b := start("B", nil)
	waitFor(t, 20*time.Second, "A and B ready with one task each", func() bool {
		return a.Ready() && b.Ready() && len(a.Tasks()) == 1 && len(b.Tasks()) == 1
	})
	heldID := a.Tasks()[0].ID

	var wantMu sync.Mutex
	want := map[string]int64{}
	stopInput, inputDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(inputDone)
		for i := 0; ; i++ {
			select {
			case <-stopInput:
				return
			case <-time.After(5 * time.Millisecond):
			}
			k := "k" + strconv.Itoa(i%10)
			if c.cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(k), Value: []byte("v")}).FirstErr() == nil {
				wantMu.Lock()
				want[k]++
				wantMu.Unlock()
			}
		}
	}()
	stopInputOnce := sync.OnceFunc(func() { close(stopInput); <-inputDone })
	defer stopInputOnce()

	waitFor(t, 20*time.Second, "A commits work on its task", func() bool {
		s, ok := snapshotStore(a, heldID)
		return ok && s.position > 0
	})
	a.threads[0].lockIdle()
	aCl := a.threads[0].cl
	a.threads[0].mu.Unlock()
	require.Equal(t, true, aCl.OptValue(kgo.AllowIdempotentProduceCancellation),
		"records past their session bound are failed even once tried (see TestSessionBoundRecordsAreNotSentPastTheBound)")
	pidCtx, cancelPID := context.WithTimeout(context.Background(), 10*time.Second)
	aPID, aEpoch, err := aCl.ProducerID(pidCtx)
	cancelPID()
	require.NoError(t, err)

	// Cut A off in a commit whose changelog records its client holds.
	done := make(chan struct{})
	var once sync.Once
	cutNow := func() {
		if aCl.BufferedProduceRecords() > 0 {
			once.Do(func() {
				zc.cut()
				close(done)
			})
		}
	}
	cutHook.Store(&cutNow)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("A never flushed changelog records to be cut off in")
	}
	cutHook.Store(nil)
	cut := time.Now()
	if zc.dropEarly {
		leave := kadm.LeaveGroup("alozombie").InstanceIDs(a.threads[0].instanceID()).Reason("removed by the test")
		resp, err := kadm.NewClient(c.cl).LeaveGroup(context.Background(), leave)
		require.NoError(t, err)
		require.NoError(t, resp.Error())
	}

	waitTakeover(t, b, heldID)
	if zc.dropEarly {
		require.Less(t, time.Since(cut), session, "B took the task over within A's session timeout")
		// A hears of it from its probe or its client's heartbeat, well
		// before its session bound would fail what it holds.
		waitFor(t, session/2, "A fails the records it holds once it hears it is no longer in the group", func() bool {
			return aCl.BufferedProduceRecords() == 0
		})
	} else {
		require.Greater(t, time.Since(cut), session, "the partition outlasted the session timeout")
	}
	t.Logf("healing A at %s", time.Now().Format("15:04:05.000"))
	zc.heal()

	before := a.Tasks()
	waitFor(t, 30*time.Second, "A back in the group and running a task", func() bool {
		return !a.State().IsRunningOrRebalancing() || (a.Ready() && b.Ready() && len(activeOf(a))+len(activeOf(b)) == 2 && len(a.Tasks()) > 0)
	})
	require.True(t, a.State().IsRunningOrRebalancing(), "A must survive being a zombie: %v (tasks before %v)", a.Err(), before)

	stopInputOnce()
	wantMu.Lock()
	final := maps.Clone(want)
	wantMu.Unlock()
	waitFor(t, 30*time.Second, fmt.Sprintf("every count at least its input %v", final), func() bool {
		got := counts(b)
		maps.Copy(got, counts(a))
		for k, n := range final {
			if got[k] < n {
				return false
			}
		}
		return true
	})
	require.NoError(t, a.Close(context.Background()))
	require.NoError(t, b.Close(context.Background()))

	// No record of A's first producer follows the first record of
	// another producer in the changelog partition of A's task.
	recs := readPartition(t, c.b.Addrs(), "alozombie-counts-changelog", heldID.Partition)
	var runs []string
	for i, r := range recs {
		if i == 0 || r.ProducerID != recs[i-1].ProducerID || r.ProducerEpoch != recs[i-1].ProducerEpoch {
			runs = append(runs, fmt.Sprintf("%d: producer %d/%d", r.Offset, r.ProducerID, r.ProducerEpoch))
		}
	}
	othersFrom := int64(-1)
	for _, r := range recs {
		mine := r.ProducerID == aPID && r.ProducerEpoch <= aEpoch+1
		if !mine && othersFrom < 0 {
			othersFrom = r.Offset
		}
		if mine && othersFrom >= 0 {
			t.Fatalf("A's record at offset %d (key %s, timestamp %s) landed after the new owner's from offset %d; A's producer %d/%d, the changelog's writers: %s",
				r.Offset, r.Key, r.Timestamp.Format("15:04:05.000"), othersFrom, aPID, aEpoch, strings.Join(runs, ", "))
		}
	}
	require.GreaterOrEqual(t, othersFrom, int64(0), "the new owner wrote the changelog")
}

// readPartition reads every record of one partition, uncommitted ones
// included, up to its end.
func readPartition(t *testing.T, addrs []string, topic string, partition int32) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}))
	require.NoError(t, err)
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	require.NoError(t, err)
	end, ok := ends.Lookup(topic, partition)
	require.True(t, ok)
	var out []*kgo.Record
	deadline := time.Now().Add(20 * time.Second)
	for len(out) == 0 || out[len(out)-1].Offset < end.Offset-1 {
		require.True(t, time.Now().Before(deadline), "reading %s[%d] to %d", topic, partition, end.Offset)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}
