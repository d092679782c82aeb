package integration

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/statestore"
)

// These tests reset a whole application with runtime.Reset (the
// application reset tool) and restart it: it must count its input again
// from the start, or from a time, exactly.

const resetApp = "wc"

// resetInstanceConfig is what these tests vary between instances.
type resetInstanceConfig struct {
	guarantee      runtime.ProcessingGuarantee
	static         bool
	sessionTimeout time.Duration
}

// startResettable starts a word-count instance of resetApp with the given
// guarantee and membership; its logs are printed if the test fails.
func startResettable(t *testing.T, c *cluster, name, dir string, rc resetInstanceConfig) *instance {
	t.Helper()
	if rc.sessionTimeout == 0 {
		rc.sessionTimeout = 6 * time.Second
	}
	logs := new(logBuffer)
	app, err := runtime.New(wordCount(t), runtime.Config{
		ApplicationID:       resetApp,
		Brokers:             c.b.Addrs(),
		StateDir:            dir,
		CommitInterval:      commitInterval,
		ProcessingGuarantee: rc.guarantee,
		StaticMembership:    rc.static,
		SessionTimeout:      rc.sessionTimeout,
		NumStreamThreads:    streamThreads(t),
		Logger:              slog.New(slog.NewTextHandler(logs, nil)).With("instance", name),
	})
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx(t)))
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		app.Close(cctx)
		if t.Failed() {
			t.Logf("logs of instance %s:\n%s", name, logs.String())
		}
	})
	return &instance{App: app, name: name, stateDir: dir}
}

// resetConfig is the configuration Reset is given: the application's, with
// the state directory of the machine it runs on.
func resetConfig(c *cluster, stateDir string) runtime.Config {
	return runtime.Config{ApplicationID: resetApp, Brokers: c.b.Addrs(), StateDir: stateDir}
}

// taskDirs lists the task directories an application's state directory
// holds.
func taskDirs(t *testing.T, stateDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(stateDir, resetApp))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.Contains(e.Name(), "_") {
			out = append(out, e.Name())
		}
	}
	return out
}

// countsStores lists the task directories of a state directory that hold a
// counts store.
func countsStores(t *testing.T, stateDir string) []string {
	t.Helper()
	var shared *statestore.SharedBadger
	if dir := filepath.Join(stateDir, resetApp, "stores"); dirExists(dir) {
		var err error
		shared, err = statestore.OpenSharedBadger(dir, statestore.BadgerOptions{})
		require.NoError(t, err)
		defer shared.Close()
	}
	var out []string
	for _, d := range taskDirs(t, stateDir) {
		if shared != nil && shared.Has(d+"/"+countsStore) || dirExists(filepath.Join(stateDir, resetApp, d, countsStore)) {
			out = append(out, d)
		}
	}
	return out
}

// existingTopics returns which of the topics the broker lists.
func (c *cluster) existingTopics(t *testing.T, topics ...string) []string {
	t.Helper()
	listed, err := c.adm.ListTopics(ctx(t), topics...)
	require.NoError(t, err)
	var out []string
	for _, name := range topics {
		if d, ok := listed[name]; ok && d.Err == nil {
			out = append(out, name)
		}
	}
	return out
}

// TestAppResetRecountsExactly counts a corpus with two instances, closes
// them, resets the application and starts them again: the recount from the
// start equals the reference, not twice it. Reset runs on instance a's
// machine and wipes its state directory; b's is left as a machine Reset
// never ran on would be, and must be discarded at start because its
// changelogs were recreated.
func TestAppResetRecountsExactly(t *testing.T) {
	t.Parallel() // correctness only, no timing bound: runs beside another such test
	for _, g := range []runtime.ProcessingGuarantee{runtime.AtLeastOnce, runtime.ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			c := newCluster(t, 3)
			want := make(map[string]int64)
			lines := newCorpus(12, 2000).Lines(20_000, want)
			dirA, dirB := t.TempDir(), t.TempDir()
			rc := resetInstanceConfig{guarantee: g}

			a := startResettable(t, c, "a", dirA, rc)
			b := startResettable(t, c, "b", dirB, rc)
			c.waitSettled(t, resetApp, a, b)
			c.produceLines(t, lines)
			c.waitCaughtUp(t, resetApp)
			requireStore(t, want, a, b)
			a.close(t)
			b.close(t)
			require.NotEmpty(t, taskDirs(t, dirA))
			require.NotEmpty(t, taskDirs(t, dirB))

			rep, err := runtime.Reset(ctx(t), wordCount(t), resetConfig(c, dirA), runtime.ResetOptions{})
			require.NoError(t, err)
			require.Equal(t, []string{changelogTopic(resetApp), repartitionTopic(resetApp)}, rep.InternalTopics)
			require.Equal(t, map[string]map[int32]int64{inputTopic: {0: 0, 1: 0, 2: 0}}, rep.Offsets)
			require.Equal(t, filepath.Join(dirA, resetApp), rep.StateDir)
			require.Empty(t, c.existingTopics(t, rep.InternalTopics...), "internal topics deleted")
			require.Empty(t, taskDirs(t, dirA), "local state wiped")
			staleB := countsStores(t, dirB)
			require.NotEmpty(t, staleB, "another machine's state is not Reset's to wipe")
			com, err := c.committed(t, resetApp, inputTopic)
			require.NoError(t, err)
			require.Equal(t, map[string]map[int32]int64{inputTopic: {0: 0, 1: 0, 2: 0}}, com)

			a = startResettable(t, c, "a2", dirA, rc)
			b = startResettable(t, c, "b2", dirB, rc)
			c.waitSettled(t, resetApp, a, b)
			c.waitCaughtUp(t, resetApp)
			requireStore(t, want, a, b)
			requireCounts(t, want, readCommittedLatest(t, c.b.Addrs()[0], outputTopic, c.partitions), "topic "+outputTopic)
			require.Equal(t, int64(len(staleB)), b.Stats().StoreResets, "b's stores, built from the deleted changelog, are discarded at start")
			require.Zero(t, a.Stats().StoreResets, "a's state was wiped by Reset")
			a.close(t)
			b.close(t)
		})
	}
}

// TestAppResetRefusesWhileRunning requires Reset to refuse, naming the
// members, while an instance runs or a killed static member is still
// registered, and to change nothing then.
func TestAppResetRefusesWhileRunning(t *testing.T) {
	c := newCluster(t, 2)
	want := make(map[string]int64)
	c.produceLines(t, newCorpus(3, 200).Lines(2000, want))
	dir := t.TempDir()
	a := startResettable(t, c, "a", dir, resetInstanceConfig{})
	a.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
	c.waitCaughtUp(t, resetApp)
	before, err := c.committed(t, resetApp, inputTopic)
	require.NoError(t, err)

	// From another machine: the group has a's members.
	_, err = runtime.Reset(ctx(t), wordCount(t), resetConfig(c, t.TempDir()), runtime.ResetOptions{})
	var busy *runtime.ActiveMembersError
	require.ErrorAs(t, err, &busy)
	require.Equal(t, resetApp, busy.Group)
	require.Len(t, busy.Members, streamThreads(t))
	for _, m := range busy.Members {
		require.NotEmpty(t, m.MemberID)
		require.Contains(t, err.Error(), m.MemberID, "the error names every member")
	}
	// A dry run refuses the same way.
	_, err = runtime.Reset(ctx(t), wordCount(t), resetConfig(c, t.TempDir()), runtime.ResetOptions{DryRun: true})
	require.ErrorAs(t, err, &busy)
	// On a's machine, its lock on the state directory says so first.
	_, err = runtime.Reset(ctx(t), wordCount(t), resetConfig(c, dir), runtime.ResetOptions{})
	require.ErrorIs(t, err, runtime.ErrStateDirLocked)

	require.Len(t, c.existingTopics(t, changelogTopic(resetApp), repartitionTopic(resetApp)), 2, "nothing deleted")
	after, err := c.committed(t, resetApp, inputTopic)
	require.NoError(t, err)
	require.Equal(t, before, after, "offsets untouched")
	require.NotEmpty(t, taskDirs(t, dir))
	requireStore(t, want, a)
	a.close(t)

	// A static member killed (no leave) stays registered until its
	// session timeout, far beyond this test.
	s := startResettable(t, c, "s", dir, resetInstanceConfig{static: true, sessionTimeout: 2 * time.Minute})
	s.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
	s.Kill()
	_, err = runtime.Reset(ctx(t), wordCount(t), resetConfig(c, dir), runtime.ResetOptions{})
	require.ErrorAs(t, err, &busy)
	var ids []string
	for _, m := range busy.Members {
		require.NotEmpty(t, m.InstanceID, "a static member")
		require.Contains(t, err.Error(), m.InstanceID)
		ids = append(ids, m.InstanceID)
	}
	require.Contains(t, err.Error(), "RemoveStaticMembers")
	slices.Sort(ids)

	rep, err := runtime.Reset(ctx(t), wordCount(t), resetConfig(c, dir), runtime.ResetOptions{RemoveStaticMembers: true, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, ids, rep.RemovedStaticMembers)
	require.NotEmpty(t, taskDirs(t, dir), "a dry run changes nothing")
	require.Len(t, c.existingTopics(t, rep.InternalTopics...), 2, "a dry run changes nothing")

	rep, err = runtime.Reset(ctx(t), wordCount(t), resetConfig(c, dir), runtime.ResetOptions{RemoveStaticMembers: true})
	require.NoError(t, err)
	require.Equal(t, ids, rep.RemovedStaticMembers)
	require.Empty(t, c.existingTopics(t, rep.InternalTopics...))
	require.Empty(t, taskDirs(t, dir))

	a = startResettable(t, c, "a2", dir, resetInstanceConfig{})
	a.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
	c.waitCaughtUp(t, resetApp)
	requireStore(t, want, a)
	a.close(t)
}

// TestAppResetToTime resets to a time between two batches of input: the
// restarted application counts only the input after it.
func TestAppResetToTime(t *testing.T) {
	t.Parallel() // correctness only, no timing bound: runs beside another such test
	for _, g := range []runtime.ProcessingGuarantee{runtime.AtLeastOnce, runtime.ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			c := newCluster(t, 3)
			now := time.Now()
			early, late, all := make(map[string]int64), make(map[string]int64), make(map[string]int64)
			corpus := newCorpus(5, 1000)
			stamp := func(lines []string, ts time.Time) []*kgo.Record {
				recs := make([]*kgo.Record, len(lines))
				for i, l := range lines {
					recs[i] = &kgo.Record{Topic: inputTopic, Partition: int32(i) % c.partitions, Value: []byte(l), Timestamp: ts}
				}
				return recs
			}
			c.produce(t, stamp(corpus.Lines(5000, early), now.Add(-2*time.Hour))...)
			lateStarts := c.endOffsets(t, inputTopic)[inputTopic]
			c.produce(t, stamp(corpus.Lines(5000, late), now)...)
			for _, m := range []map[string]int64{early, late} {
				for w, n := range m {
					all[w] += n
				}
			}

			dir := t.TempDir()
			rc := resetInstanceConfig{guarantee: g}
			a := startResettable(t, c, "a", dir, rc)
			a.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
			c.waitCaughtUp(t, resetApp)
			requireStore(t, all, a)
			a.close(t)

			rep, err := runtime.Reset(ctx(t), wordCount(t), resetConfig(c, dir), runtime.ResetOptions{ToTime: now.Add(-time.Hour)})
			require.NoError(t, err)
			require.Equal(t, map[string]map[int32]int64{inputTopic: lateStarts}, rep.Offsets)

			a = startResettable(t, c, "a2", dir, rc)
			a.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
			c.waitCaughtUp(t, resetApp)
			requireStore(t, late, a)
			// Words only in the early batch are not counted at all.
			got, _ := replicaContents(t, a)
			requireCounts(t, late, got, "every counts replica")
			require.Less(t, len(late), len(all), "some words are only in the early batch")
			a.close(t)
		})
	}
}

// TestAppResetWaitsForOpenTransaction leaves a transaction open holding an
// offset of the group, as an exactly-once instance killed mid-commit does,
// and commits it only once Reset says it waits for it: Reset's offsets
// must come after the transaction's, not be overwritten by them.
func TestAppResetWaitsForOpenTransaction(t *testing.T) {
	c := newCluster(t, 2)
	c.produceLines(t, newCorpus(4, 100).Lines(500, map[string]int64{}))
	// The group exists, with an offset, as after a run.
	var first kadm.Offsets
	first.Add(kadm.Offset{Topic: inputTopic, Partition: 1, At: 3, LeaderEpoch: -1})
	require.NoError(t, c.adm.CommitAllOffsets(ctx(t), resetApp, first))

	tcl, err := kgo.NewClient(kgo.SeedBrokers(c.b.Addrs()...), kgo.TransactionalID("stray-"+resetApp),
		kgo.TransactionTimeout(time.Minute), kgo.DefaultProduceTopic(outputTopic))
	require.NoError(t, err)
	defer tcl.Close()
	require.NoError(t, tcl.BeginTransaction())
	require.NoError(t, tcl.ProduceSync(ctx(t), &kgo.Record{Value: []byte("x")}).FirstErr())
	pid, epoch, err := tcl.ProducerID(ctx(t))
	require.NoError(t, err)
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = "stray-"+resetApp, pid, epoch, resetApp
	addResp, err := add.RequestWith(ctx(t), tcl)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(addResp.ErrorCode))
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch = "stray-"+resetApp, resetApp, pid, epoch
	commit.Generation = -1
	ct := kmsg.NewTxnOffsetCommitRequestTopic()
	ct.Topic = inputTopic
	listed, err := c.adm.ListTopics(ctx(t), inputTopic)
	require.NoError(t, err)
	ct.TopicID = listed[inputTopic].ID // requests from v6 name topics by ID
	cp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	cp.Partition, cp.Offset, cp.LeaderEpoch = 0, 77, -1
	ct.Partitions = append(ct.Partitions, cp)
	commit.Topics = append(commit.Topics, ct)
	commitResp, err := commit.RequestWith(ctx(t), tcl)
	require.NoError(t, err)
	for _, rt := range commitResp.Topics {
		for _, rp := range rt.Partitions {
			require.NoError(t, kerr.ErrorForCode(rp.ErrorCode))
		}
	}

	logs := new(logBuffer)
	cfg := resetConfig(c, t.TempDir())
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	done := make(chan error, 1)
	go func() {
		_, err := runtime.Reset(ctx(t), wordCount(t), cfg, runtime.ResetOptions{})
		done <- err
	}()
	waitFor(t, settleTimeout, "Reset to wait for the open transaction", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("Reset returned (%v) with a transaction open on its group's offsets", err)
		default:
		}
		return strings.Contains(logs.String(), "waiting for an open transaction"), logs.String()
	})
	require.NoError(t, tcl.EndTransaction(ctx(t), kgo.TryCommit))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx(t).Done():
		t.Fatal("Reset still waits after the transaction committed")
	}
	com, err := c.committed(t, resetApp, inputTopic)
	require.NoError(t, err)
	require.Equal(t, map[string]map[int32]int64{inputTopic: {0: 0, 1: 0}}, com, "Reset's offsets, committed after the transaction's")
}
