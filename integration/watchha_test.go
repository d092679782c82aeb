package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// Range and window watches through the routing Client across the death of
// the active serving them: two instances with a standby each, exactly-once,
// input arriving all along. Each partition's delivered sequence is exactly
// the committed changelog's, from the changelog's start: no gap, no
// duplicate, positions strictly increasing.

// watchedStep is one update of a range or window watch, or one committed
// changelog record it stands for: the key, and for a window watch the
// window's start.
type watchedStep struct {
	Position int64
	Key      string
	Start    int64
	Count    int64
}

// watchFollower reads a watch on a goroutine of its own and keeps every
// update per partition, with who served it.
type watchFollower struct {
	mu    sync.Mutex
	got   map[int32][]watchedStep
	hosts map[int32]map[string]int
	err   error

	cancel context.CancelFunc
	exited chan struct{}
}

// follow reads next until the test ends or the watch fails; end ends the
// watch once the reading stops.
func follow(t *testing.T, next func(context.Context) (iq.Update, error), end func()) *watchFollower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &watchFollower{got: map[int32][]watchedStep{}, hosts: map[int32]map[string]int{}, cancel: cancel, exited: make(chan struct{})}
	go func() {
		defer close(f.exited)
		defer end()
		for {
			u, err := next(ctx)
			if err == nil && u.Current {
				err = fmt.Errorf("a current value at %d from a watch from the start", u.Position)
			}
			var n int64
			if err == nil {
				n, err = strconv.ParseInt(string(u.Value), 10, 64)
			}
			f.mu.Lock()
			if err != nil {
				if ctx.Err() == nil {
					f.err = err
				}
				f.mu.Unlock()
				return
			}
			s := watchedStep{Position: u.Position, Key: string(u.Key), Count: n}
			if u.Window != nil {
				s.Start = u.Window.Start
			}
			p := u.Provenance.Partition
			f.got[p] = append(f.got[p], s)
			if f.hosts[p] == nil {
				f.hosts[p] = map[string]int{}
			}
			f.hosts[p][u.Provenance.Host+" "+u.Provenance.Role.String()]++
			f.mu.Unlock()
		}
	}()
	t.Cleanup(f.stop)
	return f
}

// stop ends the reading and waits for it.
func (f *watchFollower) stop() {
	f.cancel()
	<-f.exited
}

// snapshot returns how many updates each partition delivered, the latest
// count of each key (and window: Position and Count left zero), and the
// error that ended the watch.
func (f *watchFollower) snapshot() (counts map[int32]int, latest map[watchedStep]int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	counts, latest = map[int32]int{}, map[watchedStep]int64{}
	for p, steps := range f.got {
		counts[p] = len(steps)
		for _, s := range steps {
			latest[watchedStep{Key: s.Key, Start: s.Start}] = s.Count
		}
	}
	return counts, latest, f.err
}

// servedBy returns who served partition p's updates, as "host role".
func (f *watchFollower) servedBy(p int32) map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.hosts[p])
}

// committedWatchSteps reads a changelog partition with read-committed
// isolation from its start through position through, keeping the
// records step accepts.
func committedWatchSteps(t *testing.T, c *cluster, topic string, p int32, through int64, step func(r *kgo.Record) (watchedStep, bool)) []watchedStep {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.b.Addrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	require.NoError(t, err)
	defer cl.Close()
	rctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	var out []watchedStep
	for done := false; !done; {
		fs := cl.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "reading %s[%d] through %d", topic, p, through)
		fs.EachRecord(func(r *kgo.Record) {
			done = done || r.Offset >= through
			if r.Offset > through || r.Attrs.IsControl() {
				return
			}
			if s, ok := step(r); ok {
				out = append(out, s)
			}
		})
	}
	return out
}

// countOf decodes a timestamped count as the changelogs hold it.
func countOf(t *testing.T, value []byte) int64 {
	v, _ := statestore.SplitTimestamped(value)
	n, err := serde.Int64.Decode(v)
	require.NoError(t, err)
	return n
}

// checkAgainstChangelog requires that every partition's delivered
// sequence is the committed changelog's, positions strictly increasing.
func (f *watchFollower) checkAgainstChangelog(t *testing.T, c *cluster, topic string, step func(r *kgo.Record) (watchedStep, bool)) {
	t.Helper()
	f.stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NoError(t, f.err)
	for p, got := range f.got {
		for i := 1; i < len(got); i++ {
			require.Greater(t, got[i].Position, got[i-1].Position, "partition %d: positions strictly increase", p)
		}
		want := committedWatchSteps(t, c, topic, p, got[len(got)-1].Position, step)
		require.Equal(t, want, got, "partition %d: delivered sequence against the committed changelog", p)
		t.Logf("partition %d: %d updates, served by %v", p, len(got), f.hosts[p])
	}
}

// killAndWatchResume kills a partition's active with kill and waits
// until every partition of parts has delivered updates since: the watch
// went on past the death.
func (f *watchFollower) killAndWatchResume(t *testing.T, parts []int32, victim string, kill func()) {
	t.Helper()
	before, _, _ := f.snapshot()
	kill()
	waitFor(t, 2*settleTimeout, "every partition's updates after the kill of "+victim, func() (bool, string) {
		counts, _, err := f.snapshot()
		if err != nil {
			return false, err.Error()
		}
		var probs []string
		for _, p := range parts {
			if counts[p] <= before[p]+2 {
				probs = append(probs, fmt.Sprintf("partition %d: %d updates, %d before", p, counts[p], before[p]))
			}
		}
		return len(probs) == 0, strings.Join(probs, "; ")
	})
}

// A range watch over words of both partitions, from the start, through a
// kill -9 of partition 0's active: partition 0 goes on on its standby,
// active now, and partition 1 never stops.
func TestWatchRangeThroughActiveDeath(t *testing.T) {
	c := newCluster(t, 2)
	cfg := instanceConfig{standbys: 1, sessionTimeout: failoverSession, probing: time.Second, guarantee: runtime.ExactlyOnce}
	nodes := []*iqNode{c.startIQNode(t, "a", cfg), c.startIQNode(t, "b", cfg)}
	lay := c.iqWaitLayout(t, nodes, 1)

	// Words in the range [rw, rx) on both partitions, and one outside.
	var words []string
	perPart := map[int32]int{}
	for i := 0; perPart[0] < 2 || perPart[1] < 2; i++ {
		w := "rw" + strconv.Itoa(i)
		words = append(words, w)
		perPart[iqWordPartition(w, c.partitions)]++
	}
	feed := c.iqFeed(append(slices.Clone(words), "outside"), 30*time.Millisecond)
	defer func() {
		select {
		case <-feed.stop:
		default:
			feed.halt(t)
		}
	}()
	feed.waitBatches(t, 3)

	cl, err := iq.NewClient([]string{nodes[0].addr, nodes[1].addr}, iq.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	rw, err := cl.WatchRange(ctx(t), countsStore, "rw", "rx", iq.RangeWatchOptions{WatchOptions: iq.WatchOptions{From: iq.FromStart}})
	require.NoError(t, err)
	f := follow(t, rw.Next, rw.Close)
	waitFor(t, settleTimeout, "updates of both partitions", func() (bool, string) {
		counts, _, err := f.snapshot()
		return counts[0] > 3 && counts[1] > 3 && err == nil, fmt.Sprintf("%v updates, err %v", counts, err)
	})

	victim := lay[0].active
	f.killAndWatchResume(t, []int32{0, 1}, victim.name, victim.kill)
	served := f.servedBy(0)
	require.Contains(t, served, victim.addr+" active", "partition 0 served by its active first")
	require.Contains(t, served, lay[0].standbys[0].addr+" active", "partition 0 served by its new active after")

	final := feed.halt(t)
	waitFor(t, settleTimeout, "the watch at every word's final count", func() (bool, string) {
		_, latest, err := f.snapshot()
		if err != nil {
			return false, err.Error()
		}
		for _, w := range words {
			if latest[watchedStep{Key: w}] != final[w] {
				return false, fmt.Sprintf("%s at %d, want %d", w, latest[watchedStep{Key: w}], final[w])
			}
		}
		return true, ""
	})
	f.checkAgainstChangelog(t, c, changelogTopic("wc"), func(r *kgo.Record) (watchedStep, bool) {
		k := string(r.Key)
		if k < "rw" || k >= "rx" {
			return watchedStep{}, false
		}
		return watchedStep{Position: r.Offset, Key: k, Count: countOf(t, r.Value)}, true
	})
}

// windowFeeder produces lines of words to the windowed count's input in
// the background, their timestamps cycling over a few minutes, and counts
// what it produced per word and window start.
type windowFeeder struct {
	stop, exited chan struct{}

	mu       sync.Mutex
	produced map[watchedStep]int64 // Key and Start set
	batches  int
	err      error
}

func feedWindows(c *cluster, words []string, base int64, minutes int, every time.Duration) *windowFeeder {
	f := &windowFeeder{stop: make(chan struct{}), exited: make(chan struct{}), produced: map[watchedStep]int64{}}
	go func() {
		defer close(f.exited)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
			start := base + int64(i%minutes)*60_000
			r := &kgo.Record{Topic: iqwIn, Partition: int32(i) % c.partitions, Value: []byte(strings.Join(words, " ")), Timestamp: time.UnixMilli(start + int64(i%1000))}
			pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.cl.ProduceSync(pctx, r).FirstErr()
			cancel()
			f.mu.Lock()
			if err != nil {
				f.err = err
			} else {
				f.batches++
				for _, w := range words {
					f.produced[watchedStep{Key: w, Start: start}]++
				}
			}
			f.mu.Unlock()
		}
	}()
	return f
}

func (f *windowFeeder) halt(t *testing.T) map[watchedStep]int64 {
	t.Helper()
	close(f.stop)
	<-f.exited
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NoError(t, f.err)
	return f.produced
}

// iqwRoles returns which of nodes holds partition p of the window store
// as its active and which as a caught-up standby, nil for either missing.
func iqwRoles(nodes []*iqwNode, p int32) (active, standby *iqwNode) {
	for _, n := range nodes {
		for _, ri := range n.Queries().LocalReplicas() {
			if ri.Store != iqwStore || ri.Partition != p {
				continue
			}
			switch {
			case ri.Role == iq.RoleActive:
				active = n
			case ri.Role == iq.RoleStandby && ri.Lag == 0 && ri.Position > 0:
				standby = n
			}
		}
	}
	return active, standby
}

// A watch of a word's windows over three minutes, from the start, through
// a kill -9 of its partition's active: it goes on on the standby, active
// now, and never delivers the word's fourth minute or another word.
func TestWatchWindowsThroughActiveDeath(t *testing.T) {
	c := newCluster(t, 2)
	resp, err := c.adm.CreateTopics(ctx(t), c.partitions, -1, nil, iqwIn)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	dir := t.TempDir()
	nodes := []*iqwNode{startIQWindows(t, c, "a", dir+"/a"), startIQWindows(t, c, "b", dir+"/b")}

	// The watched word's windows over three minutes, and a fourth minute
	// outside the watch; another word beside it in every line.
	const base int64 = 1_700_000_040_000
	const word = "winword"
	feed := feedWindows(c, []string{word, "other"}, base, 4, 30*time.Millisecond)
	defer func() {
		select {
		case <-feed.stop:
		default:
			feed.halt(t)
		}
	}()
	cl, err := iq.NewClient([]string{nodes[0].addr, nodes[1].addr}, iq.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	kb, err := serde.String.Encode(word)
	require.NoError(t, err)
	var p int32
	var victim *iqwNode
	waitFor(t, 2*settleTimeout, "an active and a caught-up standby of the word's partition", func() (bool, string) {
		km, err := iq.KeyMetadataFor(iq.NewQuerier(nodes[0].Queries()), iqwStore, word, serde.String)
		if err != nil {
			return false, err.Error()
		}
		p = km.Partition
		active, standby := iqwRoles(nodes, p)
		victim = active
		return active != nil && standby != nil && km.Active == active.addr, fmt.Sprintf("partition %d: active %v, standby %v, routed to %+v", p, active != nil, standby != nil, km)
	})

	last := base + 2*60_000
	rw, err := cl.WatchWindows(ctx(t), iqwStore, word, kb, base, last, iq.WatchOptions{From: iq.FromStart})
	require.NoError(t, err)
	f := follow(t, rw.Next, rw.Close)
	waitFor(t, settleTimeout, "updates of the word's windows", func() (bool, string) {
		counts, _, err := f.snapshot()
		return counts[p] > 3 && err == nil, fmt.Sprintf("%d updates, err %v", counts[p], err)
	})

	f.killAndWatchResume(t, []int32{p}, victim.addr, func() {
		victim.srv.Close()
		victim.Kill()
	})
	served := f.servedBy(p)
	require.Contains(t, served, victim.addr+" active", "the killed active served the watch first")
	survivor := nodes[0]
	if survivor == victim {
		survivor = nodes[1]
	}
	require.Contains(t, served, survivor.addr+" active", "the survivor, active now, served it after")

	final := feed.halt(t)
	waitFor(t, settleTimeout, "the watch at every window's final count", func() (bool, string) {
		_, latest, err := f.snapshot()
		if err != nil {
			return false, err.Error()
		}
		for s, n := range final {
			inWatch := s.Key == word && s.Start <= last
			if inWatch && latest[s] != n {
				return false, fmt.Sprintf("window %d at %d, want %d", s.Start, latest[s], n)
			}
			if !inWatch && latest[s] != 0 {
				return false, fmt.Sprintf("an update of %q's window %d, outside the watch", s.Key, s.Start)
			}
		}
		return true, ""
	})
	prefix := word + "\x00\x01"
	f.checkAgainstChangelog(t, c, changelog.TopicName(iqwApp, iqwStore), func(r *kgo.Record) (watchedStep, bool) {
		rest, ok := strings.CutPrefix(string(r.Key), prefix)
		if !ok || len(rest) != 8 {
			return watchedStep{}, false
		}
		start := int64(binary.BigEndian.Uint64([]byte(rest)))
		if start < base || start > last {
			return watchedStep{}, false
		}
		return watchedStep{Position: r.Offset, Key: word, Start: start, Count: countOf(t, r.Value)}, true
	})
}
