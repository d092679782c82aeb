package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The decoders below read OffsetsTopic records as Kafka's schemas define
// them (OffsetCommitKey v0-1, OffsetCommitValue v0-3, GroupMetadataKey v2,
// GroupMetadataValue v0-3), as a lag monitor does; they share no code with
// the encoders they check.

type decodedCommit struct {
	group, topic string
	partition    int32
	offset       int64
	leaderEpoch  int32
	metadata     string
	commitMillis int64
	tombstone    bool
}

// decodeOffsetsRecord decodes a record of OffsetsTopic: a commit, or the
// group of a group metadata record (commit nil).
func decodeOffsetsRecord(t *testing.T, key, value []byte) (commit *decodedCommit, metadataGroup string, meta *groupMetadata) {
	t.Helper()
	k := kbin.Reader{Src: key}
	switch v := k.Int16(); v {
	case 0, 1:
		c := &decodedCommit{group: k.String(), topic: k.String(), partition: k.Int32()}
		require.NoError(t, k.Complete())
		if value == nil {
			c.tombstone = true
			return c, "", nil
		}
		r := kbin.Reader{Src: value}
		version := r.Int16()
		c.offset, c.leaderEpoch = r.Int64(), -1
		if version >= 3 {
			c.leaderEpoch = r.Int32()
		}
		c.metadata = r.String()
		c.commitMillis = r.Int64()
		if version == 1 {
			r.Int64() // expire timestamp
		}
		require.NoError(t, r.Complete())
		return c, "", nil
	case 2:
		group := k.String()
		require.NoError(t, k.Complete())
		if value == nil {
			return nil, group, nil
		}
		r := kbin.Reader{Src: value}
		version := r.Int16()
		g := &groupMetadata{protocolType: r.String(), generation: r.Int32(), protocol: r.NullableString(), leader: r.NullableString(), stateTimestamp: -1}
		if version >= 2 {
			g.stateTimestamp = r.Int64()
		}
		for n := r.ArrayLen(); n > 0; n-- {
			m := memberMetadata{memberID: r.String()}
			if version >= 3 {
				m.instanceID = r.NullableString()
			}
			m.clientID, m.clientHost = r.String(), r.String()
			if version >= 1 {
				m.rebalanceTimeout = r.Int32()
			}
			m.sessionTimeout = r.Int32()
			m.subscription, m.assignment = r.Bytes(), r.Bytes()
			g.members = append(g.members, m)
		}
		require.NoError(t, r.Complete())
		return nil, group, g
	default:
		t.Fatalf("unknown key version %d", v)
	}
	return nil, "", nil
}

func TestOffsetsRecordsRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	c, _, _ := decodeOffsetsRecord(t, offsetCommitKey("g", "t", 7),
		offsetCommitValue(kfake.GroupCommit{Offset: 42, LeaderEpoch: 3, Metadata: "m", At: at}))
	require.Equal(t, &decodedCommit{group: "g", topic: "t", partition: 7, offset: 42, leaderEpoch: 3, metadata: "m", commitMillis: at.UnixMilli()}, c)

	c, _, _ = decodeOffsetsRecord(t, offsetCommitKey("g", "t", 7), nil)
	require.True(t, c.tombstone)

	want := groupMetadata{protocolType: "consumer", generation: 5, protocol: kmsg.StringPtr("cooperative-sticky"), stateTimestamp: -1,
		members: []memberMetadata{
			{memberID: "m1", instanceID: kmsg.StringPtr("i1"), clientID: "c1", clientHost: "/127.0.0.1", subscription: []byte{1, 2}, assignment: []byte{3}},
			{memberID: "m2", clientID: "c2", clientHost: "/127.0.0.1", rebalanceTimeout: 1, sessionTimeout: 2, subscription: []byte{}, assignment: []byte{}},
		}}
	_, group, got := decodeOffsetsRecord(t, groupMetadataKey("g"), groupMetadataValue(want))
	require.Equal(t, "g", group)
	require.Equal(t, &want, got)
}

func TestOffsetsPartitionIsKafkas(t *testing.T) {
	// Utils.abs(group.hashCode()) % 50, as computed by Java.
	for group, want := range map[string]int32{
		"hello":              22, // hashCode 99162322
		"console-consumer-1": 24,
		"wordcount":          41,
		"wordcount-ß-😀":      17, // hashCode -1087293031, over UTF-16 code units
		"":                   0,
	} {
		require.Equal(t, want, offsetsPartition(group), group)
	}
}

// readOffsetsTopic reads OffsetsTopic from the start to its end and returns
// each group's latest committed offsets (tombstones remove them) and the
// groups whose latest metadata record is a tombstone.
func readOffsetsTopic(ctx context.Context, t *testing.T, b *Broker) (map[string]map[string]map[int32]decodedCommit, map[string]*groupMetadata) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, b))
	ends, err := adm.ListEndOffsets(ctx, OffsetsTopic)
	require.NoError(t, err)
	commits := make(map[string]map[string]map[int32]decodedCommit)
	metas := make(map[string]*groupMetadata)
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	if want == 0 {
		return commits, metas
	}
	cl := newClient(t, b, kgo.ConsumeTopics(OffsetsTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := make(map[int32]int64)
	done := func() bool {
		var n int64
		ends.Each(func(o kadm.ListedOffset) {
			if seen[o.Partition] >= o.Offset {
				n += o.Offset
			}
		})
		return n == want
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		require.NoError(t, fs.Err0())
		fs.EachRecord(func(r *kgo.Record) {
			seen[r.Partition] = r.Offset + 1
			c, group, meta := decodeOffsetsRecord(t, r.Key, r.Value)
			if c == nil {
				metas[group] = meta
				return
			}
			if c.tombstone {
				delete(commits[c.group][c.topic], c.partition)
				return
			}
			if commits[c.group] == nil {
				commits[c.group] = make(map[string]map[int32]decodedCommit)
			}
			if commits[c.group][c.topic] == nil {
				commits[c.group][c.topic] = make(map[int32]decodedCommit)
			}
			commits[c.group][c.topic][c.partition] = *c
		})
	}
	return commits, metas
}

// waitOffsetsTopic waits until OffsetsTopic says of group what OffsetFetch
// says, and returns what it says.
func waitOffsetsTopic(ctx context.Context, t *testing.T, b *Broker, group string) (map[string]map[int32]decodedCommit, *groupMetadata) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, b))
	for {
		fetched, err := adm.FetchOffsets(ctx, group)
		if !errors.Is(err, kerr.GroupIDNotFound) { // a deleted group has no offsets
			require.NoError(t, err)
		}
		want := make(map[string]map[int32]int64)
		fetched.Each(func(o kadm.OffsetResponse) {
			if want[o.Topic] == nil {
				want[o.Topic] = make(map[int32]int64)
			}
			want[o.Topic][o.Partition] = o.At
		})
		commits, metas := readOffsetsTopic(ctx, t, b)
		got := make(map[string]map[int32]int64)
		for topic, parts := range commits[group] {
			for p, c := range parts {
				if got[topic] == nil {
					got[topic] = make(map[int32]int64)
				}
				got[topic][p] = c.offset
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return commits[group], metas[group]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s says %v of group %q, OffsetFetch %v", OffsetsTopic, got, group, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Lag monitors read committed offsets from __consumer_offsets: the broker
// keeps it as Kafka does, with what OffsetFetch answers, and no client may
// write it.
func TestOffsetsTopicHoldsCommittedOffsets(t *testing.T) {
	ctx := testCtx(t)
	b := start(t, Config{})
	adm := kadm.NewClient(newClient(t, b))
	createTopic(ctx, t, b, "in", 3, nil)

	// A consumer group commits as consumers do.
	producer := newClient(t, b)
	for i := range 30 {
		require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Topic: "in", Value: fmt.Append(nil, i)}).FirstErr())
	}
	consumer := newClient(t, b, kgo.ConsumerGroup("lagged"), kgo.ConsumeTopics("in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	var read int
	for read < 30 {
		fs := consumer.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		read += fs.NumRecords()
	}
	require.NoError(t, consumer.CommitUncommittedOffsets(ctx))
	commits, meta := waitOffsetsTopic(ctx, t, b, "lagged")
	var total int64
	for _, c := range commits["in"] {
		total += c.offset
		require.InDelta(t, time.Now().UnixMilli(), c.commitMillis, float64(time.Minute.Milliseconds()))
	}
	require.Equal(t, int64(30), total)
	require.NotNil(t, meta, "the group's metadata record")
	require.Equal(t, "consumer", meta.protocolType)
	require.Len(t, meta.members, 1)

	// A commit of fewer records shows as such; then an admin's.
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "in", Partition: 0, At: 1, LeaderEpoch: -1})
	require.NoError(t, adm.CommitAllOffsets(ctx, "admin-set", offs))
	commits, _ = waitOffsetsTopic(ctx, t, b, "admin-set")
	require.Equal(t, int64(1), commits["in"][0].offset)

	// Deleting a group leaves tombstones.
	_, err := adm.DeleteGroup(ctx, "admin-set")
	require.NoError(t, err)
	commits, _ = waitOffsetsTopic(ctx, t, b, "admin-set")
	require.Empty(t, commits["in"])

	// Internal, compacted, and read-only.
	details, err := adm.ListTopicsWithInternal(ctx, OffsetsTopic)
	require.NoError(t, err)
	require.True(t, details[OffsetsTopic].IsInternal)
	require.Len(t, details[OffsetsTopic].Partitions, 50)
	configs, err := adm.DescribeTopicConfigs(ctx, OffsetsTopic)
	require.NoError(t, err)
	policy, err := configs.On(OffsetsTopic, nil)
	require.NoError(t, err)
	var compact bool
	for _, c := range policy.Configs {
		compact = compact || (c.Key == "cleanup.policy" && c.MaybeValue() == "compact")
	}
	require.True(t, compact, "cleanup.policy=compact")
	err = newClient(t, b, kgo.DisableIdempotentWrite(), kgo.RecordRetries(1)).
		ProduceSync(ctx, &kgo.Record{Topic: OffsetsTopic, Key: offsetCommitKey("lagged", "in", 0), Value: []byte("x")}).FirstErr()
	require.ErrorIs(t, err, kerr.InvalidTopicException)
}

// Offsets committed in a transaction show once it commits.
func TestOffsetsTopicHoldsTransactionalCommits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := start(t, Config{})
	createTopic(ctx, t, b, "in", 2, nil)
	createTopic(ctx, t, b, "out", 2, nil)
	producer := newClient(t, b)
	for i := range 10 {
		require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Topic: "in", Value: fmt.Append(nil, i)}).FirstErr())
	}
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(b.Addrs()...), kgo.TransactionalID("tx"),
		kgo.ConsumerGroup("eos"), kgo.ConsumeTopics("in"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DefaultProduceTopic("out"))
	require.NoError(t, err)
	defer sess.Close()
	var read int
	for read < 10 {
		fs := sess.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		require.NoError(t, sess.Begin())
		fs.EachRecord(func(r *kgo.Record) {
			read++
			sess.Produce(ctx, &kgo.Record{Value: r.Value}, nil)
		})
		committed, err := sess.End(ctx, kgo.TryCommit)
		require.NoError(t, err)
		require.True(t, committed)
	}
	commits, _ := waitOffsetsTopic(ctx, t, b, "eos")
	var total int64
	for _, c := range commits["in"] {
		total += c.offset
	}
	require.Equal(t, int64(10), total)
}
