package integration

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

func TestSmoke(t *testing.T) {
	b, err := broker.Start(broker.Config{Partitions: 3})
	require.NoError(t, err)
	defer b.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	_, err = adm.CreateTopics(context.Background(), 3, -1, nil, "text", "word-counts")
	require.NoError(t, err)

	bld := topology.NewBuilder()
	lines := topology.Stream(bld, "text", serde.String, serde.String)
	words := topology.FlatMapValues(lines, func(_, l string) []string { return strings.Fields(l) })
	counts := topology.GroupBy(words, func(_, w string) string { return w }, "words", serde.String, serde.String).Count("counts")
	counts.ToStream().To("word-counts", serde.String, serde.Int64)
	topo, err := bld.Build()
	require.NoError(t, err)

	app, err := runtime.New(topo, runtime.Config{ApplicationID: "wc", Brokers: b.Addrs(), StateDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})), SessionTimeout: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	for i := 0; i < 100; i++ {
		cl.Produce(context.Background(), &kgo.Record{Topic: "text", Value: []byte("a b c a")}, nil)
	}
	require.NoError(t, cl.Flush(context.Background()))
	key, _ := serde.String.Encode("a")
	require.Eventually(t, func() bool {
		v, found, _, err := app.LocalGet("counts", key)
		if err != nil || !found {
			return false
		}
		n, _ := serde.Int64.Decode(v)
		t.Logf("a=%d", n)
		return n == 200
	}, 20*time.Second, 100*time.Millisecond)
	require.NoError(t, app.Close(context.Background()))
}
