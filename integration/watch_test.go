package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// watchStep is one update a watcher received, or one committed changelog
// record of its word.
type watchStep struct {
	Position int64
	Count    int64
}

// watcher follows one word through an iq.Client watch on a goroutine of
// its own and keeps every update.
type watcher struct {
	name string
	word string

	mu    sync.Mutex
	got   []watchStep
	hosts map[string]int
	err   error

	cancel context.CancelFunc
	exited chan struct{}
}

func startWatcher(t *testing.T, cl *iq.Client, name, word string, opts iq.WatchOptions) *watcher {
	kb, err := serde.String.Encode(word)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{name: name, word: word, hosts: map[string]int{}, cancel: cancel, exited: make(chan struct{})}
	rw, err := cl.Watch(ctx, countsStore, word, kb, opts)
	require.NoError(t, err, name)
	go func() {
		defer close(w.exited)
		defer rw.Close()
		for {
			u, err := rw.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
				}
				return
			}
			n, err := strconv.ParseInt(string(u.Value), 10, 64)
			w.mu.Lock()
			if err != nil {
				w.err = fmt.Errorf("update %q at %d: %w", u.Value, u.Position, err)
				w.mu.Unlock()
				return
			}
			w.got = append(w.got, watchStep{u.Position, n})
			w.hosts[u.Provenance.Host+" "+u.Provenance.Role.String()]++
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *watcher) stop() {
	w.cancel()
	<-w.exited
}

// last returns the last count received and how many updates came.
func (w *watcher) last() (int64, int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.got) == 0 {
		return 0, 0, w.err
	}
	return w.got[len(w.got)-1].Count, len(w.got), w.err
}

// committedSteps reads a word's records from its counts changelog
// partition with read-committed isolation, every one through position
// through.
func committedSteps(t *testing.T, c *cluster, word string, through int64) []watchStep {
	t.Helper()
	p := iqWordPartition(word, c.partitions)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.b.Addrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{changelogTopic("wc"): {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	require.NoError(t, err)
	defer cl.Close()
	rctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	var out []watchStep
	for done := false; !done; {
		fs := cl.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "reading the changelog of %q through %d", word, through)
		fs.EachRecord(func(r *kgo.Record) {
			done = done || r.Offset >= through
			if r.Offset > through || r.Attrs.IsControl() || string(r.Key) != word {
				return
			}
			v, _ := statestore.SplitTimestamped(r.Value)
			n, err := serde.Int64.Decode(v)
			require.NoError(t, err)
			out = append(out, watchStep{r.Offset, n})
		})
	}
	return out
}

// Live queries through failures: three instances, one standby each,
// exactly-once, input arriving all along. Watchers of a hot and a cold
// word, through the routing client (one on actives only, one spread over
// every replica within a lag bound), keep their watch through a kill -9 of
// the instance serving them, a rolling restart of the others and a
// rebalance that a fourth instance joining starts. Each watcher's sequence
// is exactly the word's committed changelog sequence from the start: no
// gap, no duplicate, no step back.
func TestWatchThroughFailover(t *testing.T) {
	c := newCluster(t, 2)
	dirs := map[string]string{"a": t.TempDir(), "b": t.TempDir(), "c": t.TempDir(), "d": t.TempDir()}
	cfg := func(name string) instanceConfig {
		return instanceConfig{standbys: 1, sessionTimeout: failoverSession, probing: time.Second, guarantee: runtime.ExactlyOnce, stateDir: dirs[name]}
	}
	nodes := map[string]*iqNode{}
	for _, name := range []string{"a", "b", "c"} {
		nodes[name] = c.startIQNode(t, name, cfg(name))
	}
	lay := c.iqWaitLayout(t, []*iqNode{nodes["a"], nodes["b"], nodes["c"]}, 1)

	// Both words in partition 0, which the kill takes from its active.
	var hot, cold string
	for i := 0; hot == "" || cold == ""; i++ {
		w := "watch" + strconv.Itoa(i)
		if iqWordPartition(w, c.partitions) != 0 {
			continue
		}
		if hot == "" {
			hot = w
		} else {
			cold = w
		}
	}
	hotFeed := c.iqFeed([]string{hot}, 20*time.Millisecond)
	coldFeed := c.iqFeed([]string{cold}, 400*time.Millisecond)
	defer func() {
		for _, f := range []*iqFeeder{hotFeed, coldFeed} {
			select {
			case <-f.stop:
			default:
				f.halt(t)
			}
		}
	}()
	hotFeed.waitBatches(t, 5)

	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	cl, err := iq.NewClient(addrs, iq.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	spread := iq.WatchOptions{From: iq.FromStart, Staleness: iq.MaxLag(boundLag), Prefer: iq.PreferSpread}
	watchers := []*watcher{
		startWatcher(t, cl, "hot, active", hot, iq.WatchOptions{From: iq.FromStart}),
		startWatcher(t, cl, "hot, spread", hot, spread),
		startWatcher(t, cl, "cold, active", cold, iq.WatchOptions{From: iq.FromStart}),
		startWatcher(t, cl, "cold, spread", cold, spread),
	}
	progress := func(what string) {
		t.Helper()
		before := make([]int, len(watchers))
		for i, w := range watchers {
			_, before[i], _ = w.last()
		}
		waitFor(t, settleTimeout, "every watcher getting updates "+what, func() (bool, string) {
			var probs []string
			for i, w := range watchers {
				_, n, err := w.last()
				if err != nil || n <= before[i] {
					w.mu.Lock()
					probs = append(probs, fmt.Sprintf("%s: %d updates (%d before), err %v, served by %v", w.name, n, before[i], err, w.hosts))
					w.mu.Unlock()
				}
			}
			if len(probs) > 0 {
				probs = append(probs, fmt.Sprintf("changelog ends %v", c.endOffsets(t, changelogTopic("wc"))))
			}
			return len(probs) == 0, strings.Join(probs, "; ")
		})
		for _, n := range nodes {
			if ri, ok := n.replica(0); ok && ri.Role == iq.RoleActive {
				t.Logf("%s: partition 0's active is %s", what, n.name)
			}
		}
	}
	progress("before the kill")

	victim := lay[0].active
	victim.kill()
	delete(nodes, victim.name)
	progress("after the kill of " + victim.name)

	// A rolling restart of the survivors: each closes and comes back on
	// its state directory, one after the other.
	for _, name := range []string{"a", "b", "c"} {
		n, ok := nodes[name]
		if !ok {
			continue
		}
		n.srv.Close()
		n.close(t)
		restart := cfg(name)
		restart.endpoint = n.addr
		nodes[name] = c.startIQNode(t, name, restart)
		progress("after the restart of " + name)
	}
	// A fourth instance joins: the rebalance moves replicas to it.
	nodes["d"] = c.startIQNode(t, "d", cfg("d"))
	var all []*iqNode
	for _, n := range nodes {
		all = append(all, n)
	}
	c.iqWaitLayout(t, all, 1)
	progress("after the rebalance")

	final := map[string]int64{}
	for w, n := range hotFeed.halt(t) {
		final[w] += n
	}
	for w, n := range coldFeed.halt(t) {
		final[w] += n
	}
	waitFor(t, settleTimeout, "every watcher at its word's final count", func() (bool, string) {
		var probs []string
		for _, w := range watchers {
			n, _, err := w.last()
			if err != nil || n != final[w.word] {
				w.mu.Lock()
				probs = append(probs, fmt.Sprintf("%s at %d, want %d, err %v, served by %v", w.name, n, final[w.word], err, w.hosts))
				w.mu.Unlock()
			}
		}
		if len(probs) > 0 {
			probs = append(probs, fmt.Sprintf("changelog ends %v", c.endOffsets(t, changelogTopic("wc"))))
		}
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	for _, w := range watchers {
		w.stop()
		w.mu.Lock()
		got, hosts, werr := w.got, w.hosts, w.err
		w.mu.Unlock()
		require.NoError(t, werr, w.name)
		want := committedSteps(t, c, w.word, got[len(got)-1].Position)
		require.Equal(t, want, got, "%s: delivered sequence against the committed changelog", w.name)
		t.Logf("%s: %d updates, served by %v", w.name, len(got), hosts)
	}
}
