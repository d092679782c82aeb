package runtime

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// idleT0 is when the idle tests' records are stamped from.
var idleT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// idleMerge builds a merge of topics "a" and "b" into "out", whose values
// name their source and index ("a3", "b17").
func idleMerge(t *testing.T) *topology.Topology {
	t.Helper()
	tb := topology.NewBuilder()
	a := topology.Stream(tb, "a", serde.String, serde.String)
	b := topology.Stream(tb, "b", serde.String, serde.String)
	a.Merge(b).To("out", serde.String, serde.String)
	topo, err := tb.Build()
	require.NoError(t, err)
	return topo
}

// produceEach produces the records one request each, so that each is a
// batch of its own: a fetch capped to one byte per partition then returns
// one of them per partition.
func produceEach(t *testing.T, cl *kgo.Client, topic string, stamps ...time.Duration) {
	t.Helper()
	for i, s := range stamps {
		r := &kgo.Record{Topic: topic, Key: []byte("k"), Value: fmt.Appendf(nil, "%s%d", topic, i), Timestamp: idleT0.Add(s)}
		require.NoError(t, cl.ProduceSync(context.Background(), r).FirstErr())
	}
}

// readOut reads "out" until it holds n records and returns their values in
// order.
func readOut(t *testing.T, cl *kgo.Client, n int, within time.Duration) []string {
	t.Helper()
	var got []string
	waitFor(t, within, fmt.Sprintf("%d output records", n), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		return len(got) >= n
	})
	return got
}

// idleSetup starts a one-partition broker with topics a, b and out, and a
// client that produces to them and reads out.
func idleSetup(t *testing.T, guarantee ProcessingGuarantee) ([]string, *kgo.Client) {
	t.Helper()
	b, adm := startBroker(t)
	_, err := adm.CreateTopics(context.Background(), 1, -1, nil, "a", "b", "out")
	require.NoError(t, err)
	opts := []kgo.Opt{kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("out"), kgo.FetchMaxWait(100 * time.Millisecond)}
	if guarantee == ExactlyOnce {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return b.Addrs(), cl
}

// startIdleApp starts the merge with the given idle time, its fetches capped
// to one batch per partition so that a partition's records arrive over many
// polls.
func startIdleApp(t *testing.T, brokers []string, guarantee ProcessingGuarantee, idle time.Duration, buffered int) *App {
	t.Helper()
	app, err := New(idleMerge(t), Config{
		ApplicationID: "idle", Brokers: brokers, StateDir: t.TempDir(),
		ProcessingGuarantee: guarantee, CommitInterval: 50 * time.Millisecond,
		TaskIdleTime: idle, BufferedRecordsPerPartition: buffered,
		ClientOptions: []kgo.Opt{kgo.FetchMaxPartitionBytes(1)},
	})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { app.Close(context.Background()) })
	return app
}

// TestIdleTakesLaggingPartitionsEarlierRecordsFirst: b's records are on the
// broker from the start but arrive one poll at a time, a's one record in
// the first poll. As in Kafka Streams with max.task.idle.ms 0, the task
// waits for b while b's lag is positive, so b's records stamped before a's
// go first.
func TestIdleTakesLaggingPartitionsEarlierRecordsFirst(t *testing.T) {
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			brokers, cl := idleSetup(t, g)
			var stamps []time.Duration
			for i := range 30 {
				stamps = append(stamps, time.Duration(10*i)*time.Millisecond)
			}
			produceEach(t, cl, "b", stamps...)
			produceEach(t, cl, "a", 195*time.Millisecond)
			startIdleApp(t, brokers, g, 0, 0)
			require.Equal(t, laggingMergeOrder(), readOut(t, cl, 31, 60*time.Second))
		})
	}
}

// laggingMergeOrder is Kafka Streams' order of the merge of a's one record,
// stamped 195ms, with b's thirty, stamped every 10ms from 0.
func laggingMergeOrder() []string {
	var want []string
	for i := range 20 {
		want = append(want, "b"+strconv.Itoa(i))
	}
	want = append(want, "a0")
	for i := 20; i < 30; i++ {
		want = append(want, "b"+strconv.Itoa(i))
	}
	return want
}

// TestIdleNeverWaitForInputTakesEachPollAsItComes: with NeverWaitForInput
// the same input goes in the order polls bring it, which is not Kafka
// Streams' (a fetch capped in bytes brings one partition's records at a
// time, so a's record comes before or after all of b's).
func TestIdleNeverWaitForInputTakesEachPollAsItComes(t *testing.T) {
	brokers, cl := idleSetup(t, AtLeastOnce)
	var stamps []time.Duration
	for i := range 30 {
		stamps = append(stamps, time.Duration(10*i)*time.Millisecond)
	}
	produceEach(t, cl, "b", stamps...)
	produceEach(t, cl, "a", 195*time.Millisecond)
	startIdleApp(t, brokers, AtLeastOnce, NeverWaitForInput, 0)
	got := readOut(t, cl, 31, 60*time.Second)
	require.NotEqual(t, laggingMergeOrder(), got)
	require.ElementsMatch(t, laggingMergeOrder(), got)
}

// TestIdleTimeWaitsThenEnforces: with a TaskIdleTime, a task whose other
// partition is at its end still waits that long, so a record produced to it
// meanwhile, stamped earlier, goes first; once the time has passed with
// nothing more produced to it, the task processes what it holds, counting
// it as enforced processing.
func TestIdleTimeWaitsThenEnforces(t *testing.T) {
	brokers, cl := idleSetup(t, AtLeastOnce)
	produceEach(t, cl, "a", 100*time.Millisecond)
	app := startIdleApp(t, brokers, AtLeastOnce, 6*time.Second, 0)
	waitFor(t, 30*time.Second, "the app running", func() bool { return app.State() == StateRunning })
	produceEach(t, cl, "b", 50*time.Millisecond)
	require.Equal(t, []string{"b0", "a0"}, readOut(t, cl, 2, 30*time.Second))
	// b0 went first with a0 held; a0 then waited for b once more.
	require.EqualValues(t, 1, app.Stats().EnforcedProcessing)

	r := &kgo.Record{Topic: "a", Key: []byte("k"), Value: []byte("a1"), Timestamp: idleT0.Add(time.Second)}
	require.NoError(t, cl.ProduceSync(context.Background(), r).FirstErr())
	require.Equal(t, []string{"a1"}, readOut(t, cl, 1, 30*time.Second))
	require.EqualValues(t, 2, app.Stats().EnforcedProcessing)
}

// TestIdlePausedFullPartitionResumesLosingNothing: a's records arrive in
// batches of ten while the task holds at most five of a partition's records
// before it pauses its fetches, and waits for b's, which arrive one at a
// time and interleave with a's in time. Every record comes out once, in
// timestamp order, a's offsets continuous through the pauses (and, under
// exactly-once, through the rewinds of each commit to the first record held).
func TestIdlePausedFullPartitionResumesLosingNothing(t *testing.T) {
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) { testIdlePausedFullPartition(t, g) })
	}
}

func testIdlePausedFullPartition(t *testing.T, g ProcessingGuarantee) {
	brokers, cl := idleSetup(t, g)
	const batches, per = 8, 10
	for i := range batches {
		var recs []*kgo.Record
		for j := range per {
			n := i*per + j
			recs = append(recs, &kgo.Record{Topic: "a", Key: []byte("k"), Value: fmt.Appendf(nil, "a%d", n), Timestamp: idleT0.Add(time.Duration(2*n+1) * time.Millisecond)})
		}
		require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
	}
	var stamps []time.Duration
	for n := range batches * per / 4 {
		stamps = append(stamps, time.Duration(8*n)*time.Millisecond)
	}
	produceEach(t, cl, "b", stamps...)
	app := startIdleApp(t, brokers, g, 0, 5)
	got := readOut(t, cl, batches*per+len(stamps), 60*time.Second)
	var pauses int64
	for _, th := range app.threads {
		pauses += th.fullPauses.Load()
	}
	require.Positive(t, pauses, "partitions paused for being full")

	var want, as []string
	for ms := 0; ms < 2*batches*per; ms++ {
		if ms%2 == 1 {
			want = append(want, fmt.Sprintf("a%d", ms/2))
		} else if ms%8 == 0 {
			want = append(want, fmt.Sprintf("b%d", ms/8))
		}
	}
	for _, v := range got {
		if strings.HasPrefix(v, "a") {
			as = append(as, v)
		}
	}
	require.Len(t, as, batches*per)
	for i, v := range as {
		require.Equal(t, fmt.Sprintf("a%d", i), v)
	}
	require.Equal(t, want, got)
}

// TestIdleHeldRecordsAreNotCommitted: records a task holds while it waits
// for another partition are not consumed: the group's committed offset of
// their partition stays below them, under exactly-once too, where the
// transaction commits the consumer's position.
func TestIdleHeldRecordsAreNotCommitted(t *testing.T) {
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			brokers, cl := idleSetup(t, g)
			adm := kadm.NewClient(cl)
			produceEach(t, cl, "a", 100*time.Millisecond, 200*time.Millisecond)
			produceEach(t, cl, "b", 50*time.Millisecond)
			startIdleApp(t, brokers, g, time.Minute, 0)
			require.Equal(t, []string{"b0"}, readOut(t, cl, 1, 30*time.Second))
			committed := func(topic string) int64 {
				offs, err := adm.FetchOffsets(context.Background(), "idle")
				require.NoError(t, err)
				o, ok := offs.Lookup(topic, 0)
				if !ok {
					return -1
				}
				return o.At
			}
			waitFor(t, 30*time.Second, "b's offset committed", func() bool { return committed("b") == 1 })
			require.LessOrEqual(t, committed("a"), int64(0))
		})
	}
}
