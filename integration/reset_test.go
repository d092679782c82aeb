package integration

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// These tests keep state directories across changes to the changelogs that
// the stores' positions cannot follow, and require the stores to be rebuilt
// from the changelogs as they now are.

// resetApplication resets the application on the broker while none of its
// instances runs, leaving their state directories alone (the mistake the
// tests are about): the consumer group and every topic the application
// reads or writes are deleted, and the input, output and changelog topics
// created again, empty.
func (c *cluster) resetApplication(t *testing.T, app string) {
	t.Helper()
	groups, err := c.adm.DeleteGroups(ctx(t), app)
	require.NoError(t, err)
	require.NoError(t, groups.Error())
	deleted, err := c.adm.DeleteTopics(ctx(t), inputTopic, outputTopic, repartitionTopic(app), changelogTopic(app))
	require.NoError(t, err)
	require.NoError(t, deleted.Error())

	// The client's metadata names the deleted topics by their IDs; a new
	// client knows only the new ones.
	c.cl.Close()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.b.Addrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	c.cl, c.adm, c.next = cl, kadm.NewClient(cl), 0
	created, err := c.adm.CreateTopics(ctx(t), c.partitions, -1, nil, inputTopic, outputTopic)
	require.NoError(t, err)
	require.NoError(t, created.Error())
	require.NoError(t, changelog.EnsureTopics(ctx(t), c.adm, []changelog.TopicSpec{
		{Name: changelogTopic(app), Partitions: c.partitions, Compacted: true, ReplicationFactor: -1},
	}))
}

// replicaContents reads every counts replica an instance holds, in any
// role, and returns their contents merged (each word lives in one
// partition) and the partitions held.
func replicaContents(t *testing.T, in *instance) (map[string]int64, []int32) {
	t.Helper()
	out := make(map[string]int64)
	var parts []int32
	for _, ri := range in.Replicas() {
		if ri.Store != countsStore {
			continue
		}
		parts = append(parts, ri.Partition)
		it, err := ri.Backing.All()
		require.NoError(t, err)
		for it.Next() {
			w, err := serde.String.Decode(it.Key())
			require.NoError(t, err)
			v, _ := statestore.SplitTimestamped(it.Value()) // a count with its time
			n, err := serde.Int64.Decode(v)
			require.NoError(t, err)
			out[w] = n
		}
		require.NoError(t, it.Err(), "reading partition %d on %s", ri.Partition, in.name)
		require.NoError(t, it.Close())
	}
	slices.Sort(parts)
	return out, parts
}

// waitSettled waits until the application's group is stable with every
// stream thread of the instances in it and the instances run every task
// between them: a thread joining late would move tasks, and a task moving
// is not readable from its active.
func (c *cluster) waitSettled(t *testing.T, app string, insts ...*instance) {
	t.Helper()
	waitFor(t, settleTimeout, "the group to settle", func() (bool, string) {
		groups, err := c.adm.DescribeGroups(ctx(t), app)
		if err != nil {
			return false, err.Error()
		}
		g := groups[app]
		if want := c.threads * len(insts); g.State != "Stable" || len(g.Members) != want {
			return false, fmt.Sprintf("group %s with %d of %d members", g.State, len(g.Members), want)
		}
		n := 0
		for _, in := range insts {
			if err := in.Err(); err != nil {
				t.Fatalf("instance %s failed: %v", in.name, err)
			}
			ids, all := in.runningTasks()
			if !all {
				return false, fmt.Sprintf("%s: tasks %v", in.name, in.Tasks())
			}
			n += len(ids)
		}
		return n == c.allTasks(), fmt.Sprintf("%d of %d tasks running", n, c.allTasks())
	})
}

func storeResets(insts ...*instance) int64 {
	var n int64
	for _, in := range insts {
		n += in.Stats().StoreResets
	}
	return n
}

// TestStateDirsKeptAcrossTopicReset runs two instances with a standby of
// every counts partition, closes them, resets the application on the broker
// (its changelog deleted and created again, empty) and restarts them on the
// state directories they kept. Every store, active and standby, has a
// position past its new changelog's end and holds counts of the old
// history: each is reset before any new input is counted, and the counts of
// the new input alone come out, in the stores, the changelog and the output.
func TestStateDirsKeptAcrossTopicReset(t *testing.T) {
	const app = "wc"
	c := newCluster(t, 4)
	dirs := []string{t.TempDir(), t.TempDir()}
	cfg := func(i int) instanceConfig { return instanceConfig{stateDir: dirs[i], standbys: 1} }

	insts := c.startGroup(t, 2, cfg)
	c.waitPlacement(t, insts, 1)
	old := make(map[string]int64)
	c.produceLines(t, newCorpus(21, 1500).Lines(20_000, old))
	c.waitCaughtUp(t, app)
	c.waitStandbysCurrent(t, insts, 1, standbyCatchUp)
	requireStore(t, old, insts...)
	for _, in := range insts {
		in.close(t)
	}
	for _, dir := range dirs {
		pos := storePositions(t, dir, app, c.partitions)
		require.Len(t, pos, int(c.partitions), "every instance kept a replica of every partition")
		for p, at := range pos {
			require.Positive(t, at, "precondition: the store of partition %d in %s has a position", p, dir)
		}
	}

	c.resetApplication(t, app)

	insts = c.startGroup(t, 2, cfg)
	c.waitPlacement(t, insts, 1)
	// Each instance holds a replica of every partition: each was reset
	// once, and no input has been counted yet.
	waitFor(t, settleTimeout, "every kept store to be reset", func() (bool, string) {
		n := storeResets(insts...)
		return n == int64(len(dirs))*int64(c.partitions), fmt.Sprintf("%d stores reset", n)
	})
	for _, in := range insts {
		got, parts := replicaContents(t, in)
		require.Len(t, parts, int(c.partitions), "replicas on %s", in.name)
		require.Empty(t, got, "%s holds counts of the old history", in.name)
	}

	fresh := make(map[string]int64)
	c.produceLines(t, newCorpus(22, 1500).Lines(10_000, fresh))
	c.waitCaughtUp(t, app)
	c.waitStandbysCurrent(t, insts, 1, standbyCatchUp)
	requireStore(t, fresh, insts...)
	requireCounts(t, fresh, c.readLatest(t, changelogTopic(app)), "changelog "+changelogTopic(app))
	for _, in := range insts {
		got, _ := replicaContents(t, in)
		requireCounts(t, fresh, got, "active and standby replicas on "+in.name)
	}
	c.requireOutput(t, fresh)
	require.Equal(t, int64(len(dirs))*int64(c.partitions), storeResets(insts...), "a store is reset once")
	for _, in := range insts {
		in.close(t)
	}
}

// TestStateDirKeptAcrossDeletedRecords closes an instance, lets another
// instance count more input, and deletes changelog records (as
// DeleteRecords or retention would) past the first instance's store
// positions. Restarted on its state directory, the first instance finds its
// positions below the log start: the records it missed are gone, so its
// stores are reset and restored from the log start, and hold exactly what
// the changelog holds, none of the words the deleted records covered.
func TestStateDirKeptAcrossDeletedRecords(t *testing.T) {
	const app = "wc"
	c := newCluster(t, 3)
	dir := t.TempDir()
	counts := make(map[string]int64)

	first := c.start(t, "first", instanceConfig{stateDir: dir})
	c.waitSettled(t, app, first)
	c.produceLines(t, newCorpus(31, 1500).Lines(20_000, counts))
	c.waitCaughtUp(t, app)
	requireStore(t, counts, first)
	first.close(t)
	before := maps.Clone(counts)
	pos := storePositions(t, dir, app, c.partitions)

	other := c.start(t, "other", instanceConfig{stateDir: t.TempDir()})
	c.waitSettled(t, app, other)
	c.produceLines(t, newCorpus(32, 1500).Lines(20_000, counts))
	c.waitCaughtUp(t, app)
	requireStore(t, counts, other)
	other.close(t)

	cl := changelogTopic(app)
	ends := c.endOffsets(t, cl)[cl]
	var del kadm.Offsets
	var tail int64
	for p, end := range ends {
		require.Contains(t, pos, p)
		require.GreaterOrEqual(t, end-pos[p], int64(2), "precondition: partition %d grew while the first instance was away", p)
		start := pos[p] + (end-pos[p])/2
		del.AddOffset(cl, p, start, -1)
		tail += end - start
	}
	resp, err := c.adm.DeleteRecords(ctx(t), del)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	inLog := c.readLatest(t, cl)
	var gone []string
	for w := range before {
		if _, ok := inLog[w]; !ok {
			gone = append(gone, w)
		}
	}
	require.NotEmpty(t, gone, "precondition: some words the first instance counted are only in deleted records")

	again := c.start(t, "again", instanceConfig{stateDir: dir})
	c.waitSettled(t, app, again)
	require.EqualValues(t, c.partitions, again.Stats().StoreResets)
	require.Equal(t, tail, again.Stats().RestoredRecords, "restored from the log start; tasks: %v", again.Tasks())
	got, parts := replicaContents(t, again)
	require.Len(t, parts, int(c.partitions))
	requireCounts(t, inLog, got, "stores restored from what is left of "+cl)
	for _, w := range gone {
		require.NotContains(t, got, w)
	}

	// Counting goes on from the rebuilt stores.
	more := make(map[string]int64)
	c.produceLines(t, newCorpus(33, 1500).Lines(5_000, more))
	c.waitCaughtUp(t, app)
	want := maps.Clone(inLog)
	for w, n := range more {
		want[w] += n
	}
	requireStore(t, want, again)
	got, _ = replicaContents(t, again)
	requireCounts(t, want, got, "stores after more input")
	require.True(t, again.State().IsRunningOrRebalancing())
	again.close(t)
}
