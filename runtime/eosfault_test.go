package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// Under exactly-once, a transaction the broker gives up on — a produce
// refused with an epoch its timeout abort bumped, an EndTxn answered
// INVALID_TXN_STATE — costs the thread its uncommitted work, not the
// instance: the transaction aborts (or the thread starts again with a new
// producer) and the input is processed again, exactly once in the end.
func TestExactlyOnceSurvivesATransactionTheBrokerDropped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault kfake.Fault
	}{
		{"produce INVALID_PRODUCER_EPOCH", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out", Err: kerr.InvalidProducerEpoch}},
		{"produce INVALID_TXN_STATE", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out", Err: kerr.InvalidTxnState}},
		{"end txn INVALID_TXN_STATE", kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.InvalidTxnState}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := startBroker(t, "in", "out")
			bld := topology.NewBuilder()
			s := topology.Stream(bld, "in", serde.String, serde.String)
			s.To("out", serde.String, serde.String)
			s.GroupByKey(serde.String, serde.String).Count("counts")
			topo, err := bld.Build()
			require.NoError(t, err)

			const keys, each = 10, 30
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
			require.NoError(t, err)
			t.Cleanup(cl.Close)
			produce := func(from, to int) {
				for i := from; i < to; i++ {
					cl.Produce(context.Background(), &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%keys), Value: []byte("v")}, nil)
				}
				require.NoError(t, cl.Flush(context.Background()))
			}
			produce(0, keys*each/2)

			app, err := New(topo, Config{ApplicationID: "eosfault", Brokers: b.Addrs(), StateDir: t.TempDir(),
				NumStreamThreads: 1, ProcessingGuarantee: ExactlyOnce, CommitInterval: 100 * time.Millisecond})
			require.NoError(t, err)
			require.NoError(t, app.Start(context.Background()))
			t.Cleanup(func() { app.Close(context.Background()) })
			q := iq.NewQuerier(app.Queries())
			counted := func() (total int64, hi int64) {
				for k := range keys {
					r, err := iq.Get[string, int64](context.Background(), q, "counts", fmt.Sprintf("k%d", k), serde.String, serde.Int64)
					if err == nil && r.Found {
						total += r.Value
						hi = max(hi, r.Value)
					}
				}
				return total, hi
			}
			waitFor(t, 60*time.Second, "the first half counted", func() bool {
				n, _ := counted()
				return n == keys*each/2
			})

			// The fault strikes the next transaction that writes.
			fault := b.Cluster().Fault(tc.fault)
			t.Cleanup(fault.Remove)
			produce(keys*each/2, keys*each)
			waitFor(t, 60*time.Second, "every record counted after the dropped transaction", func() bool {
				n, _ := counted()
				return fault.Hits() >= 1 && n == keys*each && app.State() == StateRunning
			})
			require.NoError(t, app.Err())
			_, hi := counted()
			require.Equal(t, int64(each), hi, "exactly once: no key counted more than it was sent")

			// The sink holds each input record exactly once for a
			// read-committed reader.
			rd, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("out"),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			require.NoError(t, err)
			t.Cleanup(rd.Close)
			seen := 0
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for seen < keys*each {
				fs := rd.PollFetches(ctx)
				require.NoError(t, ctx.Err(), "read %d of %d committed output records", seen, keys*each)
				seen += fs.NumRecords()
			}
			require.Equal(t, keys*each, seen)
		})
	}
}
