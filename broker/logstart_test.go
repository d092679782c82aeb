package broker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// createTopic creates a topic with the given partition count and configs.
func createTopic(ctx context.Context, t *testing.T, b *Broker, topic string, partitions int32, configs map[string]string) {
	t.Helper()
	cfgs := make(map[string]*string)
	for k, v := range configs {
		cfgs[k] = kadm.StringPtr(v)
	}
	resp, err := kadm.NewClient(newClient(t, b)).CreateTopic(ctx, partitions, -1, cfgs, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
}

// kv is a record to produce: a key, a value (nil for a tombstone) and an
// age (how far its timestamp lies in the past).
type kv struct {
	key, value string
	tombstone  bool
	age        time.Duration
}

// produceEach produces each record in its own batch to partition 0 (kfake
// compacts batch by batch and never the last one) and returns their
// offsets.
func produceEach(ctx context.Context, t *testing.T, b *Broker, topic string, recs ...kv) []int64 {
	t.Helper()
	cl := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var offs []int64
	for _, r := range recs {
		rec := &kgo.Record{Topic: topic, Key: []byte(r.key), Value: []byte(r.value), Timestamp: time.Now().Add(-r.age)}
		if r.tombstone {
			rec.Value = nil
		}
		res := cl.ProduceSync(ctx, rec)
		require.NoError(t, res.FirstErr())
		offs = append(offs, res[0].Record.Offset)
	}
	return offs
}

// gappedLog is a compact topic of one partition whose first three records
// compaction removes: kfake then starts the log at 3, Kafka at 0.
var gappedLog = []kv{{key: "a", value: "1"}, {key: "b", value: "1"}, {key: "a", value: "2"}, {key: "a", value: "3"}, {key: "b", value: "2"}, {key: "c", value: "1"}}

func newGappedLog(ctx context.Context, t *testing.T, b *Broker, topic string) {
	t.Helper()
	createTopic(ctx, t, b, topic, 1, map[string]string{"cleanup.policy": "compact"})
	produceEach(ctx, t, b, topic, gappedLog...)
	b.Compact()
	require.EqualValues(t, 3, kfakeStart(t, b, topic, 0), "precondition: kfake moved its own log start")
}

// kfakeStart is the log start kfake itself holds.
func kfakeStart(t *testing.T, b *Broker, topic string, p int32) int64 {
	t.Helper()
	pi := b.Cluster().PartitionInfo(topic, p)
	require.NotNil(t, pi)
	return pi.LogStartOffset
}

// listedStart is the log start a client lists.
func listedStart(ctx context.Context, t *testing.T, b *Broker, topic string, p int32) int64 {
	t.Helper()
	l, err := kadm.NewClient(newClient(t, b)).ListStartOffsets(ctx, topic)
	require.NoError(t, err)
	o, ok := l.Lookup(topic, p)
	require.True(t, ok)
	require.NoError(t, o.Err)
	return o.Offset
}

// fetchAt consumes partition p of topic from offset, never resetting, and
// returns the first record or the fetch error.
func fetchAt(ctx context.Context, t *testing.T, b *Broker, topic string, p int32, offset int64) (*kgo.Record, kgo.FetchPartition, error) {
	t.Helper()
	cl := newClient(t, b,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(offset)}}),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxWait(100*time.Millisecond))
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "fetching %s[%d] at %d", topic, p, offset)
		var (
			rec  *kgo.Record
			part kgo.FetchPartition
			err  error
		)
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if fp.Err != nil && err == nil {
				err, part = fp.Err, fp.FetchPartition
			}
			if len(fp.Records) > 0 && rec == nil {
				rec, part = fp.Records[0], fp.FetchPartition
			}
		})
		if rec != nil || err != nil {
			return rec, part, err
		}
	}
}

func requireRecordAt(ctx context.Context, t *testing.T, b *Broker, topic string, from, want int64) *kgo.Record {
	t.Helper()
	rec, _, err := fetchAt(ctx, t, b, topic, 0, from)
	require.NoError(t, err, "fetch from %d", from)
	require.Equal(t, want, rec.Offset, "first record fetched from %d", from)
	return rec
}

func requireOutOfRange(ctx context.Context, t *testing.T, b *Broker, topic string, from int64) {
	t.Helper()
	_, _, err := fetchAt(ctx, t, b, topic, 0, from)
	require.ErrorIs(t, err, kerr.OffsetOutOfRange, "fetch from %d", from)
}

// After a compaction, clients see the log start Kafka would keep, and a
// fetch from inside the range compaction cleared gets the next record.
func TestCompactionKeepsLogStart(t *testing.T) {
	ctx := testCtx(t)
	b := start(t, Config{})
	newGappedLog(ctx, t, b, "log")

	require.EqualValues(t, 0, listedStart(ctx, t, b, "log", 0))
	for from := range int64(4) {
		rec := requireRecordAt(ctx, t, b, "log", from, 3)
		require.Equal(t, "a=3", string(rec.Key)+"="+string(rec.Value))
	}
	requireRecordAt(ctx, t, b, "log", 4, 4)

	// Later runs compact further; the log start stays.
	produceEach(ctx, t, b, "log", kv{key: "a", value: "4"}, kv{key: "c", value: "2"}, kv{key: "d", value: "1"})
	b.Compact()
	require.EqualValues(t, 4, kfakeStart(t, b, "log", 0), "precondition: kfake moved its start again")
	require.EqualValues(t, 0, listedStart(ctx, t, b, "log", 0))
	requireRecordAt(ctx, t, b, "log", 1, 4)
}

// ListOffsets answers whole requests: partitions that do not exist get
// their error, the leader epoch is checked and answered.
func TestListEarliestOffsetsRequest(t *testing.T) {
	ctx := testCtx(t)
	b := start(t, Config{})
	newGappedLog(ctx, t, b, "log")
	epoch := b.Cluster().PartitionInfo("log", 0).Epoch
	cl := newClient(t, b)

	list := func(currentEpoch int32) *kmsg.ListOffsetsResponse {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		for _, topic := range []string{"log", "missing"} {
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = topic
			for _, p := range []int32{0, 5} {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition = p
				rp.Timestamp = -2
				rp.CurrentLeaderEpoch = currentEpoch
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		// Straight to the broker: the client would split the request by
		// partition leader and answer unknown partitions itself.
		raw, err := cl.SeedBrokers()[0].Request(ctx, req)
		require.NoError(t, err)
		resp := raw.(*kmsg.ListOffsetsResponse)
		require.Len(t, resp.Topics, 2)
		return resp
	}

	resp := list(-1)
	require.Equal(t, "log", resp.Topics[0].Topic)
	p0 := resp.Topics[0].Partitions[0]
	require.Zero(t, p0.ErrorCode)
	require.EqualValues(t, 0, p0.Offset)
	require.EqualValues(t, -1, p0.Timestamp)
	require.Equal(t, epoch, p0.LeaderEpoch)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, resp.Topics[0].Partitions[1].ErrorCode)
	for _, p := range resp.Topics[1].Partitions {
		require.Equal(t, kerr.UnknownTopicOrPartition.Code, p.ErrorCode)
	}

	require.Equal(t, kerr.UnknownLeaderEpoch.Code, list(epoch + 1).Topics[0].Partitions[0].ErrorCode)
	if epoch > 0 {
		require.Equal(t, kerr.FencedLeaderEpoch.Code, list(epoch - 1).Topics[0].Partitions[0].ErrorCode)
	}
	require.Zero(t, list(epoch).Topics[0].Partitions[0].ErrorCode)
}

// DeleteRecords moves the log start, inside the compacted range as past it,
// and a fetch below the new start fails as on Kafka.
func TestDeleteRecordsMovesLogStart(t *testing.T) {
	ctx := testCtx(t)
	b := start(t, Config{})
	newGappedLog(ctx, t, b, "log")
	adm := kadm.NewClient(newClient(t, b))
	deleteTo := func(offset int64) error {
		var os kadm.Offsets
		os.AddOffset("log", 0, offset, -1)
		resp, err := adm.DeleteRecords(ctx, os)
		require.NoError(t, err)
		return resp.Error()
	}

	require.NoError(t, deleteTo(1), "inside the compacted range")
	require.EqualValues(t, 1, listedStart(ctx, t, b, "log", 0))
	requireOutOfRange(ctx, t, b, "log", 0)
	requireRecordAt(ctx, t, b, "log", 1, 3)

	require.NoError(t, deleteTo(0), "below the log start: Kafka accepts it and changes nothing")
	require.EqualValues(t, 1, listedStart(ctx, t, b, "log", 0))

	require.NoError(t, deleteTo(4), "past kfake's start")
	require.EqualValues(t, 4, listedStart(ctx, t, b, "log", 0))
	requireOutOfRange(ctx, t, b, "log", 3)
	requireRecordAt(ctx, t, b, "log", 4, 4)

	require.ErrorIs(t, deleteTo(100), kerr.OffsetOutOfRange, "past the high watermark")

	// A later compaction keeps the deleted start.
	produceEach(ctx, t, b, "log", kv{key: "b", value: "3"}, kv{key: "d", value: "1"})
	b.Compact()
	require.EqualValues(t, 5, kfakeStart(t, b, "log", 0), "precondition")
	require.EqualValues(t, 4, listedStart(ctx, t, b, "log", 0))
	requireOutOfRange(ctx, t, b, "log", 3)
	requireRecordAt(ctx, t, b, "log", 4, 5)
}

// Retention moves the log start of topics whose policy includes delete, and
// only theirs.
func TestRetentionMovesLogStart(t *testing.T) {
	ctx := testCtx(t)
	b := start(t, Config{})
	old := time.Hour

	createTopic(ctx, t, b, "ret", 1, map[string]string{"retention.ms": "60000"})
	produceEach(ctx, t, b, "ret", kv{key: "x", age: old}, kv{key: "y", age: old}, kv{key: "z", age: old}, kv{key: "w"})

	// compact,delete: retention takes the two old records, compaction
	// then the first k.
	createTopic(ctx, t, b, "cret", 1, map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "60000"})
	produceEach(ctx, t, b, "cret", kv{key: "x", age: old}, kv{key: "y", age: old}, kv{key: "k", value: "1"}, kv{key: "k", value: "2"}, kv{key: "m"})

	// compact only: no retention, however old the records.
	createTopic(ctx, t, b, "conly", 1, map[string]string{"cleanup.policy": "compact"})
	produceEach(ctx, t, b, "conly", kv{key: "x", age: 30 * 24 * time.Hour}, kv{key: "y", age: 30 * 24 * time.Hour}, kv{key: "z"})

	b.Compact()

	require.EqualValues(t, 3, kfakeStart(t, b, "ret", 0))
	require.EqualValues(t, 3, listedStart(ctx, t, b, "ret", 0))
	requireOutOfRange(ctx, t, b, "ret", 1)

	require.EqualValues(t, 3, kfakeStart(t, b, "cret", 0), "precondition: compaction cleared offset 2")
	require.EqualValues(t, 2, listedStart(ctx, t, b, "cret", 0))
	requireOutOfRange(ctx, t, b, "cret", 1)
	requireRecordAt(ctx, t, b, "cret", 2, 3)

	require.EqualValues(t, 0, listedStart(ctx, t, b, "conly", 0))
	requireRecordAt(ctx, t, b, "conly", 0, 0)
}

// A broker restarted on its data directory answers the log starts it
// answered before.
func TestLogStartSurvivesRestart(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	b, err := Start(Config{DataDir: dir})
	require.NoError(t, err)
	newGappedLog(ctx, t, b, "log")
	newGappedLog(ctx, t, b, "deleted")
	var os0 kadm.Offsets
	os0.AddOffset("deleted", 0, 1, -1)
	resp, err := kadm.NewClient(newClient(t, b)).DeleteRecords(ctx, os0)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	b.Close()

	raw, err := os.ReadFile(filepath.Join(dir, logStartsFile))
	require.NoError(t, err)
	var ps persistedStarts
	require.NoError(t, json.Unmarshal(raw, &ps))
	require.Equal(t, logStartsVersion, ps.Version)

	b = start(t, Config{DataDir: dir})
	require.EqualValues(t, 3, kfakeStart(t, b, "log", 0), "precondition: kfake kept its compacted log")
	require.EqualValues(t, 0, listedStart(ctx, t, b, "log", 0))
	requireRecordAt(ctx, t, b, "log", 1, 3)
	require.EqualValues(t, 1, listedStart(ctx, t, b, "deleted", 0))
	requireOutOfRange(ctx, t, b, "deleted", 0)
	requireRecordAt(ctx, t, b, "deleted", 2, 3)
	b.Close()

	// A file of a format this broker does not know stops it from starting
	// rather than answering log starts it cannot vouch for.
	require.NoError(t, os.WriteFile(filepath.Join(dir, logStartsFile), []byte(`{"version":99,"partitions":[]}`), 0o644))
	_, err = Start(Config{DataDir: dir})
	require.ErrorContains(t, err, "version 99")
}

// The broker compacts on its own schedule, and its schedule keeps log
// starts too.
func TestCompactionInterval(t *testing.T) {
	ctx := testCtx(t)
	b := start(t, Config{CompactionInterval: 50 * time.Millisecond})
	createTopic(ctx, t, b, "log", 1, map[string]string{"cleanup.policy": "compact"})
	produceEach(ctx, t, b, "log", gappedLog...)
	for kfakeStart(t, b, "log", 0) != 3 {
		require.NoError(t, ctx.Err(), "no compaction ran")
		time.Sleep(20 * time.Millisecond) // polling for the ticker's run
	}
	require.EqualValues(t, 0, listedStart(ctx, t, b, "log", 0))
	requireRecordAt(ctx, t, b, "log", 0, 3)
}
