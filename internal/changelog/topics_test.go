package changelog

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestTopicName(t *testing.T) {
	require.Equal(t, "wordcount-counts-changelog", TopicName("wordcount", "counts"))
}

func newAdmin(t *testing.T, addrs []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func TestEnsureTopicsCreatesAndVerifies(t *testing.T) {
	c := newCluster(t, 0)
	adm := newAdmin(t, c.ListenAddrs())
	ctx := context.Background()

	specs := []TopicSpec{
		{Name: "app-store-changelog", Partitions: 4, Compacted: true},
		{Name: "app-rekey-repartition", Partitions: 2, Configs: map[string]*string{"retention.ms": kadm.StringPtr("-1")}},
		{Name: "app-win-changelog", Partitions: 1, Compacted: true, Configs: map[string]*string{"cleanup.policy": kadm.StringPtr("compact,delete")}},
	}
	require.NoError(t, EnsureTopics(ctx, adm, specs))

	details, err := adm.ListTopics(ctx, "app-store-changelog", "app-rekey-repartition", "app-win-changelog")
	require.NoError(t, err)
	require.Len(t, details["app-store-changelog"].Partitions, 4)
	require.Len(t, details["app-rekey-repartition"].Partitions, 2)

	configs, err := adm.DescribeTopicConfigs(ctx, "app-store-changelog", "app-rekey-repartition", "app-win-changelog")
	require.NoError(t, err)
	want := map[string]string{
		"app-store-changelog":   "compact",
		"app-rekey-repartition": "delete",
		"app-win-changelog":     "compact,delete",
	}
	for _, rc := range configs {
		require.NoError(t, rc.Err)
		for _, cfg := range rc.Configs {
			if cfg.Key == "cleanup.policy" {
				require.Equal(t, want[rc.Name], cfg.MaybeValue(), rc.Name)
			}
		}
	}

	// Running again against existing topics is a no-op.
	require.NoError(t, EnsureTopics(ctx, adm, specs))
}

func TestEnsureTopicsPartitionMismatch(t *testing.T) {
	c := newCluster(t, 3, "app-a-changelog", "app-b-changelog")
	adm := newAdmin(t, c.ListenAddrs())

	err := EnsureTopics(context.Background(), adm, []TopicSpec{
		{Name: "app-a-changelog", Partitions: 5, Compacted: true},
		{Name: "app-b-changelog", Partitions: 3, Compacted: true},
		{Name: "app-c-changelog", Partitions: 2, Compacted: true},
	})
	var mismatch *PartitionMismatchError
	require.ErrorAs(t, err, &mismatch)
	require.Equal(t, PartitionMismatchError{Topic: "app-a-changelog", Expected: 5, Actual: 3}, *mismatch)
	require.Contains(t, err.Error(), `"app-a-changelog" has 3 partitions, expected 5`)
}

func TestEnsureTopicsConcurrentCreators(t *testing.T) {
	c := newCluster(t, 0)
	specs := []TopicSpec{
		{Name: "race-1", Partitions: 3, Compacted: true},
		{Name: "race-2", Partitions: 6},
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		adm := newAdmin(t, c.ListenAddrs())
		wg.Go(func() { errs[i] = EnsureTopics(context.Background(), adm, specs) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

func TestEnsureTopicsRejectsBadSpecs(t *testing.T) {
	c := newCluster(t, 0)
	adm := newAdmin(t, c.ListenAddrs())
	for name, specs := range map[string][]TopicSpec{
		"no name":            {{Partitions: 1}},
		"zero partitions":    {{Name: "x", Partitions: 0}},
		"conflicting counts": {{Name: "x", Partitions: 1}, {Name: "x", Partitions: 2}},
	} {
		t.Run(name, func(t *testing.T) {
			require.Error(t, EnsureTopics(context.Background(), adm, specs))
		})
	}
	require.NoError(t, EnsureTopics(context.Background(), adm, nil))
}

// TestEnsureTopicsBrokerDefaultPartitions creates a topic with the broker's
// default partition count (-1) and accepts any count of an existing one.
func TestEnsureTopicsBrokerDefaultPartitions(t *testing.T) {
	c := newCluster(t, 3, "existing")
	adm := newAdmin(t, c.ListenAddrs())
	ctx := context.Background()
	require.NoError(t, EnsureTopics(ctx, adm, []TopicSpec{{Name: "fresh", Partitions: -1}, {Name: "existing", Partitions: -1}}))
	details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), "fresh", "existing")
	require.NoError(t, err)
	require.Len(t, details["fresh"].Partitions, 10, "kfake's default num.partitions")
	require.Len(t, details["existing"].Partitions, 3)

	err = EnsureTopics(ctx, adm, []TopicSpec{{Name: "bad", Partitions: 0}})
	require.ErrorContains(t, err, "partitions must be positive or -1")
}
