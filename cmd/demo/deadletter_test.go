package main

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
)

// A line the instance cannot count (its one word, a million bytes, is too
// large for a record of the repartition topic, which carries the word as
// key and value) is skipped to the dead-letter topic: the instance keeps
// counting the lines after it, as every instance taking its task over
// would, instead of stopping.
func TestInstanceSkipsALineItCannotCount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := startBroker(t)
	in, err := startInstance(ctx, instanceOptions{brokers: b.Addrs(), stateDir: t.TempDir(), app: "wordcount",
		logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	defer in.close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic(inputTopic), kgo.ProducerBatchMaxBytes(1_048_000))
	require.NoError(t, err)
	defer cl.Close()
	// The first huge line fits a dead letter whole; the second, which
	// Kafka took, does not once the dead letter's headers are added.
	big, huge := strings.Repeat("y", 600_000), strings.Repeat("z", 1_000_100)
	for _, line := range []string{"alpha beta", big, huge, "alpha gamma"} {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: []byte(line)}).FirstErr())
	}
	count := func(w string) int64 {
		v, found, _, err := activeGet(in.app, countsStore, []byte(w))
		if err != nil || !found {
			return 0
		}
		n, _ := serde.Int64.Decode(v)
		return n
	}
	require.Eventually(t, func() bool { return count("alpha") == 2 && count("gamma") == 1 && count("beta") == 1 },
		60*time.Second, 50*time.Millisecond, "the lines around the huge one are counted (alpha %d beta %d gamma %d, state %v, err %v)", count("alpha"), count("beta"), count("gamma"), in.app.State(), in.app.Err())
	require.True(t, in.app.State().IsRunningOrRebalancing(), "the instance keeps running: %v", in.app.Err())
	require.EqualValues(t, 2, in.app.Stats().ProcessingErrors)

	rd, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics(deadLetterTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxPartitionBytes(4<<20))
	require.NoError(t, err)
	defer rd.Close()
	var dead []*kgo.Record
	for len(dead) < 2 {
		fs := rd.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of 2 dead letters", len(dead))
		dead = append(dead, fs.Records()...)
	}
	slices.SortFunc(dead, func(a, b *kgo.Record) int { return len(b.Value) - len(a.Value) })
	headers := func(r *kgo.Record) map[string]string {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		return h
	}
	require.Equal(t, big, string(dead[0].Value), "a dead letter that fits carries the line")
	require.NotContains(t, headers(dead[0]), runtime.DeadLetterHeaderOmitted)
	require.Empty(t, dead[1].Value, "one that would not fit names the line without carrying it")
	h := headers(dead[1])
	require.Equal(t, "value", h[runtime.DeadLetterHeaderOmitted])
	require.Equal(t, inputTopic, h[runtime.DeadLetterHeaderTopic])
	require.Contains(t, h[runtime.DeadLetterHeaderError], "too large to produce")
}
