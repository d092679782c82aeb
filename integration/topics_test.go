package integration

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// startApp creates and starts an App of topo with cfg, filling in the
// brokers, a state directory, the harness's commit interval and a logger
// whose output is printed if the test fails. The test's cleanup closes it.
func (c *cluster) startApp(t *testing.T, topo *topology.Topology, cfg runtime.Config) *instance {
	t.Helper()
	app, logs, err := c.newApp(t, topo, cfg)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx(t)), "start; logs:\n%s", logs)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := app.Close(cctx); err != nil {
			t.Errorf("instance %s: close at cleanup: %v", cfg.ApplicationID, err)
		}
		if t.Failed() {
			t.Logf("logs of instance %s:\n%s", cfg.ApplicationID, logs)
		}
	})
	return &instance{App: app, name: cfg.ApplicationID}
}

// newApp is startApp without the start.
func (c *cluster) newApp(t *testing.T, topo *topology.Topology, cfg runtime.Config) (*runtime.App, *logBuffer, error) {
	t.Helper()
	logs := new(logBuffer)
	cfg.Brokers = c.b.Addrs()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = commitInterval
	}
	cfg.SessionTimeout = 6 * time.Second
	cfg.NumStreamThreads = streamThreads(t)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil)).With("instance", cfg.ApplicationID)
	app, err := runtime.New(topo, cfg)
	return app, logs, err
}

// wordCountTopology is the harness's word count over any input and output
// topics: Stream(in...) merged → FlatMapValues → GroupBy(word) →
// Count(counts) → To(out).
func wordCountTopology(t *testing.T, out string, in ...string) *topology.Topology {
	t.Helper()
	b := topology.NewBuilder()
	var lines topology.KStream[string, string]
	for i, topic := range in {
		s := topology.Stream(b, topic, serde.String, lineSplitValues)
		if i == 0 {
			lines = s
		} else {
			lines = lines.Merge(s)
		}
	}
	words := topology.FlatMapValues(lines, func(_, line string) []string { return tokenize(line) })
	topology.GroupBy(words, func(_, w string) string { return w }, groupByName, serde.String, serde.String).
		Count(countsStore).ToStream().To(out, serde.String, serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// partitionOffsets lists one kind of offset of every partition of topic.
func partitionOffsets(t *testing.T, l kadm.ListedOffsets, err error, topic string) map[int32]int64 {
	t.Helper()
	require.NoError(t, err)
	require.NoError(t, l.Error())
	out := make(map[int32]int64)
	l.Each(func(o kadm.ListedOffset) {
		if o.Topic == topic {
			out[o.Partition] = o.Offset
		}
	})
	return out
}

// TestRepartitionPurge runs a word count over several rounds of input with a
// short purge interval and requires, after each round, every repartition
// partition's log start to have moved up to exactly the offset the group
// committed for it in that round (so above the previous round's), and never
// above the committed offset at any moment sampled. The repartition topic is
// created with infinite retention.
func TestRepartitionPurge(t *testing.T) {
	for _, g := range []runtime.ProcessingGuarantee{runtime.AtLeastOnce, runtime.ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			const rounds = 4
			c := newCluster(t, 3)
			appID := "purge-" + g.String()
			rp := repartitionTopic(appID)
			app := c.startApp(t, wordCount(t), runtime.Config{
				ApplicationID:            appID,
				ProcessingGuarantee:      g,
				RepartitionPurgeInterval: 300 * time.Millisecond,
			})
			app.waitAllTasksRunning(t, c.allTasks(), settleTimeout)

			configs, err := c.adm.DescribeTopicConfigs(ctx(t), rp)
			require.NoError(t, err)
			rc, err := configs.On(rp, nil)
			require.NoError(t, err)
			got := make(map[string]string)
			for _, cfg := range rc.Configs {
				got[cfg.Key] = cfg.MaybeValue()
			}
			require.Equal(t, "-1", got["retention.ms"], "retention.ms of %s", rp)
			require.Equal(t, "delete", got["cleanup.policy"], "cleanup.policy of %s", rp)

			gen := newCorpus(7, 500)
			want := make(map[string]int64)
			prev := make(map[int32]int64)
			for round := range rounds {
				c.produceLines(t, gen.Lines(3000, want))
				c.waitCaughtUp(t, appID)
				com, err := c.committed(t, appID, rp)
				require.NoError(t, err)
				committed := com[rp]
				require.Len(t, committed, int(c.partitions))
				waitFor(t, settleTimeout, fmt.Sprintf("round %d: log starts of %s at the committed offsets %v", round, rp, committed), func() (bool, string) {
					starts := c.logStarts(t, rp)
					for p, start := range starts {
						// The group is idle: its committed offsets are
						// those read above, and purges never go past them.
						require.LessOrEqual(t, start, committed[p], "round %d: log start of %s/%d above its committed offset", round, rp, p)
					}
					for p, off := range committed {
						if starts[p] != off {
							return false, fmt.Sprintf("log starts %v", starts)
						}
					}
					return true, ""
				})
				for p, off := range committed {
					require.Greater(t, off, prev[p], "round %d: %s/%d committed offset did not move", round, rp, p)
				}
				prev = committed
			}
			requireStore(t, want, app)
		})
	}
}

// logStarts lists the log start offset of every partition of topic.
func (c *cluster) logStarts(t *testing.T, topic string) map[int32]int64 {
	t.Helper()
	l, err := c.adm.ListStartOffsets(ctx(t), topic)
	return partitionOffsets(t, l, err, topic)
}

// TestRepartitionPurgeDuringProcessing requires the log start of the
// repartition topic to move while input is still arriving (purges follow
// commits; they do not wait for the group to go idle), and never past the
// offsets the group has committed.
func TestRepartitionPurgeDuringProcessing(t *testing.T) {
	c := newCluster(t, 2)
	const appID = "purge-live"
	rp := repartitionTopic(appID)
	app := c.startApp(t, wordCount(t), runtime.Config{ApplicationID: appID, RepartitionPurgeInterval: 200 * time.Millisecond})
	app.waitAllTasksRunning(t, c.allTasks(), settleTimeout)

	gen := newCorpus(8, 500)
	want := make(map[string]int64)
	// Input keeps arriving until every partition's log start has moved:
	// each pass produces a batch, then looks.
	waitFor(t, settleTimeout, "the log start of "+rp+" to move while input arrives", func() (bool, string) {
		c.produceLines(t, gen.Lines(200, want))
		starts := c.logStarts(t, rp)
		com, err := c.committed(t, appID, rp)
		if err != nil {
			return false, err.Error()
		}
		moved := 0
		for p, start := range starts {
			require.LessOrEqual(t, start, com[rp][p], "log start of %s/%d above its committed offset (committed read after the start)", rp, p)
			if start > 0 {
				moved++
			}
		}
		return moved == len(starts), fmt.Sprintf("log starts %v", starts)
	})
	ends := c.endOffsets(t, rp)[rp]
	starts := c.logStarts(t, rp)
	for p, start := range starts {
		require.Less(t, start, ends[p], "%s/%d: log start %d is not behind the end %d: the group had caught up, so this did not show purging while input arrives", rp, p, start, ends[p])
	}
	c.waitCaughtUp(t, appID)
	requireCounts(t, want, c.readLatest(t, outputTopic), "topic "+outputTopic)
}

// TestMissingTopics starts a topology reading two topics that do not exist
// and writing a third that does not either: Start fails with an error naming
// all three by role. With CreateMissingTopics the missing ones are created
// — the missing source with the partition count of the existing source it is
// co-partitioned with, the sink with the count of the sub-topology writing it
// — and the counts are right.
func TestMissingTopics(t *testing.T) {
	const srcA, srcB, sink = "missing-a", "missing-b", "missing-out"
	c := newCluster(t, 2)
	topo := wordCountTopology(t, sink, srcA, srcB)

	app, _, err := c.newApp(t, topo, runtime.Config{ApplicationID: "missing"})
	require.NoError(t, err)
	err = app.Start(ctx(t))
	var missing *runtime.MissingTopicsError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, []string{srcA, srcB}, missing.Sources)
	require.Equal(t, []string{sink}, missing.Sinks)
	for _, name := range []string{srcA, srcB, sink} {
		require.ErrorContains(t, err, `"`+name+`"`)
	}
	require.Equal(t, runtime.StateFailed, app.State())
	details, lerr := c.adm.ListTopics(ctx(t), srcA, srcB, sink)
	require.NoError(t, lerr)
	for _, name := range []string{srcA, srcB, sink} {
		require.Error(t, details[name].Err, "topic %s was created without CreateMissingTopics", name)
	}

	// One source exists with 3 partitions: the other must match it.
	resp, err := c.adm.CreateTopics(ctx(t), 3, -1, nil, srcB)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	in := c.startApp(t, topo, runtime.Config{ApplicationID: "missing", CreateMissingTopics: true, DefaultPartitions: 5})
	// Asking for authorized operations bypasses the client's metadata
	// cache, which still holds the topics as missing.
	details, err = c.adm.ListTopics(kadm.WithAuthorizedOps(ctx(t)), srcA, srcB, sink)
	require.NoError(t, err)
	for _, name := range []string{srcA, srcB, sink} {
		require.NoError(t, details[name].Err, name)
		require.Len(t, details[name].Partitions, 3, "partitions of %s", name)
	}
	in.waitAllTasksRunning(t, 6, settleTimeout)

	gen := newCorpus(9, 300)
	want := make(map[string]int64)
	var recs []*kgo.Record
	for i, l := range gen.Lines(4000, want) {
		topic := srcA
		if i%2 == 1 {
			topic = srcB
		}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 3), Value: []byte(l)})
	}
	c.produce(t, recs...)
	waitFor(t, settleTimeout, "counts in "+sink, func() (bool, string) {
		got := c.readLatest(t, sink)
		for w, n := range want {
			if got[w] != n {
				return false, fmt.Sprintf("%q: %d of %d", w, got[w], n)
			}
		}
		return len(got) == len(want), fmt.Sprintf("%d words of %d", len(got), len(want))
	})
	in.close(t)
}

// batchCodecs reads topic from the start to its current end and returns the
// compression codec of every record batch fetched (0 none, 1 gzip, 2
// snappy, 3 lz4, 4 zstd), as the batches' attributes say.
func (c *cluster) batchCodecs(t *testing.T, topic string) map[uint8]int {
	t.Helper()
	// Under at-least-once a commit's sink records can land before its
	// changelog records (one producer, requests in turn), so the sink
	// holding every count does not mean the changelog holds anything yet.
	var ends map[int32]int64
	waitFor(t, settleTimeout, "records in "+topic, func() (bool, string) {
		ends = c.endOffsets(t, topic)[topic]
		return sumOffsets(ends) > 0, "nothing written to " + topic
	})
	var mu sync.Mutex
	codecs := make(map[uint8]int)
	hook := batchHook(func(tp string, m kgo.FetchBatchMetrics) {
		if tp == topic {
			mu.Lock()
			codecs[m.CompressionType]++
			mu.Unlock()
		}
	})
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.b.Addrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.WithHooks(hook),
	)
	require.NoError(t, err)
	defer cl.Close()
	next := make(map[int32]int64)
	rctx := ctx(t)
	for {
		done := true
		for p, end := range ends {
			if next[p] < end {
				done = false
			}
		}
		if done {
			break
		}
		fs := cl.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "reading %s: got to %v of %v", topic, next, ends)
		fs.EachRecord(func(r *kgo.Record) { next[r.Partition] = r.Offset + 1 })
	}
	mu.Lock()
	defer mu.Unlock()
	return codecs
}

type batchHook func(topic string, m kgo.FetchBatchMetrics)

func (h batchHook) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.FetchBatchMetrics) {
	h(topic, m)
}

// TestCompression requires Eddy's producers to write uncompressed batches
// by default (franz-go's own default is snappy, which not every Kafka client
// can read) and batches of the configured codec when Compression is set —
// except those compression would not shrink — on the sink, the repartition
// and the changelog topic alike.
func TestCompression(t *testing.T) {
	c := newCluster(t, 2)
	for _, tc := range []struct {
		codec runtime.Compression
		want  uint8
	}{
		{runtime.CompressionNone, 0},
		{runtime.CompressionZstd, 4},
		{runtime.CompressionGzip, 1},
	} {
		t.Run(tc.codec.String(), func(t *testing.T) {
			appID := "compress-" + tc.codec.String()
			src, out := appID+"-in", appID+"-out"
			cfg := runtime.Config{ApplicationID: appID, CreateMissingTopics: true, DefaultPartitions: 2}
			if tc.codec != runtime.CompressionNone {
				cfg.Compression = tc.codec
			}
			in := c.startApp(t, wordCountTopology(t, out, src), cfg)
			in.waitAllTasksRunning(t, 4, settleTimeout)
			want := make(map[string]int64)
			var recs []*kgo.Record
			// The same few words again and again compress well, so a
			// codec applied shows in every batch.
			for i, l := range newCorpus(10, 50).Lines(2000, want) {
				recs = append(recs, &kgo.Record{Topic: src, Partition: int32(i % 2), Value: []byte(l)})
			}
			c.produce(t, recs...)
			waitFor(t, settleTimeout, "counts in "+out, func() (bool, string) {
				got := c.readLatest(t, out)
				for w, n := range want {
					if got[w] != n {
						return false, fmt.Sprintf("%q: %d of %d", w, got[w], n)
					}
				}
				return true, ""
			})
			for _, topic := range []string{out, repartitionTopic(appID), changelogTopic(appID)} {
				codecs := c.batchCodecs(t, topic)
				// franz-go sends a batch that compression would not
				// shrink (one small record) uncompressed.
				allowed := []uint8{0, tc.want}
				for codec := range codecs {
					require.Contains(t, allowed, codec, "codecs of the batches of %s (batches per codec: %v)", topic, codecs)
				}
				require.Positive(t, codecs[tc.want], "no batch of %s with codec %d (batches per codec: %v)", topic, tc.want, codecs)
			}
			in.close(t)
		})
	}
}

// TestCreateMissingTopicsAfterBrokerWipe wipes the broker under an instance
// with CreateMissingTopics and creates no topic by hand: the instance
// creates its input and output topics again, with the partition counts it
// started with, and counts what arrives after the wipe.
func TestCreateMissingTopicsAfterBrokerWipe(t *testing.T) {
	c, listen := newWipeCluster(t)
	in := c.startApp(t, wordCount(t), runtime.Config{ApplicationID: "wipe-create", CreateMissingTopics: true})
	in.waitAllTasksRunning(t, 2*wipePartitions, settleTimeout)
	gen := newCorpus(12, 300)
	words := slices.Clone(gen.Vocab)
	before := make(map[string]int64)
	c.produceLines(t, gen.Lines(2000, before))
	waitWipeCounts(t, "the counts before the wipe", words, before, in)

	c.b.Close()
	b, err := broker.Start(broker.Config{Listen: listen, DataDir: t.TempDir(), Partitions: 1, CompactionInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	c.b, c.cl, c.adm = b, cl, kadm.NewClient(cl)
	waitFor(t, settleTimeout, "the instance to create its topics on the new broker", func() (bool, string) {
		require.NoError(t, in.Err())
		details, err := c.adm.ListTopics(kadm.WithAuthorizedOps(ctx(t)), inputTopic, outputTopic)
		if err != nil {
			return false, err.Error()
		}
		for _, name := range []string{inputTopic, outputTopic} {
			if d := details[name]; d.Err != nil || len(d.Partitions) != wipePartitions {
				return false, fmt.Sprintf("%s: %d partitions, %v", name, len(d.Partitions), d.Err)
			}
		}
		return in.Stats().Rewires > 0, "no rewire yet"
	})

	after := make(map[string]int64)
	c.produceLines(t, gen.Lines(2000, after))
	waitWipeCounts(t, "the counts of the input produced after the wipe", words, after, in)
	require.Equal(t, runtime.StateRunning, in.State())
}
