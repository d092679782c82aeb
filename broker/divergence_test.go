package broker

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// docDivergences returns the bullets of the package doc's list of
// divergences that remain, each joined into one line.
func docDivergences(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("broker.go")
	require.NoError(t, err)
	var (
		bullets []string
		in      bool
	)
	for _, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(line, "package ") {
			break
		}
		text, ok := strings.CutPrefix(line, "//")
		if !ok {
			continue
		}
		if strings.Contains(text, "Divergences that remain") {
			in = true
			continue
		}
		if !in {
			continue
		}
		switch {
		case strings.HasPrefix(text, "   - "):
			bullets = append(bullets, strings.TrimPrefix(text, "   - "))
		case strings.HasPrefix(text, "     ") && len(bullets) > 0:
			bullets[len(bullets)-1] += " " + strings.TrimSpace(text)
		case strings.TrimSpace(text) == "":
		default:
			in = false
		}
	}
	require.NotEmpty(t, bullets, "the package doc lists its divergences")
	return bullets
}

// TestDocumentedDivergences checks every divergence from Kafka the package
// doc lists against what the broker does. Each row is named by the start of
// its bullet; a bullet without a row, or a row without a bullet, fails.
func TestDocumentedDivergences(t *testing.T) {
	rows := []struct {
		bullet string
		check  func(t *testing.T)
	}{
		{"One node and no replication.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			createTopic(ctx, t, b, "t", 2, nil)
			req := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr("t")
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, newClient(t, b))
			require.NoError(t, err)
			require.Len(t, resp.Brokers, 1)
			require.Len(t, resp.Topics, 1)
			for _, p := range resp.Topics[0].Partitions {
				require.Len(t, p.Replicas, 1)
			}
		}},
		{"Topics are created on metadata requests that allow it.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			req := kmsg.NewPtrMetadataRequest()
			req.AllowAutoTopicCreation = true
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr("made-on-demand")
			req.Topics = append(req.Topics, rt)
			_, err := req.RequestWith(ctx, newClient(t, b))
			require.NoError(t, err)
			require.NotNil(t, b.Cluster().TopicInfo("made-on-demand"))
		}},
		{"No default retention.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			createTopic(ctx, t, b, "plain", 1, nil)
			produceEach(ctx, t, b, "plain", kv{key: "old", age: 30 * 24 * time.Hour}, kv{key: "new"})
			b.Compact() // applies retention too
			require.EqualValues(t, 0, listedStart(ctx, t, b, "plain", 0))
			requireRecordAt(ctx, t, b, "plain", 0, 0)
		}},
		{"Compaction is eager.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			createTopic(ctx, t, b, "log", 1, map[string]string{"cleanup.policy": "compact"})
			produceEach(ctx, t, b, "log", kv{key: "a", value: "1"}, kv{key: "a", value: "2"}, kv{key: "b", value: "1"})
			b.Compact()
			// A few seconds' worth of records, far inside Kafka's active
			// segment, are cleaned all the same.
			requireRecordAt(ctx, t, b, "log", 0, 1)
		}},
		{"Transactional writes wait out each compaction run", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{Partitions: 1})
			createTopic(ctx, t, b, "log", 1, map[string]string{"cleanup.policy": "compact"})
			cl := newClient(t, b, kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("log"))
			require.NoError(t, cl.BeginTransaction())
			b.starts.holding.Store(true)
			done := make(chan error, 1)
			go func() { done <- cl.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("v")}).FirstErr() }()
			for b.starts.refused.Load() == 0 {
				select {
				case err := <-done:
					t.Fatalf("written during a compaction run: %v", err)
				case <-ctx.Done():
					t.Fatal("the write was never refused")
				case <-time.After(time.Millisecond):
				}
			}
			b.starts.holding.Store(false)
			require.NoError(t, <-done, "written once the run is over")
			require.NoError(t, cl.EndTransaction(ctx, kgo.TryCommit))
		}},
		{"Tombstones expire by their timestamp.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			createTopic(ctx, t, b, "log", 1, map[string]string{"cleanup.policy": "compact"})
			produceEach(ctx, t, b, "log", kv{key: "k", value: "1"}, kv{key: "k", tombstone: true, age: 48 * time.Hour}, kv{key: "z", value: "1"})
			b.Compact()
			// The first compaction to see the tombstone drops it.
			rec := requireRecordAt(ctx, t, b, "log", 0, 2)
			require.Equal(t, "z", string(rec.Key))
		}},
		{"Retention does not see what compaction removed.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			createTopic(ctx, t, b, "log", 1, map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "86400000"})
			age := 30 * time.Minute
			produceEach(ctx, t, b, "log", kv{key: "k", value: "1", age: age}, kv{key: "k", value: "2", age: age}, kv{key: "k", value: "3"}, kv{key: "m"})
			b.Compact()
			require.EqualValues(t, 2, kfakeStart(t, b, "log", 0), "precondition: compaction removed offsets 0 and 1")

			// Offsets 0 and 1 expire now; Kafka would start the log at 2.
			_, err := kadm.NewClient(newClient(t, b)).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("60000")}}, "log")
			require.NoError(t, err)
			b.Compact()
			require.EqualValues(t, 0, listedStart(ctx, t, b, "log", 0))
		}},
		{"Fetch responses report kfake's log start.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			createTopic(ctx, t, b, "log", 2, map[string]string{"cleanup.policy": "compact"})
			produceEach(ctx, t, b, "log", gappedLog...)
			b.Compact()
			require.EqualValues(t, 0, listedStart(ctx, t, b, "log", 0))

			_, part, err := fetchAt(ctx, t, b, "log", 0, 0)
			require.NoError(t, err)
			require.EqualValues(t, 3, part.LogStartOffset, "a fetch response's log start")

			req := kmsg.NewPtrListOffsetsRequest()
			req.ReplicaID = -1
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = "log"
			for p, ts := range []int64{-2, -1} {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition = int32(p)
				rp.Timestamp = ts
				rp.CurrentLeaderEpoch = -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
			raw, err := newClient(t, b).SeedBrokers()[0].Request(ctx, req)
			require.NoError(t, err)
			resp := raw.(*kmsg.ListOffsetsResponse)
			require.Len(t, resp.Topics, 1)
			for _, p := range resp.Topics[0].Partitions {
				if p.Partition == 0 {
					require.EqualValues(t, 3, p.Offset, "earliest asked along with latest")
				}
			}
		}},
		{"DeleteRecords into a compacted range reports kfake's start.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			newGappedLog(ctx, t, b, "log")
			var os kadm.Offsets
			os.AddOffset("log", 0, 1, -1)
			resp, err := kadm.NewClient(newClient(t, b)).DeleteRecords(ctx, os)
			require.NoError(t, err)
			require.NoError(t, resp.Error())
			d, ok := resp.Lookup("log", 0)
			require.True(t, ok)
			require.EqualValues(t, 3, d.LowWatermark)
			require.EqualValues(t, 1, listedStart(ctx, t, b, "log", 0))
		}},
		{"Compaction and deletions made on the kfake cluster itself", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			createTopic(ctx, t, b, "log", 1, map[string]string{"cleanup.policy": "compact"})
			produceEach(ctx, t, b, "log", gappedLog...)
			b.Cluster().Compact()
			require.EqualValues(t, 3, listedStart(ctx, t, b, "log", 0), "compacted behind the broker's back")

			newGappedLog(ctx, t, b, "log2")
			require.ErrorIs(t, b.Cluster().DeleteRecords("log2", 0, 1), kerr.OffsetOutOfRange,
				"kfake refuses a deletion Kafka would accept")
			require.EqualValues(t, 0, listedStart(ctx, t, b, "log2", 0))
		}},
		{"Read-committed fetches share max_bytes out among the partitions they name.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			createTopic(ctx, t, b, "big", 3, nil)
			cl := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()),
				kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(4<<10),
				kgo.MaxVersions(kversion.V3_0_0()))
			for p := range int32(3) {
				for range 64 {
					cl.Produce(ctx, &kgo.Record{Topic: "big", Partition: p, Value: make([]byte, 1024)}, nil)
				}
			}
			require.NoError(t, cl.Flush(ctx))
			// Each partition holds 64 KiB and may give 32 KiB; the response
			// may hold 40 KiB.
			sizes := func(isolation int8) []int {
				req := kmsg.NewPtrFetchRequest()
				req.MaxBytes = 40 << 10
				req.IsolationLevel = isolation
				rt := kmsg.NewFetchRequestTopic()
				rt.Topic = "big"
				for p := range int32(3) {
					rp := kmsg.NewFetchRequestTopicPartition()
					rp.Partition = p
					rp.PartitionMaxBytes = 32 << 10
					rt.Partitions = append(rt.Partitions, rp)
				}
				req.Topics = append(req.Topics, rt)
				resp, err := req.RequestWith(ctx, cl)
				require.NoError(t, err)
				n := make([]int, 3)
				for _, st := range resp.Topics {
					for _, sp := range st.Partitions {
						require.NoError(t, kerr.ErrorForCode(sp.ErrorCode))
						n[sp.Partition] = len(sp.RecordBatches)
					}
				}
				return n
			}
			// Kafka (and kfake, read_uncommitted) fills partitions in
			// order: the third gets nothing.
			un := sizes(0)
			require.LessOrEqual(t, un[0]+un[1]+un[2], 40<<10)
			require.Zero(t, un[2], "read_uncommitted: the response is full before the third partition")
			rc := sizes(1)
			for p, n := range rc {
				require.Positive(t, n, "read_committed: partition %d gets its share", p)
				require.LessOrEqual(t, n, (40<<10)/3, "read_committed: partition %d within its share", p)
			}
		}},
		{"Stable offset fetches wait on the whole group.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			createTopic(ctx, t, b, "t", 2, nil)
			// Versions that name topics (3.9's), to keep the requests short.
			cl := newClient(t, b, kgo.MaxVersions(kversion.V3_9_0()))
			commit := kmsg.NewPtrOffsetCommitRequest()
			commit.Group = "g"
			commit.Generation = -1
			ct := kmsg.NewOffsetCommitRequestTopic()
			ct.Topic = "t"
			for p := range int32(2) {
				cp := kmsg.NewOffsetCommitRequestTopicPartition()
				cp.Partition, cp.Offset = p, 5
				ct.Partitions = append(ct.Partitions, cp)
			}
			commit.Topics = append(commit.Topics, ct)
			cresp, err := commit.RequestWith(ctx, cl)
			require.NoError(t, err)
			for _, p := range cresp.Topics[0].Partitions {
				require.NoError(t, kerr.ErrorForCode(p.ErrorCode))
			}

			// An open transaction holds an offset for partition 0 only.
			init := kmsg.NewPtrInitProducerIDRequest()
			init.TransactionalID = kmsg.StringPtr("tx")
			init.TransactionTimeoutMillis = 60_000
			iresp, err := init.RequestWith(ctx, cl)
			require.NoError(t, err)
			require.NoError(t, kerr.ErrorForCode(iresp.ErrorCode))
			add := kmsg.NewPtrAddOffsetsToTxnRequest()
			add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = "tx", iresp.ProducerID, iresp.ProducerEpoch, "g"
			aresp, err := add.RequestWith(ctx, cl)
			require.NoError(t, err)
			require.NoError(t, kerr.ErrorForCode(aresp.ErrorCode))
			txc := kmsg.NewPtrTxnOffsetCommitRequest()
			txc.TransactionalID, txc.Group, txc.ProducerID, txc.ProducerEpoch = "tx", "g", iresp.ProducerID, iresp.ProducerEpoch
			txc.Generation = -1
			tt := kmsg.NewTxnOffsetCommitRequestTopic()
			tt.Topic = "t"
			tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			tp.Partition, tp.Offset = 0, 9
			tt.Partitions = append(tt.Partitions, tp)
			txc.Topics = append(txc.Topics, tt)
			tresp, err := txc.RequestWith(ctx, cl)
			require.NoError(t, err)
			require.NoError(t, kerr.ErrorForCode(tresp.Topics[0].Partitions[0].ErrorCode))

			fetch1 := func(stable bool) (int64, error) {
				req := kmsg.NewPtrOffsetFetchRequest()
				req.RequireStable = stable
				rg := kmsg.NewOffsetFetchRequestGroup()
				rg.Group = "g"
				rt := kmsg.NewOffsetFetchRequestGroupTopic()
				rt.Topic = "t"
				rt.Partitions = []int32{1}
				rg.Topics = append(rg.Topics, rt)
				req.Groups = append(req.Groups, rg)
				resp, err := req.RequestWith(ctx, cl)
				require.NoError(t, err)
				require.Len(t, resp.Groups, 1)
				require.NoError(t, kerr.ErrorForCode(resp.Groups[0].ErrorCode))
				p := resp.Groups[0].Topics[0].Partitions[0]
				return p.Offset, kerr.ErrorForCode(p.ErrorCode)
			}
			// Kafka would answer partition 1's committed offset: no
			// transaction holds one for it.
			_, err = fetch1(true)
			require.ErrorIs(t, err, kerr.UnstableOffsetCommit)
			off, err := fetch1(false)
			require.NoError(t, err)
			require.Equal(t, int64(5), off)

			end := kmsg.NewPtrEndTxnRequest()
			end.TransactionalID, end.ProducerID, end.ProducerEpoch = "tx", iresp.ProducerID, iresp.ProducerEpoch
			eresp, err := end.RequestWith(ctx, cl)
			require.NoError(t, err)
			require.NoError(t, kerr.ErrorForCode(eresp.ErrorCode))
			off, err = fetch1(true)
			require.NoError(t, err, "the transaction ended")
			require.Equal(t, int64(5), off)
		}},
		{"Short session timeouts are accepted.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			req := kmsg.NewPtrJoinGroupRequest()
			req.Group = "g"
			req.SessionTimeoutMillis = 1000
			req.RebalanceTimeoutMillis = 5000
			req.ProtocolType = "consumer"
			proto := kmsg.NewJoinGroupRequestProtocol()
			proto.Name = "range"
			req.Protocols = append(req.Protocols, proto)
			resp, err := req.RequestWith(ctx, newClient(t, b))
			require.NoError(t, err)
			// Kafka would answer INVALID_SESSION_TIMEOUT; a first join is
			// told its member ID instead.
			require.ErrorIs(t, kerr.ErrorForCode(resp.ErrorCode), kerr.MemberIDRequired)
		}},
		{"Group metadata records leave out what kfake does not expose.", func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, Config{})
			createTopic(ctx, t, b, "in", 1, nil)
			cl := newClient(t, b, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"), kgo.SessionTimeout(7*time.Second))
			for {
				_, metas := readOffsetsTopic(ctx, t, b)
				if m := metas["g"]; m != nil && len(m.members) == 1 {
					require.Nil(t, m.leader)
					require.Equal(t, int64(-1), m.stateTimestamp)
					require.Zero(t, m.members[0].sessionTimeout, "Kafka: 7000")
					require.Zero(t, m.members[0].rebalanceTimeout)
					return
				}
				poll, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				cl.PollFetches(poll) // joins the group
				cancel()
				require.NoError(t, ctx.Err(), "no metadata record for the group")
			}
		}},
		{"ApiVersions after authentication list SaslHandshake from v1.", func(t *testing.T) {
			c := dialRaw(t, saslBroker(t))
			c.handshakeV0(MechanismPlain)
			c.writeFrame([]byte("\x00alice\x00alice-pw"))
			_, err := c.readFrame()
			require.NoError(t, err)
			versions := kmsg.NewPtrApiVersionsResponse()
			c.request(kmsg.NewPtrApiVersionsRequest(), versions)
			for _, k := range versions.ApiKeys {
				if k.ApiKey == int16(kmsg.SASLHandshake) {
					require.Equal(t, int16(1), k.MinVersion)
				}
			}
		}},
	}

	bullets := docDivergences(t)
	matched := make(map[string]bool)
	for _, bullet := range bullets {
		n := 0
		for _, r := range rows {
			if strings.HasPrefix(bullet, r.bullet) {
				n++
				matched[r.bullet] = true
			}
		}
		require.Equal(t, 1, n, "rows checking the documented divergence %q", bullet)
	}
	for _, r := range rows {
		require.True(t, matched[r.bullet], "row %q checks no divergence the package doc lists", r.bullet)
		t.Run(r.bullet, r.check)
	}
}
