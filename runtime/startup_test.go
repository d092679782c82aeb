package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/task"
)

// A fresh instance's threads join the group together: its first
// assignment already spreads the tasks over all of them, so no task is
// revoked, moved or started twice on the way to the stable assignment.
// Before, the first thread's join could complete alone and the second
// thread's join, about a heartbeat later, moved half the tasks. Several
// fresh instances (each its own group) are started in turn, since one
// start could be lucky.
func TestThreadsJoinTogether(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name  string
		eager bool
	}{{"cooperative", false}, {"eager", true}} {
		t.Run(mode.name, func(t *testing.T) {
			b, err := broker.Start(broker.Config{Partitions: 4})
			require.NoError(t, err)
			t.Cleanup(b.Close)
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
			require.NoError(t, err)
			t.Cleanup(cl.Close)
			_, err = kadm.NewClient(cl).CreateTopics(context.Background(), 4, -1, nil, "in")
			require.NoError(t, err)
			for run := range 4 {
				startTogether(t, b, fmt.Sprintf("together-%d", run), mode.eager)
			}
		})
	}
}

func startTogether(t *testing.T, b *broker.Broker, appID string, eager bool) {
	t.Helper()
	app, err := New(countTopology(t), Config{ApplicationID: appID, Brokers: b.Addrs(), StateDir: t.TempDir(),
		NumStreamThreads: 2, EagerRebalancing: eager})
	require.NoError(t, err)
	log := watchTransitions(app)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())
	tasks := []task.ID{{Partition: 0}, {Partition: 1}, {Partition: 2}, {Partition: 3}}
	waitFor(t, 30*time.Second, "every task running, spread over both threads", func() bool {
		if app.State() != StateRunning {
			return false
		}
		running := 0
		for _, th := range app.threads {
			th.lockIdle()
			n := len(th.runningTasks())
			th.mu.Unlock()
			if n == 0 {
				return false
			}
			running += n
		}
		return running == len(tasks)
	})
	var revoked int64
	for _, th := range app.threads {
		revoked += th.revokedTasks.Load()
	}
	require.Zero(t, revoked, "%s: tasks revoked on the way to the first stable assignment", appID)
	for _, id := range tasks {
		require.Equal(t, []string{"created>restoring", "restoring>running"}, log.of("replica", id),
			"%s: task %s started once, on its final thread", appID, id)
	}
	require.NoError(t, app.Err())
}
