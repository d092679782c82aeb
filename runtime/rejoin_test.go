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
)

// An offset commit refused because the member's generation is over
// (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS) is not
// fatal: the thread drops its uncommitted work, joins again, and processes
// that work again from the committed offsets. Nothing is lost, and each
// refused commit replays its work at most once more: with two refusals a
// record is counted at most three times.
func TestRefusedCommitRejoinsInsteadOfFailing(t *testing.T) {
	t.Parallel()
	for _, code := range []*kerr.Error{kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.RebalanceInProgress} {
		t.Run(code.Message, func(t *testing.T) {
			b, _ := startBroker(t, "in")
			group := "rejoin-" + code.Message
			const refusals = 2
			fault := b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group, Err: code, Count: refusals})
			t.Cleanup(fault.Remove)
			app, err := New(countTopology(t), Config{ApplicationID: group, Brokers: b.Addrs(), StateDir: t.TempDir(),
				NumStreamThreads: 1, CommitInterval: 100 * time.Millisecond})
			require.NoError(t, err)
			require.NoError(t, app.Start(context.Background()))
			t.Cleanup(func() { app.Close(context.Background()) })

			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
			require.NoError(t, err)
			t.Cleanup(cl.Close)
			const keys, each = 10, 20
			for i := range keys * each {
				cl.Produce(context.Background(), &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%keys), Value: []byte("v")}, nil)
			}
			require.NoError(t, cl.Flush(context.Background()))

			q := iq.NewQuerier(app.Queries())
			counts := func() (min, max int64) {
				min = 1 << 62
				for k := range keys {
					r, err := iq.Get[string, int64](context.Background(), q, "counts", fmt.Sprintf("k%d", k), serde.String, serde.Int64)
					v := int64(0)
					if err == nil && r.Found {
						v = r.Value
					}
					min, max = minmax(min, max, v)
				}
				return min, max
			}
			waitFor(t, 60*time.Second, "every key counted at least 20 times after refused commits", func() bool {
				lo, _ := counts()
				return lo >= each && fault.Hits() >= refusals && app.State() == StateRunning
			})
			require.NoError(t, app.Err())
			require.Positive(t, app.Stats().Rejoins, "the thread joined again")
			_, hi := counts()
			require.LessOrEqual(t, hi, int64((1+refusals)*each), "each refused commit replays a record at most once more")
		})
	}
}

func minmax(lo, hi, v int64) (int64, int64) {
	return min(lo, v), max(hi, v)
}
