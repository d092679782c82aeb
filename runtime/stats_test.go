package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStatsReportsEachCounter checks that every counter the instance keeps
// lands in its own field of the snapshot, and that the snapshot does not
// follow the counters afterwards.
func TestStatsReportsEachCounter(t *testing.T) {
	app, err := New(countTopology(t), Config{ApplicationID: "stats", Brokers: []string{"127.0.0.1:1"}, StateDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, Stats{}, app.Stats())

	app.skipped.Add(1)
	app.processingErrors.Add(2)
	app.replaced.Add(3)
	app.rejoins.Add(4)
	app.rewires.Add(5)
	app.diskFullWaits.Add(6)
	app.storesWiped.Add(7)
	app.recreatedResets.Add(8)
	s := app.Stats()
	require.Equal(t, Stats{Skipped: 1, ProcessingErrors: 2, ThreadsReplaced: 3, Rejoins: 4, Rewires: 5,
		DiskFullWaits: 6, StoresWiped: 7, StoreResets: 8}, s)

	app.rejoins.Add(1)
	require.EqualValues(t, 4, s.Rejoins)
	require.EqualValues(t, 5, app.Stats().Rejoins)
}

// droppedLate sums the late records a's tasks dropped from closed windows.
func droppedLate(a *App) (n int64) {
	for _, t := range a.Tasks() {
		n += t.DroppedLate
	}
	return n
}

// droppedJoin sums the stream records a's tasks dropped from their joins.
func droppedJoin(a *App) (n int64) {
	for _, t := range a.Tasks() {
		n += t.DroppedJoin
	}
	return n
}

// TestStatsAndReplicasDuringStart reads the snapshot and the replica list
// while Start builds what they read (the registry, the threads); under
// -race a read of a half-built App fails the test.
func TestStatsAndReplicasDuringStart(t *testing.T) {
	b, _ := startBroker(t, "in")
	app, err := New(countTopology(t), Config{ApplicationID: "stats-start", Brokers: b.Addrs(), StateDir: t.TempDir()})
	require.NoError(t, err)
	stop := make(chan struct{})
	reads := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				reads <- n
				return
			default:
			}
			_ = app.Stats()
			_ = app.Replicas()
			n++
		}
	}()
	require.NoError(t, app.Start(context.Background()))
	waitFor(t, 10*time.Second, "ready", app.Ready)
	close(stop)
	require.Positive(t, <-reads)
	require.NoError(t, app.Close(context.Background()))
	require.EqualValues(t, 0, app.Stats().StoreResets)
}
