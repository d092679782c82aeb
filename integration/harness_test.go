// Package integration runs Eddy applications end to end against the embedded
// broker, in-process: word count over generated corpora, restarts with kept
// and wiped state, two instances sharing tasks, poison input, and groups with
// standby replicas that lose, gain and get back instances.
package integration

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// commitInterval is short so that tests see committed state quickly.
const commitInterval = 100 * time.Millisecond

func changelogTopic(app string) string { return changelog.TopicName(app, countsStore) }

// cluster is one embedded broker with the word-count topics and a client for
// producing, reading and administering it.
type cluster struct {
	b          *broker.Broker
	cl         *kgo.Client
	adm        *kadm.Client
	partitions int32
	next       int32 // round-robin partition for produced lines
	// threads is the stream threads of every instance started on the
	// cluster, which the assignor balances load over.
	threads int
}

// newCluster starts a broker and creates the input and output topics with
// the given partition count. Compaction is pushed out of every test's
// lifetime, so changelogs keep every record and restorations can be
// counted exactly.
func newCluster(t *testing.T, partitions int32) *cluster {
	t.Helper()
	b, err := broker.Start(broker.Config{
		Partitions:         partitions,
		CompactionInterval: time.Hour,
	})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return clusterOn(t, b, partitions)
}

// clusterOn is newCluster on a broker the test started itself: a client
// of it, and the input and output topics.
func clusterOn(t *testing.T, b *broker.Broker, partitions int32) *cluster {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	c := &cluster{b: b, cl: cl, adm: kadm.NewClient(cl), partitions: partitions, threads: streamThreads(t)}
	resp, err := c.adm.CreateTopics(ctx(t), partitions, -1, nil, inputTopic, outputTopic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	return c
}

// ctx returns a context bounded by the settle timeout and cancelled when the
// test ends.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), settleTimeout)
	t.Cleanup(cancel)
	return c
}

// produceLines sends lines to the input topic, spread round-robin over its
// partitions, and waits until every one is acknowledged.
func (c *cluster) produceLines(t *testing.T, lines []string) {
	t.Helper()
	recs := make([]*kgo.Record, len(lines))
	for i, l := range lines {
		recs[i] = &kgo.Record{Topic: inputTopic, Partition: c.next, Value: []byte(l)}
		c.next = (c.next + 1) % c.partitions
	}
	c.produce(t, recs...)
}

// produce sends records as given (partition included) and waits for their
// acknowledgements; the records come back with their offsets set.
func (c *cluster) produce(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	var (
		mu   sync.Mutex
		errs []error
	)
	for _, r := range recs {
		c.cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	require.NoError(t, c.cl.Flush(ctx(t)))
	mu.Lock()
	defer mu.Unlock()
	require.NoError(t, errors.Join(errs...))
}

// endOffsets lists the end offset of every partition of the topics.
func (c *cluster) endOffsets(t *testing.T, topics ...string) map[string]map[int32]int64 {
	t.Helper()
	l, err := c.adm.ListEndOffsets(ctx(t), topics...)
	require.NoError(t, err)
	require.NoError(t, l.Error())
	out := make(map[string]map[int32]int64)
	l.Each(func(o kadm.ListedOffset) {
		if out[o.Topic] == nil {
			out[o.Topic] = make(map[int32]int64)
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	for _, topic := range topics {
		require.Contains(t, out, topic, "no end offsets listed for %s", topic)
	}
	return out
}

func sumOffsets(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// committed returns the application's committed offsets for the topics;
// a partition without a commit is absent.
func (c *cluster) committed(t *testing.T, group string, topics ...string) (map[string]map[int32]int64, error) {
	t.Helper()
	resp, err := c.adm.FetchOffsetsForTopics(ctx(t), group, topics...)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[int32]int64)
	var errs []error
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			errs = append(errs, o.Err)
			return
		}
		if o.At < 0 {
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = make(map[int32]int64)
		}
		out[o.Topic][o.Partition] = o.At
	})
	return out, errors.Join(errs...)
}

// waitCaughtUp waits until the application has committed every input and
// repartition record. Committed offsets are read before end offsets: once
// all input is committed, everything derived from it (repartition records,
// store writes, output records) was acknowledged before that commit, so the
// repartition end offsets read afterwards are final.
func (c *cluster) waitCaughtUp(t *testing.T, app string) {
	t.Helper()
	c.waitCommitted(t, settleTimeout, app, inputTopic, repartitionTopic(app))
}

// waitCommitted waits, up to within, until app's group has committed
// every record of topics.
func (c *cluster) waitCommitted(t *testing.T, within time.Duration, app string, topics ...string) {
	t.Helper()
	waitFor(t, within, app+" to commit all input", func() (bool, string) {
		com, err := c.committed(t, app, topics...)
		if err != nil {
			return false, err.Error()
		}
		ends := c.endOffsets(t, topics...)
		for _, topic := range topics {
			for p, end := range ends[topic] {
				if got := com[topic][p]; got != end {
					return false, fmt.Sprintf("%s/%d committed %d of %d", topic, p, got, end)
				}
			}
		}
		return true, ""
	})
}

// readLatest consumes a word-count output topic from the start to the end
// offsets it has now and returns the latest count per word.
func (c *cluster) readLatest(t *testing.T, topic string) map[string]int64 {
	t.Helper()
	ends := c.endOffsets(t, topic)[topic]
	parts := make(map[int32]kgo.Offset)
	for p, end := range ends {
		if end > 0 {
			parts[p] = kgo.NewOffset().AtStart()
		}
	}
	latest := make(map[string]int64)
	if len(parts) == 0 {
		return latest
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.b.Addrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	require.NoError(t, err)
	defer cl.Close()
	next := make(map[int32]int64)
	done := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	rctx := ctx(t)
	for !done() {
		fs := cl.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "reading %s: got to %v of %v", topic, next, ends)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			// A changelog's values carry their timestamps; an output
			// topic's are bare, and SplitTimestamped returns them whole.
			v, _ := statestore.SplitTimestamped(r.Value)
			n, err := serde.Int64.Decode(v)
			require.NoError(t, err, "value of %q at %s/%d@%d", r.Key, r.Topic, r.Partition, r.Offset)
			latest[string(r.Key)] = n
			next[r.Partition] = r.Offset + 1
		})
	}
	return latest
}

// lineSplitValues is the input value serde of the word-count topology: a
// string, except that a value starting with poisonMarker cannot be decoded.
var lineSplitValues serde.Serde[string] = serde.Funcs[string]{
	EncodeFn: func(s string) ([]byte, error) { return []byte(s), nil },
	DecodeFn: func(b []byte) (string, error) {
		if bytes.HasPrefix(b, poisonMarker) {
			return "", errors.New("poison marker")
		}
		return string(b), nil
	},
}

var poisonMarker = []byte{0xff}

// wordCount builds Stream(text) → FlatMapValues(words) → GroupBy(word) →
// Count(counts, countOpts...) → ToStream → To(word-counts).
func wordCount(t *testing.T, countOpts ...topology.Option) *topology.Topology {
	t.Helper()
	b := topology.NewBuilder()
	lines := topology.Stream(b, inputTopic, serde.String, lineSplitValues)
	words := topology.FlatMapValues(lines, func(_, line string) []string { return tokenize(line) })
	counts := topology.GroupBy(words, func(_, w string) string { return w },
		groupByName, serde.String, serde.String).Count(countsStore, countOpts...)
	counts.ToStream().To(outputTopic, serde.String, serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// streamThreadsEnv names the variable that sets NumStreamThreads for every
// instance the tests start, so that the whole suite can be run against
// multi-threaded instances as well as the default.
const streamThreadsEnv = "EDDY_TEST_THREADS"

// envStreamThreads parses streamThreadsEnv once; unset means the runtime's
// default.
var envStreamThreads = sync.OnceValues(func() (int, error) {
	s := os.Getenv(streamThreadsEnv)
	if s == "" {
		return runtime.DefaultNumStreamThreads, nil
	}
	n, err := strconv.Atoi(s)
	if err == nil && n < 1 {
		err = errors.New("must be at least 1")
	}
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", streamThreadsEnv, s, err)
	}
	return n, nil
})

// streamThreads is the number of stream threads of every instance the tests
// start, and so the capacity every instance offers the assignor.
func streamThreads(t testing.TB) int {
	t.Helper()
	n, err := envStreamThreads()
	require.NoError(t, err)
	return n
}

// instance is one running App with its logs kept in memory and printed if
// the test fails.
type instance struct {
	*runtime.App
	name     string
	stateDir string
	endpoint string
}

// instanceConfig holds what tests vary between instances; zero fields take
// the runtime's defaults (the session timeout takes the harness's).
type instanceConfig struct {
	appID          string
	stateDir       string
	sessionTimeout time.Duration
	deser          runtime.DeserializationHandling

	// High-availability settings, passed through to runtime.Config.
	endpoint      string
	standbys      int
	tags          map[string]string
	rackTags      []string
	acceptableLag int64
	maxWarmups    int
	probing       time.Duration
	// keepRepartition turns purging off, for tests that read the
	// repartition topic's records after the group committed past them.
	keepRepartition bool
	// purgeEvery, when set, is the RepartitionPurgeInterval (a short
	// one makes purges race with rebalances).
	purgeEvery time.Duration
	// guarantee, eagerRebalancing, stateListener and assign are passed
	// through to runtime.Config (assign as AssignFunc).
	guarantee        runtime.ProcessingGuarantee
	eagerRebalancing bool
	stateListener    func(old, new runtime.State)
	assign           assignor.AssignFunc
	// combine counts with topology.WithCombining.
	combine bool
}

// start creates and starts an App for the word-count topology. The test's
// cleanup closes it if the test has not.
func (c *cluster) start(t *testing.T, name string, cfg instanceConfig) *instance {
	t.Helper()
	if cfg.appID == "" {
		cfg.appID = "wc"
	}
	if cfg.sessionTimeout == 0 {
		cfg.sessionTimeout = 6 * time.Second
	}
	logs := new(logBuffer)
	level := slog.LevelInfo
	if os.Getenv("EDDY_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level})).With("instance", name)
	var countOpts []topology.Option
	if cfg.combine {
		countOpts = append(countOpts, topology.WithCombining())
	}
	app, err := runtime.New(wordCount(t, countOpts...), runtime.Config{
		ApplicationID:         cfg.appID,
		Brokers:               c.b.Addrs(),
		StateDir:              cfg.stateDir,
		CommitInterval:        commitInterval,
		SessionTimeout:        cfg.sessionTimeout,
		DeserializationErrors: cfg.deser,
		Logger:                logger,
		NumStreamThreads:      streamThreads(t),

		Endpoint:                 cfg.endpoint,
		NumStandbys:              cfg.standbys,
		Tags:                     cfg.tags,
		RackAwareTags:            cfg.rackTags,
		AcceptableRecoveryLag:    cfg.acceptableLag,
		MaxWarmups:               cfg.maxWarmups,
		ProbingRebalanceInterval: cfg.probing,
		RepartitionPurgeInterval: cmp.Or(cfg.purgeEvery, purgeInterval(cfg.keepRepartition)),
		ProcessingGuarantee:      cfg.guarantee,
		EagerRebalancing:         cfg.eagerRebalancing,
		StateListener:            cfg.stateListener,
		AssignFunc:               cfg.assign,
	})
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx(t)))
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// An instance that failed reports its fatal error again from
		// Close; tests that expect the failure have checked it already.
		failed := app.State() == runtime.StateFailed || app.State() == runtime.StatePendingError
		if err := app.Close(cctx); err != nil && !failed {
			t.Errorf("instance %s: close at cleanup: %v", name, err)
		}
		if t.Failed() {
			t.Logf("logs of instance %s:\n%s", name, logs.String())
		}
	})
	return &instance{App: app, name: name, stateDir: cfg.stateDir, endpoint: cfg.endpoint}
}

// purgeInterval is the runtime's default, or no purging when keep is set.
func purgeInterval(keep bool) time.Duration {
	if keep {
		return runtime.NoRepartitionPurge
	}
	return 0
}

// close closes the instance gracefully and requires that it succeeds.
func (in *instance) close(t *testing.T) {
	t.Helper()
	require.NoError(t, in.Close(ctx(t)), "close instance %s", in.name)
	require.Equal(t, runtime.StateNotRunning, in.State())
}

// runningTasks returns the IDs of the instance's running tasks, and whether
// every task it holds is running.
func (in *instance) runningTasks() (ids []task.ID, allRunning bool) {
	allRunning = true
	for _, ti := range in.Tasks() {
		if ti.State == task.Running {
			ids = append(ids, ti.ID)
		} else {
			allRunning = false
		}
	}
	return ids, allRunning
}

// waitAllTasksRunning waits until the instance holds exactly n tasks, all
// running, and every one of its stream threads has an assignment: the
// threads of an instance join the group one after the other, and the first
// may run every task before the second's arrival moves some.
func (in *instance) waitAllTasksRunning(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("instance %s to run %d tasks", in.name, n), func() (bool, string) {
		if err := in.Err(); err != nil {
			t.Fatalf("instance %s failed: %v", in.name, err)
		}
		ids, all := in.runningTasks()
		return all && len(ids) == n && in.Ready(), fmt.Sprintf("tasks %v, ready %v", in.Tasks(), in.Ready())
	})
}

// allTasks is the number of tasks of the word-count topology: two
// sub-topologies with one task per partition each.
func (c *cluster) allTasks() int { return 2 * int(c.partitions) }

// droppedLate sums the late records the tasks of an instance dropped from
// closed windows.
func droppedLate(in interface{ Tasks() []runtime.TaskInfo }) (n int64) {
	for _, t := range in.Tasks() {
		n += t.DroppedLate
	}
	return n
}

// activeGet reads a key through the query path under the default bound, as
// an application does, from the running active of its partition on q. A
// replica of the partition here that is not its running active (restoring,
// standby, warmup, parked) is refused as iq.ErrNotHostedHere, so that a
// caller looping over the instances asks the next one; an active whose
// membership is unconfirmed keeps its *iq.StaleError.
func activeGet(q interface{ Queries() iq.Backend }, store string, key []byte) (value []byte, found bool, partition int32, err error) {
	res, err := iq.NewQuerier(q.Queries()).GetBytes(context.Background(), store, key)
	if se, ok := errors.AsType[*iq.StaleError](err); ok && se.Role != iq.RoleUnconfirmed {
		err = fmt.Errorf("%w: %v", iq.ErrNotHostedHere, err)
	}
	return res.Value, res.Found, res.Provenance.Partition, err
}

// requireStore reads every word of want through activeGet on whichever
// instance hosts it and requires the stored count to match. A partition may
// be between owners when it is called — the threads of an instance join the
// group one after the other, and each arrival moves tasks — so it waits,
// within settleTimeout, for every partition to be hosted as a running active
// and for the counts to settle (see below) before failing.
func requireStore(t *testing.T, want map[string]int64, insts ...*instance) {
	t.Helper()
	var got map[string]int64
	waitFor(t, settleTimeout, "every word's partition hosted as a running active", func() (bool, string) {
		got = make(map[string]int64, len(want))
		var missing []string
		for _, w := range slices.Sorted(maps.Keys(want)) {
			key, err := serde.String.Encode(w)
			require.NoError(t, err)
			hosted := false
			for _, in := range insts {
				v, found, _, err := activeGet(in, countsStore, key)
				if errors.Is(err, iq.ErrNotHostedHere) {
					continue
				}
				require.NoError(t, err, "activeGet(%q) on %s", w, in.name)
				hosted = true
				if found {
					n, err := serde.Int64.Decode(v)
					require.NoError(t, err)
					got[w] = n
				}
				break
			}
			if !hosted {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			return false, fmt.Sprintf("%d words unhosted, first %v", len(missing), missing[:min(5, len(missing))])
		}
		// Under exactly-once a commit's writes reach the store just after
		// its transaction (and so its offsets) committed: counts read
		// right after the offsets may trail by that commit. Nothing is
		// produced meanwhile, so they settle on the reference or never.
		if maps.Equal(want, got) {
			return true, ""
		}
		return false, countDiff(want, got, nil)
	})
	requireCounts(t, want, got, "store "+countsStore)
}

// requireOutput reads the output topic to its end and requires the latest
// count per word to equal want.
func (c *cluster) requireOutput(t *testing.T, want map[string]int64) {
	t.Helper()
	requireCounts(t, want, c.readLatest(t, outputTopic), "topic "+outputTopic)
}

// storePositions opens the counts stores a closed instance left on disk and
// returns their changelog positions by partition. The stores are in the
// shared database, STATE/APP/stores, under TASK/STORE, or in databases of
// their own, STATE/APP/TASK/STORE (see runtime/layout.go).
func storePositions(t *testing.T, stateDir, app string, partitions int32) map[int32]int64 {
	t.Helper()
	out := make(map[int32]int64)
	var shared *statestore.SharedBadger
	if dir := filepath.Join(stateDir, app, "stores"); dirExists(dir) {
		var err error
		shared, err = statestore.OpenSharedBadger(dir, statestore.BadgerOptions{})
		require.NoError(t, err)
		defer shared.Close()
	}
	for p := range partitions {
		id := task.ID{SubTopology: 1, Partition: p}
		var s statestore.Store
		var err error
		switch dir := filepath.Join(task.Dir(filepath.Join(stateDir, app), id), countsStore); {
		case shared != nil && shared.Has(id.String()+"/"+countsStore):
			s, err = shared.Open(id.String() + "/" + countsStore)
		case shared == nil && dirExists(dir):
			s, err = statestore.OpenBadger(dir, statestore.DefaultBadgerOptions())
		default:
			continue
		}
		require.NoError(t, err)
		pos, err := s.Position()
		require.NoError(t, err)
		require.NoError(t, s.Close())
		out[p] = pos
	}
	return out
}

func dirExists(dir string) bool {
	_, err := os.Stat(dir)
	return err == nil
}

// TestCorpusTokenizesToReference checks the harness itself: tokenizing the
// generated lines gives back exactly the generated words.
func TestCorpusTokenizesToReference(t *testing.T) {
	want := make(map[string]int64)
	lines := newCorpus(7, 500).Lines(20_000, want)
	got := make(map[string]int64)
	for _, l := range lines {
		for _, w := range tokenize(l) {
			got[w]++
		}
	}
	requireCounts(t, want, got, "tokenized corpus")
	var total int64
	for _, n := range want {
		total += n
	}
	require.EqualValues(t, 20_000, total)
	require.Greater(t, len(want), 100, "vocabulary actually used")
}

// startEOSPeer creates an App of topo as the exactly-once failover tests
// of joins, table aggregations and sliding windows run their instances —
// one standby, a 3 s session, 200 ms commits — and starts it, returning
// Start's error. The test's cleanup closes it and prints its logs if the
// test failed.
func (c *cluster) startEOSPeer(t *testing.T, topo *topology.Topology, appID, name, dir string) (*runtime.App, error) {
	t.Helper()
	logs := new(logBuffer)
	app, err := runtime.New(topo, runtime.Config{
		ApplicationID:       appID,
		Brokers:             c.b.Addrs(),
		StateDir:            dir,
		ProcessingGuarantee: runtime.ExactlyOnce,
		NumStandbys:         1,
		NumStreamThreads:    streamThreads(t),
		SessionTimeout:      3 * time.Second,
		CommitInterval:      200 * time.Millisecond,
		Logger:              slog.New(slog.NewTextHandler(logs, nil)).With("instance", name),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		app.Close(cctx)
		if t.Failed() {
			t.Logf("logs of instance %s:\n%s", name, logs.String())
		}
	})
	return app, app.Start(ctx(t))
}
