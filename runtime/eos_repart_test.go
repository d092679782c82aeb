package runtime

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

func TestExactlyOnceThroughRepartition(t *testing.T) {
	t.Parallel()
	c := newEOSCluster(t)
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	w := topology.FlatMapValues(s, func(_, v string) []string { return strings.Fields(v) })
	topology.GroupBy(w, func(_, v string) string { return v }, "words", serde.String, serde.String).Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "eosr", Brokers: c.b.Addrs(), StateDir: t.TempDir(), ProcessingGuarantee: ExactlyOnce,
		NumStreamThreads: testThreads(t),
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())
	for range 20 {
		c.cl.Produce(context.Background(), &kgo.Record{Value: []byte("k0 k1 k0")}, nil)
	}
	require.NoError(t, c.cl.Flush(context.Background()))
	waitCounts(t, app, map[string]int64{"k0": 40, "k1": 20})

	// A store's position after a commit is past the transaction's commit
	// marker: the changelog's end, where a standby reading it would stand.
	ends, err := c.adm.ListEndOffsets(context.Background(), "eosr-counts-changelog")
	require.NoError(t, err)
	for _, ri := range app.Replicas() {
		if ri.Store != "counts" || ri.State != task.Running {
			continue
		}
		end, _ := ends.Lookup("eosr-counts-changelog", ri.Partition)
		if end.Offset > 0 {
			require.Equal(t, end.Offset, ri.Position, "partition %d", ri.Partition)
		}
	}
}
