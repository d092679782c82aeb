package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
)

const wipePartitions = 3

// wipeBroker starts an embedded broker on listen with a fresh data
// directory, as an operator restarting a broker whose disk was lost would,
// and creates the user's input and output topics again.
// Before creating them it waits for noticed, if given, to hold: the
// instances must wait for their input and output topics rather than fail.
func wipeBroker(t *testing.T, c *cluster, listen string, noticed func() (bool, string)) {
	t.Helper()
	b, err := broker.Start(broker.Config{
		Listen:             listen,
		DataDir:            t.TempDir(),
		Partitions:         wipePartitions,
		CompactionInterval: time.Hour,
	})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	c.b = b
	// kgo never adopts a recreated topic's new ID: the test's own
	// producer is a new client, as a producer restarted after the wipe
	// would be.
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	c.cl, c.adm = cl, kadm.NewClient(cl)
	if noticed != nil {
		waitFor(t, settleTimeout, "the instances to notice the wipe", noticed)
	}
	var resp kadm.CreateTopicResponses
	waitFor(t, settleTimeout, "the user's topics to be created on the new broker", func() (bool, string) {
		resp, err = c.adm.CreateTopics(ctx(t), wipePartitions, -1, nil, inputTopic, outputTopic)
		if err == nil {
			err = resp.Error()
		}
		return err == nil, fmt.Sprint(err)
	})
}

// startWipeInstance starts a word-count instance with one standby per task
// under the given guarantee. Its logs are printed if the test fails.
func startWipeInstance(t *testing.T, c *cluster, name string, g runtime.ProcessingGuarantee) *instance {
	t.Helper()
	return startWipeInstanceIn(t, c, name, t.TempDir(), g)
}

// startWipeInstanceIn is startWipeInstance with a given state directory.
func startWipeInstanceIn(t *testing.T, c *cluster, name, dir string, g runtime.ProcessingGuarantee) *instance {
	t.Helper()
	logs := new(logBuffer)
	level := slog.LevelInfo
	if os.Getenv("EDDY_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	app, err := runtime.New(wordCount(t), runtime.Config{
		ApplicationID:       "wipe",
		Brokers:             c.b.Addrs(),
		StateDir:            dir,
		ProcessingGuarantee: g,
		CommitInterval:      commitInterval,
		NumStandbys:         1,
		NumStreamThreads:    streamThreads(t),
		SessionTimeout:      3 * time.Second,
		Endpoint:            name + ".invalid:1",
		Logger:              slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level})).With("instance", name),
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

// activeCounts reads every word through activeGet on whichever instance
// hosts its partition as the active; a word not stored counts 0. It says
// which words no instance hosts.
func activeCounts(t *testing.T, words []string, insts ...*instance) (map[string]int64, []string) {
	t.Helper()
	got := make(map[string]int64)
	var unhosted []string
	for _, w := range words {
		key, err := serde.String.Encode(w)
		require.NoError(t, err)
		hosted := false
		for _, in := range insts {
			v, found, _, err := activeGet(in, countsStore, key)
			if errors.Is(err, iq.ErrNotHostedHere) {
				continue
			}
			if err != nil {
				continue // restoring or between owners: ask again later
			}
			hosted = true
			if found {
				n, err := serde.Int64.Decode(v)
				require.NoError(t, err)
				got[w] = n
			}
			break
		}
		if !hosted {
			unhosted = append(unhosted, w)
		}
	}
	return got, unhosted
}

// waitWipeCounts waits until every word's active count is want's (0 for a
// word want lacks).
func waitWipeCounts(t *testing.T, what string, words []string, want map[string]int64, insts ...*instance) {
	t.Helper()
	waitFor(t, 2*settleTimeout, what, func() (bool, string) {
		for _, in := range insts {
			if err := in.Err(); err != nil {
				t.Fatalf("instance %s failed: %v", in.name, err)
			}
		}
		got, unhosted := activeCounts(t, words, insts...)
		if len(unhosted) > 0 {
			return false, fmt.Sprintf("%d words unhosted, first %v", len(unhosted), unhosted[:min(5, len(unhosted))])
		}
		var diffs []string
		low := 0
		for _, w := range words {
			if got[w] != want[w] {
				if got[w] < want[w] {
					low++
				}
				diffs = append(diffs, fmt.Sprintf("%q: want %d, got %d", w, want[w], got[w]))
			}
		}
		if len(diffs) == 0 {
			return true, ""
		}
		return false, fmt.Sprintf("%d of %d words differ (%d too low), e.g. %s", len(diffs), len(words), low, strings.Join(diffs[:min(5, len(diffs))], "; "))
	})
}

// TestBrokerWipeRecovery restarts the broker with an empty data directory
// under three running instances: every topic, the group and its committed
// offsets are gone. After an operator recreates the input and output
// topics, the instances must carry on without being restarted, and the
// counts must be those of the input produced after the wipe: the old state
// went with its changelogs.
func TestBrokerWipeRecovery(t *testing.T) {
	t.Parallel() // correctness only, no timing bound: runs beside another such test
	for _, g := range []runtime.ProcessingGuarantee{runtime.ExactlyOnce, runtime.AtLeastOnce} {
		t.Run(g.String(), func(t *testing.T) { testBrokerWipe(t, g) })
	}
}

// newWipeCluster starts a persistent broker on a free port with the
// word-count topics and returns it with the address to restart it on.
func newWipeCluster(t *testing.T) (*cluster, string) {
	t.Helper()
	b, err := broker.Start(broker.Config{
		Listen:             "127.0.0.1:0",
		DataDir:            t.TempDir(),
		Partitions:         wipePartitions,
		CompactionInterval: time.Hour,
	})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	listen := b.Addrs()[0]
	var c *cluster
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	c = &cluster{b: b, cl: cl, adm: kadm.NewClient(cl), partitions: wipePartitions, threads: streamThreads(t)}
	resp, err := c.adm.CreateTopics(ctx(t), wipePartitions, -1, nil, inputTopic, outputTopic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	return c, listen
}

func testBrokerWipe(t *testing.T, g runtime.ProcessingGuarantee) {
	c, listen := newWipeCluster(t)
	insts := []*instance{
		startWipeInstance(t, c, "a", g),
		startWipeInstance(t, c, "b", g),
		startWipeInstance(t, c, "c", g),
	}
	gen := newCorpus(11, 400)
	words := slices.Clone(gen.Vocab)
	before := make(map[string]int64)
	c.produceLines(t, gen.Lines(6000, before))
	waitWipeCounts(t, "the counts before the wipe", words, before, insts...)

	c.b.Close()
	wipeBroker(t, c, listen, func() (bool, string) {
		for _, in := range insts {
			if err := in.Err(); err != nil {
				t.Fatalf("instance %s failed: %v", in.name, err)
			}
			if in.Stats().Rewires == 0 {
				return false, "instance " + in.name + " has not noticed"
			}
		}
		return true, ""
	})
	t.Logf("broker restarted on %s with an empty data directory", listen)

	// New input only: what the counts must be once the instances noticed.
	after := make(map[string]int64)
	c.produceLines(t, gen.Lines(3000, after))
	waitWipeCounts(t, "the counts of the input produced after the wipe", words, after, insts...)

	// And they go on counting.
	c.produceLines(t, gen.Lines(3000, after))
	waitWipeCounts(t, "the counts after more input", words, after, insts...)
	for _, in := range insts {
		require.NoError(t, in.Err(), "instance %s", in.name)
		require.True(t, in.State().IsRunningOrRebalancing(), "instance %s", in.name)
	}
}

// TestBrokerWipeThenRestartWithKeptState is the restart by hand after a
// broker lost its data: an instance stopped before the wipe comes back with
// its state directory, whose stores' positions count records of changelogs
// that no longer exist. The new changelogs have grown past those positions
// by then, so the positions fit them; restoring from there would keep old
// counts for every word whose latest new record lies below the position.
// The state must be rebuilt from the new changelogs instead.
func TestBrokerWipeThenRestartWithKeptState(t *testing.T) {
	c, listen := newWipeCluster(t)
	dir := t.TempDir()
	a := startWipeInstanceIn(t, c, "a", dir, runtime.ExactlyOnce)
	gen := newCorpus(13, 300)
	words := slices.Clone(gen.Vocab)
	before := make(map[string]int64)
	c.produceLines(t, gen.Lines(3000, before))
	waitWipeCounts(t, "the counts before the wipe", words, before, a)
	a.close(t)

	c.b.Close()
	wipeBroker(t, c, listen, nil)
	after := make(map[string]int64)
	b := startWipeInstance(t, c, "b", runtime.ExactlyOnce)
	// More input than before, so the new changelogs outgrow the old
	// positions.
	c.produceLines(t, gen.Lines(9000, after))
	waitWipeCounts(t, "the counts of the input produced after the wipe", words, after, b)
	b.close(t)

	a = startWipeInstanceIn(t, c, "a2", dir, runtime.ExactlyOnce)
	waitWipeCounts(t, "the counts after restarting with the state kept from before the wipe", words, after, a)
	require.Positive(t, a.Stats().StoreResets, "the state kept from before the wipe was reset")
}
