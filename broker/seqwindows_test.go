package broker

import (
	"encoding/binary"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// segmentBatches returns the record batches of a partition's segments in a
// data directory, as written: what their producer sent.
func segmentBatches(t *testing.T, dataDir, topic string, partition int) [][]byte {
	t.Helper()
	dir := filepath.Join(dataDir, "partitions", url.PathEscape(topic)+"-"+strconv.Itoa(partition))
	files, err := filepath.Glob(filepath.Join(dir, "*.dat"))
	require.NoError(t, err)
	slices.Sort(files)
	var out [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for len(b) >= batchHeaderBytes {
			size := 12 + int(int32(binary.BigEndian.Uint32(b[batchLengthAt:])))
			out = append(out, b[:size])
			b = b[size:]
		}
	}
	return out
}

// resend sends batch again to partition 0 of topic, as its producer retries
// a produce whose answer it never got.
func resend(t *testing.T, b *Broker, topic string, batch []byte) *kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	// As the producer sent it: the broker sets the base offset.
	sent := slices.Clone(batch)
	binary.BigEndian.PutUint64(sent, 0)
	rp.Partition, rp.Records = 0, sent
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	// Produce before version 13 names its topics.
	resp, err := req.RequestWith(testCtx(t), newClient(t, b, kgo.MaxVersions(kversion.V3_9_0())))
	require.NoError(t, err)
	require.Len(t, resp.Topics, 1)
	require.Len(t, resp.Topics[0].Partitions, 1)
	return &resp.Topics[0].Partitions[0]
}

// TestRetryAfterCrashIsNotWrittenAgain: a batch the broker wrote just before
// it was killed, retried by its idempotent producer after the restart, is
// answered as written, with its offset, and not appended a second time
// after the batches that followed it. Kafka rebuilds its producers'
// sequence numbers from the log; kfake keeps them only across a Close.
//
// With closedFirst, the broker was closed and restarted once before the
// producer's last batches, so kfake's saved windows are older than the
// log.
func TestRetryAfterCrashIsNotWrittenAgain(t *testing.T) {
	for _, closedFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("closed_first=%v", closedFirst), func(t *testing.T) {
			testRetryAfterCrash(t, closedFirst)
		})
	}
}

func testRetryAfterCrash(t *testing.T, closedFirst bool) {
	ctx := testCtx(t)
	dir := t.TempDir()
	// One address throughout, so that one producer outlives the restart.
	cfg := Config{DataDir: dir, Partitions: 1, Listen: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	b1 := start(t, cfg)
	createTopic(ctx, t, b1, "counts", 1, nil)
	cl := newClient(t, b1, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(v string) {
		t.Helper()
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "counts", Partition: 0, Key: []byte("dz"), Value: []byte(v)}).FirstErr())
	}
	produce("300")
	if closedFirst {
		b1.Close()
		start(t, cfg)
		produce("300")
	}
	for _, v := range []string{"301", "302", "303"} {
		produce(v)
	}
	crashed := crashImage(t, dir)
	batches := segmentBatches(t, crashed, "counts", 0)
	first := len(batches) - 3

	b2 := start(t, Config{DataDir: crashed, Partitions: 1})
	for i, batch := range batches[first+1:] {
		p := resend(t, b2, "counts", batch)
		require.NoError(t, kerr.ErrorForCode(p.ErrorCode))
		require.EqualValues(t, first+i+1, p.BaseOffset, "a retried batch is answered with the offset it was written at")
	}
	ends, err := kadm.NewClient(newClient(t, b2)).ListEndOffsets(ctx, "counts")
	require.NoError(t, err)
	end, _ := ends.Lookup("counts", 0)
	require.EqualValues(t, len(batches), end.Offset, "the retried batches were written again")
}
