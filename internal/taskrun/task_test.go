package taskrun

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

type sink struct{ out []graph.OutputRecord }

func (s *sink) Send(r graph.OutputRecord) error { s.out = append(s.out, r); return nil }

func countTopology(t *testing.T) *topology.Topology {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	s.GroupByKey(serde.String, serde.String).Count("counts").ToStream().To("out", serde.String, serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

func newActive(t *testing.T, topo *topology.Topology, stores []*StoreHandle, opened *int) (*Active, *sink) {
	out := &sink{}
	a, err := NewActive(Config{
		ID: task.ID{SubTopology: 0, Partition: 3}, AppID: "app", Topology: topo,
		Changelog: func(s string) string { return "app-" + s + "-changelog" },
		Open: func(task.ID, topology.StoreInfo) (statestore.Store, error) {
			*opened++
			return statestore.NewMemory(), nil
		},
		Stores: stores,
		Budget: cache.NewBudget(1 << 20),
		Sender: out,
	})
	require.NoError(t, err)
	return a, out
}

// feeder is a restored active task fed records of "in", partition 3, at
// increasing offsets, as the table and session tests below drive it.
type feeder struct {
	t   *testing.T
	a   *Active
	off int64
}

// restoredActive opens topo's task with fresh stores and restores it.
func restoredActive(t *testing.T, topo *topology.Topology) (*feeder, *sink) {
	t.Helper()
	opened := 0
	a, out := newActive(t, topo, nil, &opened)
	a.Restored()
	return &feeder{t: t, a: a}, out
}

// pipe processes one record at the next offset.
func (f *feeder) pipe(key string, value []byte, ts time.Time) {
	f.t.Helper()
	require.NoError(f.t, f.a.Process(graph.InputRecord{Topic: "in", Partition: 3, Offset: f.off, Key: []byte(key), Value: value, Timestamp: ts}))
	f.off++
}

// completeCommit completes a commit of every record piped so far.
func (f *feeder) completeCommit() {
	f.t.Helper()
	require.NoError(f.t, f.a.CompleteCommit(func(string, int32) (int64, bool) { return f.off, true }))
}

func TestActiveLifecycleCommitAndPromotion(t *testing.T) {
	topo := countTopology(t)
	opened := 0
	a, out := newActive(t, topo, nil, &opened)
	require.Equal(t, 1, opened)
	a.Restored()

	for off := range int64(3) {
		require.NoError(t, a.Process(graph.InputRecord{Topic: "in", Partition: 3, Offset: 10 + off, Key: []byte("k"), Value: []byte("v"), Timestamp: time.Unix(1, 0)}))
	}
	require.Empty(t, out.out, "with a record cache, table updates wait for the commit")
	require.NoError(t, a.Flush())
	require.Len(t, out.out, 1, "three updates of one key reach downstream once")
	n0, _ := serde.Int64.Decode(out.out[0].Value)
	require.Equal(t, int64(3), n0, "the latest value is forwarded")
	pend := a.PendingChangelog()
	require.Len(t, pend, 1)
	require.Equal(t, "app-counts-changelog", pend[0].Topic)
	require.Equal(t, int32(3), pend[0].Partition)
	require.Len(t, pend[0].Entries, 1, "three updates of one key collapse to one changelog record")

	h, _ := a.Store("counts")
	_, found, err := h.Inner.Get([]byte("k"))
	require.NoError(t, err)
	require.False(t, found, "nothing reaches the store before the commit completes")
	require.Error(t, a.CompleteCommit(func(string, int32) (int64, bool) { return 0, false }), "no acknowledged offset, no store write")
	require.NoError(t, a.CompleteCommit(func(topic string, p int32) (int64, bool) { return 41, topic == "app-counts-changelog" && p == 3 }))
	pos, err := h.Inner.Position()
	require.NoError(t, err)
	require.Equal(t, int64(42), pos, "the store records the position after the last acknowledged changelog record")
	v, found, err := h.Inner.Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, found)
	n, _ := serde.Int64.Decode(bareValue(v))
	require.Equal(t, int64(3), n)
	require.Equal(t, map[string]int64{"in": 13}, a.OffsetsToCommit())
	a.MarkCommitted(a.OffsetsToCommit())
	require.Empty(t, a.OffsetsToCommit())

	// Active → standby → active keeps the same open store.
	stores, err := a.Demote()
	require.NoError(t, err)
	sb, err := NewStandby(StandbyConfig{ID: task.ID{SubTopology: 0, Partition: 3}, Topology: topo, Stores: stores, Changelog: func(s string) string { return s }})
	require.NoError(t, err)
	require.Same(t, h.Inner, sb.Stores()[0].Inner)
	a2, _ := newActive(t, topo, sb.Release(), &opened)
	require.Equal(t, 1, opened, "promotion reopens nothing")
	h2, _ := a2.Store("counts")
	require.Same(t, h.Inner, h2.Inner)
	require.NoError(t, a2.Close(true))
	_, _, err = h.Inner.Get([]byte("k"))
	require.ErrorIs(t, err, statestore.ErrClosed)
}

// An aborted interval's table updates, held for the commit, go with its
// store writes: the next commit sends only what the replayed input
// produces.
func TestAbortDropsHeldTableUpdates(t *testing.T) {
	opened := 0
	a, out := newActive(t, countTopology(t), nil, &opened)
	a.Restored()
	process := func(off int64, key string) {
		t.Helper()
		require.NoError(t, a.Process(graph.InputRecord{Topic: "in", Partition: 3, Offset: off, Key: []byte(key), Value: []byte("v"), Timestamp: time.Unix(1, 0)}))
	}
	process(0, "a")
	process(1, "b")
	a.Abort()
	process(0, "a")
	require.NoError(t, a.Flush())
	require.Len(t, out.out, 1, "b's update was aborted and not replayed yet")
	require.Equal(t, "a", string(out.out[0].Key))
	n, _ := serde.Int64.Decode(out.out[0].Value)
	require.Equal(t, int64(1), n)
}

// A count's held updates collapse per key between commits, in the order
// keys were first updated, across commits that renumber the cache's keys.
func TestHeldUpdatesAcrossCommits(t *testing.T) {
	opened := 0
	a, out := newActive(t, countTopology(t), nil, &opened)
	a.Restored()
	off := int64(0)
	round := func(keys ...string) []string {
		t.Helper()
		for _, k := range keys {
			require.NoError(t, a.Process(graph.InputRecord{Topic: "in", Partition: 3, Offset: off, Key: []byte(k), Value: []byte("v"), Timestamp: time.Unix(1, 0)}))
			off++
		}
		out.out = nil
		require.NoError(t, a.Flush())
		a.PendingChangelog()
		require.NoError(t, a.CompleteCommit(func(string, int32) (int64, bool) { return off, true }))
		var got []string
		for _, r := range out.out {
			n, _ := serde.Int64.Decode(r.Value)
			got = append(got, fmt.Sprintf("%s=%d", r.Key, n))
		}
		return got
	}
	require.Equal(t, []string{"a=2", "b=1"}, round("a", "b", "a"))
	require.Equal(t, []string{"b=3", "c=1", "a=3"}, round("b", "c", "b", "a"))
	a.Abort()
	require.Equal(t, []string{"c=2"}, round("c"))
}

// countingStore counts Writes that reach the backing store.
type countingStore struct {
	statestore.Store
	writes int
}

func (c *countingStore) Write(e []statestore.Entry, pos int64) error {
	c.writes++
	return c.Store.Write(e, pos)
}

func TestCloseWritesOnlyCommittedWork(t *testing.T) {
	topo := countTopology(t)
	for _, clean := range []bool{true, false} {
		inner := &countingStore{Store: statestore.NewMemory()}
		a, err := NewActive(Config{
			ID: task.ID{SubTopology: 0, Partition: 0}, AppID: "app", Topology: topo,
			Changelog: func(s string) string { return s },
			Open:      func(task.ID, topology.StoreInfo) (statestore.Store, error) { return inner, nil },
			Budget:    cache.NewBudget(1 << 20),
			Sender:    &sink{},
		})
		require.NoError(t, err)
		a.Restored()
		require.NoError(t, a.Process(graph.InputRecord{Topic: "in", Key: []byte("k"), Value: []byte("v")}))
		require.NoError(t, a.Close(clean))
		require.Zero(t, inner.writes, "close (clean=%v) must not write uncommitted work: only a commit writes stores", clean)
		require.NoError(t, a.Close(clean), "closing twice is a no-op")
	}
}

func TestActiveConsumedOffsetsAcrossTopicsSkipAndAbort(t *testing.T) {
	b := topology.NewBuilder()
	merged := topology.Stream(b, "a", serde.String, serde.String).Merge(topology.Stream(b, "b", serde.String, serde.String))
	merged.To("out", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	opened := 0
	a, _ := newActive(t, topo, nil, &opened)
	a.Restored()
	rec := func(topic string, off int64) graph.InputRecord {
		return graph.InputRecord{Topic: topic, Partition: 3, Offset: off, Value: []byte("v")}
	}
	// Interleaved runs of two topics: each keeps its own offset.
	require.NoError(t, a.Process(rec("a", 5)))
	require.NoError(t, a.Process(rec("b", 7)))
	require.NoError(t, a.Process(rec("a", 6)))
	a.Skip(rec("b", 8))
	require.Equal(t, map[string]int64{"a": 7, "b": 9}, a.OffsetsToCommit())
	a.MarkCommitted(a.OffsetsToCommit())
	require.Empty(t, a.OffsetsToCommit())

	require.NoError(t, a.Process(rec("a", 7)))
	require.NoError(t, a.Process(rec("a", 8)))
	require.Equal(t, map[string]int64{"a": 9}, a.OffsetsToCommit(), "only topics that moved")
	a.Abort()
	require.Empty(t, a.OffsetsToCommit(), "an abort rewinds to the committed offsets")
	require.NoError(t, a.Process(rec("a", 7)))
	require.Equal(t, map[string]int64{"a": 8}, a.OffsetsToCommit(), "processing after an abort continues from the committed offsets")
	require.NoError(t, a.Process(rec("b", 9)))
	require.Equal(t, map[string]int64{"a": 8, "b": 10}, a.OffsetsToCommit())
}

// A task is let go of once: demoted, it hands its open stores on and
// neither a second demotion nor a close touches them again.
func TestActiveLetsGoOnce(t *testing.T) {
	topo := countTopology(t)
	opened := 0
	a, _ := newActive(t, topo, nil, &opened)
	a.Restored()
	stores, err := a.Demote()
	require.NoError(t, err)
	require.Len(t, stores, 1)
	again, err := a.Demote()
	require.Error(t, err, "a demoted task has no stores to hand on")
	require.Nil(t, again)
	require.NoError(t, a.Close(false), "closing a demoted task does nothing")
	require.NoError(t, stores[0].Inner.Put([]byte("k"), []byte("v")), "the stores handed on stay open")
	require.NoError(t, stores[0].Inner.Close())
}

// TestAbortRewindsWindowTime drives a windowed count with a grace period
// through commits and an abort as the exactly-once runtime does, over
// segmented stores as the runtime opens them: the input processed again
// after the abort must be judged by the time of the last commit, not by
// the aborted input's, so the results equal an uninterrupted run's and no
// record is dropped as late.
func TestAbortRewindsWindowTime(t *testing.T) {
	b := topology.NewBuilder()
	w := topology.TumblingWindows(10 * time.Second).Grace(2 * time.Second)
	topology.WindowedBy(topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String), w).
		Count("counts").ToStream().To("out", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	newTask := func() (*Active, *sink) {
		out := &sink{}
		a, err := NewActive(Config{
			ID: task.ID{SubTopology: 0, Partition: 0}, AppID: "app", Topology: topo,
			Changelog: func(s string) string { return "app-" + s + "-changelog" },
			Open: func(_ task.ID, info topology.StoreInfo) (statestore.Store, error) {
				if info.Windowed() {
					return statestore.NewSegmentedStore(statestore.NewMemory(), info.WindowOptions())
				}
				return statestore.NewMemory(), nil
			},
			Budget: cache.NewBudget(1 << 20),
			Sender: out,
		})
		require.NoError(t, err)
		a.Restored()
		return a, out
	}
	offset := int64(0)
	process := func(a *Active, times ...int64) {
		for _, ts := range times {
			require.NoError(t, a.Process(graph.InputRecord{Topic: "in", Offset: offset, Key: []byte("k"), Value: []byte("v"), Timestamp: time.UnixMilli(ts)}))
			offset++
		}
	}
	changelogOffset := int64(0)
	commit := func(a *Active) {
		require.NoError(t, a.Flush())
		for range a.PendingChangelog() {
			changelogOffset++
		}
		require.NoError(t, a.CompleteCommit(func(string, int32) (int64, bool) { return changelogOffset, true }))
		a.MarkCommitted(a.OffsetsToCommit())
	}

	want, wantOut := newTask()
	process(want, 1_000, 2_000)
	commit(want)
	process(want, 3_000, 60_000)
	commit(want)

	offset = 0
	got, gotOut := newTask()
	process(got, 1_000, 2_000)
	commit(got)
	sent := len(gotOut.out)
	process(got, 3_000, 60_000)
	require.NoError(t, got.Flush())
	gotOut.out = gotOut.out[:sent] // the aborted transaction's output
	got.Abort()
	offset = 2
	process(got, 3_000, 60_000)
	commit(got)

	require.Equal(t, wantOut.out, gotOut.out)
	require.Zero(t, got.graph.(graph.LateCounter).DroppedLate())
}

// bareValue is a table store's value without its timestamp.
func bareValue(b []byte) []byte {
	v, _ := statestore.SplitTimestamped(b)
	return v
}

// BeginCommit hands the writes of the stores its caller groups to the
// caller, with their positions, and writes nothing of them; Finish with an
// error leaves them pending for the next commit.
func TestActiveBeginCommitHandsOverGroupedStores(t *testing.T) {
	topo := countTopology(t)
	opened := 0
	a, _ := newActive(t, topo, nil, &opened)
	a.Restored()
	require.NoError(t, a.Process(graph.InputRecord{Topic: "in", Partition: 3, Offset: 10, Key: []byte("k"), Value: []byte("v"), Timestamp: time.Unix(1, 0)}))
	require.NoError(t, a.Flush())
	h, _ := a.Store("counts")
	last := func(topic string, p int32) (int64, bool) { return 41, topic == "app-counts-changelog" && p == 3 }
	all := func(statestore.Store) bool { return true }

	p, err := a.BeginCommit(last, all)
	require.NoError(t, err)
	require.Len(t, p.Writes, 1)
	require.Same(t, h.Inner, p.Writes[0].Store)
	require.Equal(t, int64(42), p.Writes[0].Position)
	require.Len(t, p.Writes[0].Entries, 1)
	pos, err := h.Inner.Position()
	require.NoError(t, err)
	require.Equal(t, statestore.NoPosition, pos, "BeginCommit leaves the grouped stores to its caller")
	require.Error(t, p.Finish(fmt.Errorf("disk full")))
	require.Len(t, h.Cache.Dirty(), 1, "a failed write stays pending")

	p, err = a.BeginCommit(last, all)
	require.NoError(t, err)
	require.Len(t, p.Writes, 1)
	w := p.Writes[0]
	require.NoError(t, w.Store.Write(w.Entries, w.Position))
	require.NoError(t, p.Finish(nil))
	require.Empty(t, h.Cache.Dirty())
	pos, err = h.Inner.Position()
	require.NoError(t, err)
	require.Equal(t, int64(42), pos)
}

// Through the record cache, a table's tombstone goes out only for a key the
// last commit left in its store, as Kafka Streams' caching store reads its
// underlying store for a tombstone at its flush: a key written and deleted
// within one interval sends nothing downstream.
func TestTableDropsTombstoneOfKeyWrittenAndDeletedWithinInterval(t *testing.T) {
	b := topology.NewBuilder()
	topology.Table(b, "in", serde.String, serde.String, "table").ToStream().To("out", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	f, out := restoredActive(t, topo)
	pipe := func(key string, value []byte) { t.Helper(); f.pipe(key, value, time.Unix(1, 0)) }
	commit := func() []string {
		t.Helper()
		out.out = nil
		require.NoError(t, f.a.Flush())
		f.completeCommit()
		var got []string
		for _, r := range out.out {
			got = append(got, fmt.Sprintf("%s=%s", r.Key, r.Value))
		}
		return got
	}
	pipe("kept", []byte("1"))
	require.Equal(t, []string{"kept=1"}, commit())
	pipe("kept", []byte("2"))
	pipe("kept", nil)
	pipe("new", []byte("3"))
	pipe("new", nil)
	require.Equal(t, []string{"kept="}, commit(), "only the key the store held goes out, as a tombstone")
}

// A key written and deleted within one interval, absent from the store at
// the last commit, leaves nothing in the table's changelog either, as Kafka
// Streams' caching store writes neither its underlying store nor the
// changelog behind it for a key with neither a new nor an old value:
// whether the table tells from its committed store (no old values) or
// from the old value it sends (a grouping downstream asks for them).
func TestTableWritesNoChangelogTombstoneForKeyWrittenAndDeletedWithinInterval(t *testing.T) {
	plain := func(b *topology.Builder) topology.KTable[string, string] {
		tb := topology.Table(b, "in", serde.String, serde.String, "table")
		tb.ToStream().To("out", serde.String, serde.String)
		return tb
	}
	for name, build := range map[string]func(*topology.Builder){
		"committed store": func(b *topology.Builder) { plain(b) },
		"old values": func(b *topology.Builder) {
			topology.GroupTableBy(plain(b), func(k, v string) (string, string) { return v, k }, "byValue", serde.String, serde.String).Count("counts")
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := topology.NewBuilder()
			build(b)
			topo, err := b.Build()
			require.NoError(t, err)
			f, _ := restoredActive(t, topo)
			pipe := func(key string, value []byte) { t.Helper(); f.pipe(key, value, time.Unix(1, 0)) }
			commit := func() []string {
				t.Helper()
				require.NoError(t, f.a.Flush())
				var got []string
				for _, w := range f.a.PendingChangelog() {
					if w.Store != "table" {
						continue
					}
					for _, e := range w.Entries {
						got = append(got, fmt.Sprintf("%s=%s", e.Key, bareValue(e.Value)))
					}
				}
				f.completeCommit()
				return got
			}
			pipe("kept", []byte("1"))
			require.Equal(t, []string{"kept=1"}, commit())
			pipe("kept", []byte("2"))
			pipe("kept", nil)
			pipe("new", []byte("3"))
			pipe("new", nil)
			pipe("put", []byte("4"))
			require.Equal(t, []string{"kept=", "put=4"}, commit(), "only the key the store held is deleted")
			pipe("new", []byte("5"))
			pipe("new", nil)
			require.Empty(t, commit(), "nothing to write, nothing sent")
			pipe("new", []byte("6"))
			require.Equal(t, []string{"new=6"}, commit(), "a skipped key is written again later")
		})
	}
}

// Sessions merged away within the interval they were made in leave no
// tombstone in the session store's changelog, as Kafka Streams' caching
// session store writes nothing for a session absent from its store.
func TestSessionMergeWritesNoChangelogTombstoneForSessionMadeWithinInterval(t *testing.T) {
	b := topology.NewBuilder()
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	topology.SessionWindowedBy(g, topology.NewSessionWindows(10*time.Millisecond)).Count("sessions").
		ToStream().Peek(func(topology.Windowed[string], int64) {})
	topo, err := b.Build()
	require.NoError(t, err)
	f, _ := restoredActive(t, topo)
	pipe := func(ms int64) { t.Helper(); f.pipe("k", []byte("v"), time.UnixMilli(ms)) }
	commit := func() (puts, dels int) {
		t.Helper()
		require.NoError(t, f.a.Flush())
		for _, w := range f.a.PendingChangelog() {
			for _, e := range w.Entries {
				if e.Deleted() {
					dels++
				} else {
					puts++
				}
			}
		}
		f.completeCommit()
		return puts, dels
	}
	pipe(100)
	pipe(105) // merges [100,100] away, within the interval
	puts, dels := commit()
	require.Equal(t, 1, puts, "the merged session [100,105]")
	require.Zero(t, dels, "[100,100] never reached the store")
	pipe(110) // merges the committed [100,105] away
	puts, dels = commit()
	require.Equal(t, 1, puts)
	require.Equal(t, 1, dels, "[100,105] was committed, so its delete is logged")
}

// A commit whose only writes to a logged store are skipped tombstones
// sends nothing to its changelog and still releases them, so that a table
// whose keys never outlive an interval does not fill the cache budget.
func TestCommitReleasesSkippedTombstones(t *testing.T) {
	b := topology.NewBuilder()
	topology.Table(b, "in", serde.String, serde.String, "table").ToStream().To("out", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	budget := cache.NewBudget(1 << 20)
	a, err := NewActive(Config{
		ID: task.ID{SubTopology: 0, Partition: 3}, AppID: "app", Topology: topo,
		Changelog: func(s string) string { return "app-" + s + "-changelog" },
		Open: func(task.ID, topology.StoreInfo) (statestore.Store, error) {
			return statestore.NewMemory(), nil
		},
		Budget: budget,
		Sender: &sink{},
	})
	require.NoError(t, err)
	a.Restored()
	for off, v := range [][]byte{[]byte("1"), nil} {
		require.NoError(t, a.Process(graph.InputRecord{Topic: "in", Partition: 3, Offset: int64(off), Key: []byte("k"), Value: v, Timestamp: time.Unix(1, 0)}))
	}
	require.NoError(t, a.Flush())
	require.Empty(t, a.PendingChangelog())
	require.NoError(t, a.CompleteCommit(func(string, int32) (int64, bool) { return 0, false }))
	require.Zero(t, budget.Used(), "the skipped tombstone is released")
}
