package runtime

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
)

// Under exactly-once the broker shows a commit's offsets before the
// thread has written the commit's writes into its stores. A query of the
// active in between must not answer with the previous commit's state
// while vouching for lag 0: it waits for the writes to land. The commit
// is held in that gap by the crash seam, which here pauses instead of
// crashing.
func TestExactlyOnceQueryWaitsForLandingCommit(t *testing.T) {
	c := newEOSCluster(t)
	app, err := New(countTopology(t), Config{
		ApplicationID: "eos", Brokers: c.b.Addrs(), StateDir: t.TempDir(),
		ProcessingGuarantee: ExactlyOnce, SessionTimeout: 2 * time.Second,
		NumStreamThreads: 1,
	})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())
	want := map[string]int64{}
	c.produce(t, 100, want)
	waitCounts(t, app, want)

	pauses := make(chan chan struct{})
	var armed atomic.Bool
	hook := func(step string) bool {
		if step == "after-commit" && armed.Load() {
			resume := make(chan struct{})
			pauses <- resume
			<-resume
		}
		return false
	}
	crashAt.Store(&hook)
	t.Cleanup(func() { crashAt.Store(nil) })
	armed.Store(true)
	c.produce(t, 50, want)

	// inputCommitted reports whether the group's offsets reach the
	// input's end.
	inputCommitted := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ends, err := c.adm.ListEndOffsets(ctx, "in")
		require.NoError(t, err)
		committed, err := c.adm.FetchOffsets(ctx, "eos")
		require.NoError(t, err)
		all := true
		ends.Each(func(e kadm.ListedOffset) {
			o, ok := committed.Lookup(e.Topic, e.Partition)
			all = all && ok && o.At == e.Offset
		})
		return all
	}
	q := iq.NewQuerier(app.Queries())
	for {
		var resume chan struct{}
		select {
		case resume = <-pauses:
		case <-time.After(20 * time.Second):
			t.Fatal("no commit of the new input")
		}
		if !inputCommitted() {
			close(resume)
			continue
		}
		// Every offset is committed, the stores not yet written.
		type answer struct {
			counts map[string]int64
			k0     int64
			err    error
		}
		got := make(chan answer, 1)
		go func() {
			var a answer
			a.counts = counts(app)
			r, err := q.GetBytes(context.Background(), "counts", []byte("k0"))
			if a.err = err; err == nil && r.Found {
				a.k0, _ = serde.Int64.Decode(r.Value)
			}
			got <- a
		}()
		select {
		case a := <-got:
			armed.Store(false)
			close(resume)
			t.Fatalf("answered while the commit's writes were not in the store: %v (want %v), k0 %d (%v)", a.counts, want, a.k0, a.err)
		case <-time.After(300 * time.Millisecond):
		}
		armed.Store(false)
		close(resume)
		a := <-got
		require.NoError(t, a.err)
		require.Equal(t, want, a.counts)
		require.Equal(t, want["k0"], a.k0)
		break
	}
}
