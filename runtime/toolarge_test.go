package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// growTopology copies "in" to "out", turning the value "big" into one of
// size bytes: an input record any broker takes whose output is too large.
func growTopology(t *testing.T, size int) *topology.Topology {
	b := topology.NewBuilder()
	in := topology.Stream(b, "in", serde.String, serde.String)
	topology.MapValues(in, func(_, v string) string {
		if v == "big" {
			return strings.Repeat("x", size)
		}
		return v
	}).To("out", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// readValues reads every committed value of topic, waiting up to 20 s for
// want of them.
func readValues(t *testing.T, addrs []string, topic string, want int) []string {
	t.Helper()
	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer rd.Close()
	var got []string
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		cancel()
	}
	return got
}

// An output record larger than the producer can send fails the input
// record that made it, as any processing error does: by default the
// instance stops with a ProcessingError naming the record (under
// exactly-once it used to abort and retry the transaction for ever,
// silently); with ProcessingLogAndContinue the record is skipped and the
// records after it go through.
func TestOutputRecordTooLargeIsAProcessingError(t *testing.T) {
	t.Parallel()
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		t.Run(g.String()+"/fail", func(t *testing.T) {
			b, _ := startBroker(t, "in", "out")
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
			require.NoError(t, err)
			defer cl.Close()
			app, err := New(growTopology(t, 1_100_000), Config{ApplicationID: "grow", Brokers: b.Addrs(),
				StateDir: t.TempDir(), ProcessingGuarantee: g, SessionTimeout: 2 * time.Second})
			require.NoError(t, err)
			require.NoError(t, app.Start(context.Background()))
			defer app.Close(context.Background())
			offs := produceValues(t, cl, "k", "a", "big", "b")
			select {
			case <-app.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("the instance did not stop on the record whose output is too large")
			}
			var pe *ProcessingError
			require.ErrorAs(t, app.Err(), &pe)
			require.Equal(t, offs[1], pe.Offset)
			var tl *RecordTooLargeError
			require.ErrorAs(t, app.Err(), &tl)
			require.Equal(t, "out", tl.Topic)
			require.Greater(t, tl.Bytes, tl.Max)
		})
		t.Run(g.String()+"/skip", func(t *testing.T) {
			b, _ := startBroker(t, "in", "out")
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
			require.NoError(t, err)
			defer cl.Close()
			app, err := New(growTopology(t, 1_100_000), Config{ApplicationID: "grow", Brokers: b.Addrs(),
				StateDir: t.TempDir(), ProcessingGuarantee: g, SessionTimeout: 2 * time.Second,
				ProcessingErrors: ProcessingLogAndContinue})
			require.NoError(t, err)
			require.NoError(t, app.Start(context.Background()))
			defer app.Close(context.Background())
			produceValues(t, cl, "k", "a", "big", "b")
			require.Equal(t, []string{"a", "b"}, readValues(t, b.Addrs(), "out", 2))
			require.EqualValues(t, 1, app.Stats().ProcessingErrors)
			require.True(t, app.State().IsRunningOrRebalancing())
		})
	}
}

// A record the producer sends but the broker refuses for good (here: over
// the output topic's own max.message.bytes) fails the thread under
// exactly-once too, instead of aborting and producing it again for ever.
func TestBrokerRefusedRecordFailsExactlyOnceThread(t *testing.T) {
	b, adm := startBroker(t, "in")
	resp, err := adm.CreateTopics(context.Background(), 1, -1, map[string]*string{"max.message.bytes": kadm.StringPtr("20000")}, "out")
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	defer cl.Close()
	app, err := New(growTopology(t, 50_000), Config{ApplicationID: "grow", Brokers: b.Addrs(),
		StateDir: t.TempDir(), ProcessingGuarantee: ExactlyOnce, SessionTimeout: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())
	produceValues(t, cl, "k", "a", "big")
	select {
	case <-app.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the instance kept retrying a record the broker refuses")
	}
	require.True(t, errors.Is(app.Err(), kerr.MessageTooLarge), "got %v", app.Err())
}

// batchBytes never says a record fits that the producer refuses, and
// refuses none that is more than the framing slack below the limit.
func TestBatchBytesMatchesTheProducer(t *testing.T) {
	b, _ := startBroker(t, "out")
	const limit = 4000
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ProducerBatchMaxBytes(limit), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	require.EqualValues(t, limit, cl.OptValue(kgo.ProducerBatchMaxBytes), "Send reads the limit this way")
	for _, c := range []struct {
		key     int
		headers []graph.Header
	}{{10, nil}, {0, nil}, {200, []graph.Header{{Key: "h", Value: []byte("v")}, {Key: "eddy.x", Value: make([]byte, 300)}}}} {
		for size := limit - 200; size < limit; size++ {
			rec := graph.OutputRecord{Topic: "out", Key: make([]byte, c.key), Value: make([]byte, size-c.key), Headers: c.headers}
			kr := &kgo.Record{Topic: "out", Key: rec.Key, Value: rec.Value}
			for _, h := range c.headers {
				kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
			}
			_, err := cl.ProduceSync(context.Background(), kr).First()
			fits := batchBytes(rec) <= limit
			if fits {
				require.NoError(t, err, "Send would pass a record of %d bytes (key %d) that the producer refuses", size, c.key)
			}
			if err != nil {
				require.ErrorIs(t, err, kerr.MessageTooLarge)
				continue
			}
			if !fits {
				require.LessOrEqual(t, batchBytes(rec)-limit, flexibleSlack, "Send refuses a record of %d bytes well within the limit", size)
			}
		}
	}
}

// A dead letter too large to produce leaves out the value, then the key,
// and says so; its coordinates still name the record.
func TestShrinkDeadLetter(t *testing.T) {
	in := graph.InputRecord{Topic: "in", Partition: 2, Offset: 7, Key: make([]byte, 3000), Value: make([]byte, 3000)}
	dl := deadLetter("dlq", task.ID{Partition: 2}, in, "node", errors.New("boom"))
	omitted := func(r graph.OutputRecord) string {
		for _, h := range r.Headers {
			if h.Key == DeadLetterHeaderOmitted {
				return string(h.Value)
			}
		}
		return ""
	}
	small, ok := shrinkDeadLetter(dl, 4000)
	require.True(t, ok)
	require.Nil(t, small.Value)
	require.Len(t, small.Key, 3000)
	require.Equal(t, "value", omitted(small))
	require.LessOrEqual(t, batchBytes(small), 4000)

	smaller, ok := shrinkDeadLetter(dl, 1000)
	require.True(t, ok)
	require.Nil(t, smaller.Key)
	require.Equal(t, "key,value", omitted(smaller))
	require.Equal(t, "", omitted(dl), "the original is left as it was")
	require.Len(t, dl.Value, 3000)

	_, ok = shrinkDeadLetter(dl, 100)
	require.False(t, ok, "the headers alone do not fit")
}
