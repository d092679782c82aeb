package runtime

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPurgeNeverDeletesAboveTheGroupsCommit gives the purger offsets above
// what the group has committed, as a thread's client could hold them for a
// partition another member has since committed lower: it deletes only up
// to the group's commit, and nothing of a partition the group has no
// commit for.
func TestPurgeNeverDeletesAboveTheGroupsCommit(t *testing.T) {
	const topic, group = "app-words-repartition", "app"
	b, adm := startBroker(t, topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()
	for p := range int32(2) {
		recs := make([]*kgo.Record, 100)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Partition: p, Value: []byte("w")}
		}
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	}
	commit := func(at int64) {
		t.Helper()
		o := make(kadm.Offsets)
		o.Add(kadm.Offset{Topic: topic, Partition: 0, At: at, LeaderEpoch: -1})
		resp, err := adm.CommitOffsets(ctx, group, o)
		require.NoError(t, err)
		require.NoError(t, resp.Error())
	}
	starts := func() (int64, int64) {
		t.Helper()
		l, err := adm.ListStartOffsets(ctx, topic)
		require.NoError(t, err)
		s0, _ := l.Lookup(topic, 0)
		s1, _ := l.Lookup(topic, 1)
		return s0.Offset, s1.Offset
	}

	p := newPurger(ctx, adm, group, []string{topic}, time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	tp := &threadPurge{purged: make(map[string]map[int32]int64)}
	local := make(kadm.Offsets)
	local.Add(kadm.Offset{Topic: topic, Partition: 0, At: 80, LeaderEpoch: -1})
	local.Add(kadm.Offset{Topic: topic, Partition: 1, At: 60, LeaderEpoch: -1})

	commit(40)
	p.purge(tp, local)
	s0, s1 := starts()
	require.EqualValues(t, 40, s0, "partition 0 purged past the group's commit")
	require.EqualValues(t, 0, s1, "partition 1 purged without a commit in the group")

	commit(90)
	p.purge(tp, local)
	s0, _ = starts()
	require.EqualValues(t, 80, s0, "partition 0 purged past what the thread knows committed")
}
