package integration

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/runtime"
)

// TestExactlyOnceSurvivesBrokerDownAtEndTxn: the broker goes away while a
// stream thread ends its transaction, so the thread cannot learn whether
// the transaction committed. The thread must not stop the instance: it
// drops its uncommitted work and joins again, like a fenced producer, and
// once the broker is back every word is counted exactly once (the broker
// decides whether the transaction committed; the stores restore whatever
// their changelogs say).
func TestExactlyOnceSurvivesBrokerDownAtEndTxn(t *testing.T) {
	const partitions = 2
	dir := t.TempDir()
	start := func(listen string) *broker.Broker {
		b, err := broker.Start(broker.Config{
			Listen: listen, DataDir: dir, Partitions: partitions, CompactionInterval: time.Hour,
		})
		require.NoError(t, err)
		t.Cleanup(b.Close)
		return b
	}
	b := start("")
	addr := b.Addrs()[0]
	c := clusterOn(t, b, partitions)

	in := c.start(t, "a", instanceConfig{guarantee: runtime.ExactlyOnce, stateDir: t.TempDir()})
	in.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
	gen := newCorpus(7, 200)
	want := make(map[string]int64)
	c.produceLines(t, gen.Lines(2000, want))
	requireStore(t, want, in)

	// The next EndTxn loses its connection, and so does every retry of
	// it, until the broker is gone.
	var once sync.Once
	down := make(chan struct{})
	b.Cluster().ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		once.Do(func() {
			go func() {
				b.Close()
				close(down)
			}()
		})
		return nil, fmt.Errorf("cut off"), true
	})
	c.produceLines(t, gen.Lines(500, want))
	<-down
	waitFor(t, settleTimeout, "the thread to find its transaction's end failed", func() (bool, string) {
		ids, _ := in.runningTasks()
		return in.Err() != nil || len(ids) < c.allTasks(), fmt.Sprintf("%s, running %v", in.State(), ids)
	})
	require.NoError(t, in.Err(), "the instance stopped")

	b = start(addr)
	c.b = b
	c.produceLines(t, gen.Lines(500, want))
	requireStore(t, want, in)
	requireCounts(t, want, readCommittedLatest(t, addr, outputTopic, partitions), "topic "+outputTopic)
	require.NoError(t, in.Err())
}
