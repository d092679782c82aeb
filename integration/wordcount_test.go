package integration

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// TestWordCountExact counts a 100 000-word corpus with one instance and
// compares both the store and the output topic with a reference count.
func TestWordCountExact(t *testing.T) {
	c := newCluster(t, 4)
	want := make(map[string]int64)
	lines := newCorpus(1, 5000).Lines(100_000, want)

	app := c.start(t, "a", instanceConfig{stateDir: t.TempDir()})
	app.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
	began := time.Now()
	c.produceLines(t, lines)
	c.waitCaughtUp(t, "wc")
	t.Logf("%d lines, %d words, %d distinct: processed in %s",
		len(lines), 100_000, len(want), time.Since(began).Round(time.Millisecond))

	requireStore(t, want, app)
	c.requireOutput(t, want)
	require.Zero(t, app.Stats().Skipped)
	require.Zero(t, app.Stats().RestoredRecords, "a first run has nothing to restore")
	app.close(t)
}

// TestRestartWithStateDirKept restarts an instance on the state directory it
// left behind. A graceful close writes everything into the stores along with
// their changelog positions, so the restart restores nothing. A changelog
// tail the store has not seen (what a crash between the changelog
// acknowledgement and the store write leaves behind, made here by writing
// changelog records directly) is restored, and only it.
func TestRestartWithStateDirKept(t *testing.T) {
	const app = "wc"
	c := newCluster(t, 3)
	dir := t.TempDir()
	gen := newCorpus(2, 2000)
	want := make(map[string]int64)

	// Run 1.
	a1 := c.start(t, "run1", instanceConfig{stateDir: dir})
	c.produceLines(t, gen.Lines(30_000, want))
	c.waitCaughtUp(t, app)
	requireStore(t, want, a1)
	a1.close(t)

	// Every store's position is the end of its changelog partition: the
	// store reflects the whole changelog, so the tail is empty.
	ends := c.endOffsets(t, changelogTopic(app))[changelogTopic(app)]
	require.Positive(t, sumOffsets(ends))
	pos := storePositions(t, dir, app, c.partitions)
	for p, end := range ends {
		require.Equal(t, end, pos[p], "position of store %s in task 1_%d after a graceful close", countsStore, p)
	}

	// Input arriving while no instance runs.
	c.produceLines(t, gen.Lines(20_000, want))

	// Run 2 resumes from its stores.
	a2 := c.start(t, "run2", instanceConfig{stateDir: dir})
	a2.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
	require.Zero(t, a2.Stats().RestoredRecords, "restored records after a graceful close; tasks: %v", a2.Tasks())
	c.waitCaughtUp(t, app)
	requireStore(t, want, a2)
	c.requireOutput(t, want)
	a2.close(t)

	// Append a tail to every changelog partition behind the stores' backs.
	// Its values differ from the counts, so reading them back proves the
	// tail was applied; later input counts on from them.
	const bump = 1000
	tail := make(map[int32]int64)
	var tailWords []string
	var recs []*kgo.Record
	for w, n := range want {
		key, _ := serde.String.Encode(w)
		p := topology.Partition(key, c.partitions)
		if tail[p] >= 5 {
			continue
		}
		tail[p]++
		want[w] = n + bump
		tailWords = append(tailWords, w)
		val, _ := serde.Int64.Encode(n + bump)
		recs = append(recs, &kgo.Record{Topic: changelogTopic(app), Partition: p, Key: key, Value: val})
	}
	require.Len(t, tail, int(c.partitions), "every changelog partition gets a tail")
	c.produce(t, recs...)

	// Run 3 restores exactly the tail.
	a3 := c.start(t, "run3", instanceConfig{stateDir: dir})
	a3.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
	require.EqualValues(t, len(recs), a3.Stats().RestoredRecords, "tasks: %v", a3.Tasks())
	for _, ti := range a3.Tasks() {
		if ti.ID.SubTopology == 1 {
			require.Equal(t, tail[ti.ID.Partition], ti.Restored, "records restored by task %s", ti.ID)
		}
	}
	requireStore(t, want, a3)

	// The tail words appear once more so the output topic catches up with
	// the bumped values too.
	more := gen.Lines(10_000, want)
	for _, w := range tailWords {
		want[w]++
	}
	c.produceLines(t, append(more, tailWords...))
	c.waitCaughtUp(t, app)
	requireStore(t, want, a3)
	c.requireOutput(t, want)
	a3.close(t)
}

// TestRestartWithStateDirWiped restarts an instance on an empty state
// directory: every store is rebuilt from its whole changelog.
func TestRestartWithStateDirWiped(t *testing.T) {
	const app = "wc"
	c := newCluster(t, 3)
	dir := t.TempDir()
	gen := newCorpus(3, 2000)
	want := make(map[string]int64)

	a1 := c.start(t, "run1", instanceConfig{stateDir: dir})
	c.produceLines(t, gen.Lines(30_000, want))
	c.waitCaughtUp(t, app)
	requireStore(t, want, a1)
	a1.close(t)

	cl := changelogTopic(app)
	ends := c.endOffsets(t, cl)[cl]
	starts, err := c.adm.ListStartOffsets(ctx(t), cl)
	require.NoError(t, err)
	var inLog int64
	perPartition := make(map[int32]int64)
	for p, end := range ends {
		s, ok := starts.Lookup(cl, p)
		require.True(t, ok)
		perPartition[p] = end - s.Offset
		inLog += end - s.Offset
	}
	// With compaction out of the way the changelog holds every record
	// written, which is at least one per distinct word.
	require.GreaterOrEqual(t, inLog, int64(len(want)))

	require.NoError(t, os.RemoveAll(dir))

	a2 := c.start(t, "run2", instanceConfig{stateDir: dir})
	a2.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
	require.Equal(t, inLog, a2.Stats().RestoredRecords, "tasks: %v", a2.Tasks())
	for _, ti := range a2.Tasks() {
		if ti.ID.SubTopology == 1 {
			require.Equal(t, perPartition[ti.ID.Partition], ti.Restored, "records restored by task %s", ti.ID)
		}
	}
	requireStore(t, want, a2)

	c.produceLines(t, gen.Lines(10_000, want))
	c.waitCaughtUp(t, app)
	requireStore(t, want, a2)
	c.requireOutput(t, want)
	a2.close(t)
}

// TestTwoInstancesHandOver runs two instances of one application: they split
// the tasks, and when one closes the other takes its tasks over because the
// leaver left the group, well before the session timeout would have told.
func TestTwoInstancesHandOver(t *testing.T) {
	const (
		app            = "wc"
		sessionTimeout = 20 * time.Second
		handOverLimit  = 10 * time.Second
	)
	c := newCluster(t, 4)
	gen := newCorpus(4, 2000)
	want := make(map[string]int64)

	a := c.start(t, "a", instanceConfig{stateDir: t.TempDir(), sessionTimeout: sessionTimeout})
	a.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
	c.produceLines(t, gen.Lines(20_000, want))
	c.waitCaughtUp(t, app)

	b := c.start(t, "b", instanceConfig{stateDir: t.TempDir(), sessionTimeout: sessionTimeout})
	waitFor(t, settleTimeout, "instances to split the tasks", func() (bool, string) {
		ra, allA := a.runningTasks()
		rb, allB := b.runningTasks()
		msg := fmt.Sprintf("a: %v, b: %v", a.Tasks(), b.Tasks())
		if !allA || !allB || len(ra) == 0 || len(rb) == 0 || len(ra)+len(rb) != c.allTasks() {
			return false, msg
		}
		seen := make(map[task.ID]bool)
		for _, id := range append(ra, rb...) {
			if seen[id] {
				return false, msg
			}
			seen[id] = true
		}
		return true, ""
	})

	c.produceLines(t, gen.Lines(20_000, want))
	c.waitCaughtUp(t, app)
	requireStore(t, want, a, b)

	began := time.Now()
	b.close(t)
	a.waitAllTasksRunning(t, c.allTasks(), handOverLimit)
	took := time.Since(began)
	t.Logf("hand-over after a graceful close took %s (session timeout %s)", took.Round(time.Millisecond), sessionTimeout)

	c.produceLines(t, gen.Lines(20_000, want))
	c.waitCaughtUp(t, app)
	requireStore(t, want, a)
	c.requireOutput(t, want)
	a.close(t)
}

// TestPoisonRecord sends an input record the source cannot decode, under
// both deserialization handlers.
func TestPoisonRecord(t *testing.T) {
	const app = "wc"
	good := func(word string, n int) []*kgo.Record {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: inputTopic, Partition: 0, Value: []byte(word + " common")}
		}
		return recs
	}
	poison := &kgo.Record{Topic: inputTopic, Partition: 0, Value: append([]byte{poisonMarker[0]}, "poisoned common"...)}

	t.Run("fail", func(t *testing.T) {
		c := newCluster(t, 2)
		dir := t.TempDir()
		in := c.start(t, "fail", instanceConfig{stateDir: dir, deser: runtime.DeserializationFail})
		c.produce(t, good("before", 50)...)
		c.waitCaughtUp(t, app)

		c.produce(t, poison)
		c.produce(t, good("after", 50)...)
		require.EqualValues(t, 50, poison.Offset)

		requireFailsAt := func(in *instance) {
			t.Helper()
			select {
			case <-in.Done():
			case <-time.After(settleTimeout):
				t.Fatalf("instance %s still running %s after the poison record", in.name, settleTimeout)
			}
			require.Equal(t, runtime.StateFailed, in.State())
			err := in.Err()
			require.Error(t, err)
			var de *topology.DeserializationError
			require.ErrorAs(t, err, &de)
			require.Equal(t, inputTopic, de.Topic)
			require.EqualValues(t, 0, de.Partition)
			require.EqualValues(t, poison.Offset, de.Offset)
			require.Contains(t, err.Error(), fmt.Sprintf("%s/0@%d", inputTopic, poison.Offset))

			com, cerr := c.committed(t, app, inputTopic)
			require.NoError(t, cerr)
			require.LessOrEqual(t, com[inputTopic][0], poison.Offset, "committed offset of %s/0", inputTopic)
		}
		requireFailsAt(in)
		// Nothing after the poison record was processed.
		out := c.readLatest(t, outputTopic)
		require.EqualValues(t, 50, out["before"])
		require.NotContains(t, out, "after")
		require.NotContains(t, out, "poisoned")

		// The next instance resumes at the poison record and fails on it
		// again.
		again := c.start(t, "fail-again", instanceConfig{stateDir: dir, deser: runtime.DeserializationFail})
		requireFailsAt(again)
		require.ErrorIs(t, again.Close(ctx(t)), again.Err(), "Close after a fatal error reports it")
	})

	t.Run("log-and-skip", func(t *testing.T) {
		c := newCluster(t, 2)
		in := c.start(t, "skip", instanceConfig{stateDir: t.TempDir(), deser: runtime.DeserializationLogAndSkip})
		c.produce(t, good("before", 50)...)
		c.produce(t, poison)
		c.produce(t, good("after", 50)...)
		c.produce(t, &kgo.Record{Topic: inputTopic, Partition: 1, Value: []byte("other common")})
		c.waitCaughtUp(t, app)

		require.EqualValues(t, 1, in.Stats().Skipped)
		require.True(t, in.State().IsRunningOrRebalancing())
		require.NoError(t, in.Err())
		want := map[string]int64{"before": 50, "after": 50, "other": 1, "common": 101}
		requireStore(t, want, in)
		key, _ := serde.String.Encode("poisoned")
		_, found, _, err := activeGet(in, countsStore, key)
		if !errors.Is(err, iq.ErrNotHostedHere) {
			require.NoError(t, err)
			require.False(t, found, "a skipped record's words are not counted")
		}
		c.requireOutput(t, want)
		in.close(t)
	})
}
