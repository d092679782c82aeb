package runtime

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
)

// Config.AssignFunc replaces the leader's placement: here it wraps the
// default one and counts its calls, and the instance counts its input; an
// output that leaves tasks unassigned stops the instance naming the
// function. ActiveRackTag with brokers that report no racks places as
// without it.
func TestConfigAssignFunc(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	var calls atomic.Int64
	app, err := New(countTopology(t), Config{ApplicationID: "af", Brokers: b.Addrs(), StateDir: t.TempDir(),
		NumStreamThreads: 1, CommitInterval: 100 * time.Millisecond,
		Tags: map[string]string{"rack": "r1"}, ActiveRackTag: "rack",
		AssignFunc: func(cfg assignor.Config, in assignor.Input) assignor.Output {
			calls.Add(1)
			return assignor.Assign(cfg, in)
		}})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { app.Close(context.Background()) })

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	for i := range 30 {
		cl.Produce(context.Background(), &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%3), Value: []byte("v")}, nil)
	}
	require.NoError(t, cl.Flush(context.Background()))
	q := iq.NewQuerier(app.Queries())
	waitFor(t, 30*time.Second, "every key counted 10 times", func() bool {
		for k := range 3 {
			r, err := iq.Get[string, int64](context.Background(), q, "counts", fmt.Sprintf("k%d", k), serde.String, serde.Int64)
			if err != nil || !r.Found || r.Value != 10 {
				return false
			}
		}
		return true
	})
	require.Positive(t, calls.Load(), "the leader placed tasks with the configured function")

	bad, err := New(countTopology(t), Config{ApplicationID: "af-bad", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1,
		AssignFunc: func(assignor.Config, assignor.Input) assignor.Output { return assignor.Output{} }})
	require.NoError(t, err)
	require.NoError(t, bad.Start(context.Background()))
	t.Cleanup(func() { bad.Close(context.Background()) })
	select {
	case <-bad.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("an invalid assignment did not stop the instance")
	}
	require.ErrorContains(t, bad.Err(), "AssignFunc")
}
