package changelog

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/statestore"
)

func TestSendTracksOffsets(t *testing.T) {
	const topic = "app-s-changelog"
	c := newCluster(t, 3, topic)
	prod := newProducer(t, c)
	ctx := context.Background()

	var track Offsets
	Send(ctx, prod, topic, 1, []statestore.Entry{kv("a", "1"), kv("b", "2"), del("a"), kv("e", "")}, &track)
	Send(ctx, prod, topic, 2, []statestore.Entry{kv("c", "3")}, &track)
	Send(ctx, prod, topic, 0, nil, &track)
	require.NoError(t, prod.Flush(ctx))
	require.NoError(t, track.Err())
	require.Zero(t, track.Pending())

	last, ok := track.Last(topic, 1)
	require.True(t, ok)
	require.Equal(t, int64(3), last)
	last, ok = track.Last(topic, 2)
	require.True(t, ok)
	require.Equal(t, int64(0), last)
	_, ok = track.Last(topic, 0)
	require.False(t, ok, "nothing was sent to partition 0")

	// The records landed on the named partition, in order, with the
	// tombstone as a null value and the empty value as a non-null one.
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {1: kgo.NewOffset().AtStart()}}))
	require.NoError(t, err)
	defer cons.Close()
	var got []*kgo.Record
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for len(got) < 4 {
		fs := cons.PollFetches(pctx)
		require.NoError(t, fs.Err())
		got = append(got, fs.Records()...)
	}
	require.Equal(t, "a", string(got[0].Key))
	require.Equal(t, "1", string(got[0].Value))
	require.Nil(t, got[2].Value, "delete must be a tombstone")
	require.NotNil(t, got[3].Value, "empty value must not become a tombstone")
	require.Empty(t, got[3].Value)

	track.Reset()
	_, ok = track.Last(topic, 1)
	require.False(t, ok)
	require.NoError(t, track.Err())
}

func TestSendRecordsFirstError(t *testing.T) {
	const topic = "app-s-changelog"
	c := newCluster(t, 1, topic)
	prod := newProducer(t, c, kgo.UnknownTopicRetries(0))
	ctx := context.Background()

	var track Offsets
	Send(ctx, prod, topic, 0, []statestore.Entry{kv("ok", "1")}, &track)
	Send(ctx, prod, topic, 7, []statestore.Entry{kv("bad", "1")}, &track) // no such partition
	require.NoError(t, prod.Flush(ctx))
	require.Error(t, track.Err())
	require.Contains(t, track.Err().Error(), topic+"[7]")
	_, ok := track.Last(topic, 0)
	require.True(t, ok)
	require.Zero(t, track.Pending())
}
