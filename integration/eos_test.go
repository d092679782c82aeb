package integration

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
)

const (
	eosApp        = "eos"
	eosPartitions = 4
	// absurdCount is what the aborted changelog records say: no count in
	// the test comes near it.
	absurdCount = 999_999
	// neverCommitted is a key written only by aborted transactions; it is
	// no word of the text (the tokenizer never keeps '-').
	neverCommitted = "never-committed"
)

// startEOS starts a word-count instance under exactly-once with one standby
// per task. Its logs are printed if the test fails.
func startEOS(t *testing.T, c *cluster, name, dir string) *runtime.App {
	t.Helper()
	logs := new(logBuffer)
	app, err := runtime.New(wordCount(t), runtime.Config{
		ApplicationID:       eosApp,
		Brokers:             c.b.Addrs(),
		StateDir:            dir,
		ProcessingGuarantee: runtime.ExactlyOnce,
		NumStandbys:         1,
		NumStreamThreads:    streamThreads(t),
		SessionTimeout:      3 * time.Second,
		Endpoint:            name + ".invalid:1",
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
	return app
}

// eosRoles returns each counts partition's role on app.
func eosRoles(app *runtime.App) map[int32]task.State {
	out := make(map[int32]task.State)
	for _, r := range app.Replicas() {
		if r.Store == countsStore {
			out[r.Partition] = r.State
		}
	}
	return out
}

// standbyWatch queries every word on every instance with staleness any, over
// and over, and remembers any answer that shows aborted data.
type standbyWatch struct {
	words   []string
	targets atomic.Pointer[[]*iq.Querier]
	stop    chan struct{}
	done    chan struct{}

	haltOnce sync.Once

	mu     sync.Mutex
	bad    []string
	byRole map[iq.Role]int
}

func watchStandbys(words []string, apps ...*runtime.App) *standbyWatch {
	w := &standbyWatch{words: words, stop: make(chan struct{}), done: make(chan struct{}), byRole: make(map[iq.Role]int)}
	w.watch(apps...)
	go w.run()
	return w
}

// watch replaces the instances being queried.
func (w *standbyWatch) watch(apps ...*runtime.App) {
	qs := make([]*iq.Querier, len(apps))
	for i, a := range apps {
		qs[i] = iq.NewQuerier(a.Queries())
	}
	w.targets.Store(&qs)
}

func (w *standbyWatch) run() {
	defer close(w.done)
	for {
		for _, q := range *w.targets.Load() {
			for _, word := range w.words {
				select {
				case <-w.stop:
					return
				default:
				}
				res, err := iq.Get(context.Background(), q, countsStore, word, serde.String, serde.Int64,
					iq.WithStaleness(iq.AnyStaleness()))
				if err != nil {
					continue // not hosted here, or moving: nothing read
				}
				w.mu.Lock()
				w.byRole[res.Provenance.Role]++
				if res.Found && (res.Value >= absurdCount || word == neverCommitted) {
					w.bad = append(w.bad, fmt.Sprintf("%q = %d from a %s replica of partition %d at position %d",
						word, res.Value, res.Provenance.Role, res.Provenance.Partition, res.Provenance.Position))
				}
				w.mu.Unlock()
			}
		}
	}
}

// requireClean fails the test if any answer so far showed aborted data.
func (w *standbyWatch) requireClean(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Empty(t, w.bad, "answers that showed aborted data")
}

func (w *standbyWatch) halt() {
	w.haltOnce.Do(func() { close(w.stop) })
	<-w.done
}

// TestExactlyOnceStandbysNeverHoldAbortedData is issue 5's test 3: under
// exactly-once, standbys read changelogs with read-committed isolation, so
// records of aborted transactions never reach their stores. Besides the
// application's own transactions, the test writes aborted transactions
// straight into the changelog, with absurd counts and a key the text never
// has, and queries every word on both instances with staleness any all the
// while: no absurd value ever appears, and the committed counts do, on the
// standbys that followed the changelog and on a standby rebuilt from it.
func TestExactlyOnceStandbysNeverHoldAbortedData(t *testing.T) {
	c := newCluster(t, eosPartitions)
	a := startEOS(t, c, "a", t.TempDir())
	b := startEOS(t, c, "b", t.TempDir())

	// Each partition active on one instance and followed on the other (a
	// warmup is a standby placed to take the active over later).
	placed := func() (bool, string) {
		ra, rb := eosRoles(a), eosRoles(b)
		follows := func(r task.State) bool { return r == task.Standby || r == task.Warmup }
		for p := range int32(eosPartitions) {
			x, y := ra[p], rb[p]
			if !(x == task.Running && follows(y)) && !(follows(x) && y == task.Running) {
				return false, fmt.Sprintf("partition %d: %s on a, %s on b", p, x, y)
			}
		}
		return true, ""
	}
	waitFor(t, settleTimeout, "an active and a standby for every partition", placed)

	gen := newCorpus(5, 300)
	words := append(slices.Clone(gen.Vocab), neverCommitted)
	// Words to write aborted counts for: a few in every partition, and
	// the key that only aborted transactions ever hold.
	var victims []string
	perPartition := make(map[int32]int)
	for _, word := range words {
		p, err := a.Queries().KeyPartition(countsStore, []byte(word))
		require.NoError(t, err)
		if perPartition[p] < 5 || word == neverCommitted {
			perPartition[p]++
			victims = append(victims, word)
		}
	}
	watch := watchStandbys(words, a, b)
	defer watch.halt()

	intruder, err := kgo.NewClient(
		kgo.SeedBrokers(c.b.Addrs()...),
		kgo.TransactionalID("eos-test-intruder"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	require.NoError(t, err)
	defer intruder.Close()
	topic := changelogTopic(eosApp)
	// abort writes an absurd count for every victim word into the
	// changelog partition that holds it, and aborts the transaction.
	abort := func() {
		t.Helper()
		before := c.endOffsets(t, topic)[topic]
		require.NoError(t, intruder.BeginTransaction())
		recs := make([]*kgo.Record, 0, len(victims))
		for _, word := range victims {
			p, err := a.Queries().KeyPartition(countsStore, []byte(word))
			require.NoError(t, err)
			v, err := serde.Int64.Encode(absurdCount)
			require.NoError(t, err)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Key: []byte(word), Value: v})
		}
		// Synchronously, so that the records are in the log before the
		// abort marker follows them.
		require.NoError(t, intruder.ProduceSync(ctx(t), recs...).FirstErr())
		require.NoError(t, intruder.EndTransaction(ctx(t), kgo.TryAbort))
		after := c.endOffsets(t, topic)[topic]
		for p, n := range perPartition {
			require.GreaterOrEqual(t, after[p]-before[p], int64(n+1), "aborted records and marker in partition %d", p)
		}
	}

	want := make(map[string]int64)
	for range 3 {
		c.produceLines(t, gen.Lines(4000, want))
		abort()
	}
	// Committed data after the last aborted transaction: a standby shows
	// it only after reading past every aborted record.
	c.produceLines(t, gen.Lines(4000, want))

	// standbyProblem compares, for every word, what the replica that is
	// not the active holds with the reference.
	standbyProblem := func(apps ...*runtime.App) (bool, string) {
		got := make(map[string]int64)
		for _, app := range apps {
			q := iq.NewQuerier(app.Queries())
			for _, word := range words {
				res, err := iq.Get(context.Background(), q, countsStore, word, serde.String, serde.Int64,
					iq.WithStaleness(iq.AnyStaleness()))
				if err != nil || res.Provenance.Role == iq.RoleActive || !res.Found {
					continue
				}
				got[word] = res.Value
			}
		}
		if maps.Equal(got, want) {
			return true, ""
		}
		var diffs []string
		for _, w := range words {
			if got[w] != want[w] {
				diffs = append(diffs, fmt.Sprintf("%q: want %d, standby has %d", w, want[w], got[w]))
			}
		}
		return false, fmt.Sprintf("%d words differ, e.g. %s", len(diffs), strings.Join(diffs[:min(5, len(diffs))], "; "))
	}
	waitFor(t, settleTimeout, "the standbys to hold every committed count", func() (bool, string) {
		watch.requireClean(t)
		return standbyProblem(a, b)
	})

	// b comes back with no state and rebuilds its standbys from the
	// changelogs, aborted transactions included, while being queried.
	require.NoError(t, b.Close(ctx(t)))
	watch.watch(a)
	b = startEOS(t, c, "b2", t.TempDir())
	watch.watch(a, b)
	abort()
	c.produceLines(t, gen.Lines(4000, want))
	waitFor(t, settleTimeout, "an active and a standby for every partition", placed)
	waitFor(t, settleTimeout, "the rebuilt standbys to hold every committed count", func() (bool, string) {
		watch.requireClean(t)
		return standbyProblem(a, b)
	})

	watch.halt()
	watch.requireClean(t)
	watch.mu.Lock()
	defer watch.mu.Unlock()
	t.Logf("answers with staleness any, by role: %v", watch.byRole)
	require.Positive(t, watch.byRole[iq.RoleStandby], "no standby ever answered")
}
