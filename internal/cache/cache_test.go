package cache

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/statestore"
)

// recordingStore wraps a statestore.Store and records its Write calls.
type recordingStore struct {
	statestore.Store
	mu       sync.Mutex
	writes   []recordedWrite
	failNext error
}

type recordedWrite struct {
	entries  []statestore.Entry
	position int64
}

func (r *recordingStore) Write(entries []statestore.Entry, position int64) error {
	r.mu.Lock()
	err := r.failNext
	r.failNext = nil
	if err == nil {
		r.writes = append(r.writes, recordedWrite{slices.Clone(entries), position})
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return r.Store.Write(entries, position)
}

func newTestCache(t *testing.T, budget *Budget) (*Store, *recordingStore) {
	inner := &recordingStore{Store: statestore.NewMemory()}
	t.Cleanup(func() { _ = inner.Close() })
	return New(inner, budget), inner
}

func entryStrings(es []statestore.Entry) []kv {
	out := make([]kv, len(es))
	for i, e := range es {
		v := string(e.Value)
		if e.Deleted() {
			v = "<tombstone>"
		}
		out[i] = kv{string(e.Key), v}
	}
	return out
}

func TestCacheCollapsesWrites(t *testing.T) {
	c, inner := newTestCache(t, nil)
	put(t, c, "b", "1", "b", "2", "a", "x")
	require.NoError(t, c.Delete([]byte("c")))
	require.NoError(t, c.Delete([]byte("a")))
	put(t, c, "c", "back")
	require.Equal(t, 3, c.DirtyLen())
	require.Equal(t, []kv{{"a", "<tombstone>"}, {"b", "2"}, {"c", "back"}}, entryStrings(c.Dirty()))
	require.Empty(t, inner.writes, "the cache never writes on its own")
	v, found, err := c.Get([]byte("b"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "2", string(v))
}

func TestCacheTombstonesHideInnerKeys(t *testing.T) {
	c, inner := newTestCache(t, nil)
	put(t, inner, "a", "1", "b", "2", "c", "3")
	require.NoError(t, c.Delete([]byte("b")))
	_, found, err := c.Get([]byte("b"))
	require.NoError(t, err)
	require.False(t, found)
	v, found, err := c.Get([]byte("a"))
	require.NoError(t, err)
	require.True(t, found, "reads fall through to the inner store")
	require.Equal(t, "1", string(v))
	require.Equal(t, []kv{{"a", "1"}, {"c", "3"}}, collectAll(t, c))
	n, err := c.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
}

func TestCacheMergedRange(t *testing.T) {
	c, inner := newTestCache(t, nil)
	put(t, inner, "a", "inner-a", "c", "inner-c", "e", "inner-e", "g", "inner-g")
	put(t, c, "b", "dirty-b", "c", "dirty-c", "d", "dirty-d", "f", "dirty-f", "h", "dirty-h")
	require.NoError(t, c.Delete([]byte("e")))
	require.NoError(t, c.Delete([]byte("g")))
	require.NoError(t, c.Delete([]byte("zz"))) // tombstone for an absent key, at the end

	cases := []struct {
		name     string
		from, to string
		want     []kv
	}{
		{"all", "", "", []kv{{"a", "inner-a"}, {"b", "dirty-b"}, {"c", "dirty-c"}, {"d", "dirty-d"}, {"f", "dirty-f"}, {"h", "dirty-h"}}},
		{"middle", "b", "f", []kv{{"b", "dirty-b"}, {"c", "dirty-c"}, {"d", "dirty-d"}}},
		{"only tombstoned", "e", "f", nil},
		{"tail", "f", "", []kv{{"f", "dirty-f"}, {"h", "dirty-h"}}},
		{"head", "", "b", []kv{{"a", "inner-a"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var from, to []byte
			if tc.from != "" {
				from = []byte(tc.from)
			}
			if tc.to != "" {
				to = []byte(tc.to)
			}
			it, err := c.Range(from, to)
			require.Equal(t, tc.want, collect(t, it, err))
		})
	}
}

func TestCacheBudgetAccounting(t *testing.T) {
	budget := NewBudget(1000)
	c1, _ := newTestCache(t, budget)
	c2, _ := newTestCache(t, budget)
	require.Zero(t, budget.Used())
	require.False(t, budget.Full())

	put(t, c1, "k", "abc")
	require.Equal(t, int64(1+3+cacheEntryOverhead), budget.Used())
	put(t, c1, "k", "abcde") // same key: only the value growth is charged
	require.Equal(t, int64(1+5+cacheEntryOverhead), budget.Used())
	require.NoError(t, c1.Delete([]byte("k"))) // tombstone: value bytes released
	require.Equal(t, int64(1+cacheEntryOverhead), budget.Used())
	c1Bytes := budget.Used()

	put(t, c2, "big", string(make([]byte, 900)))
	require.Equal(t, c1Bytes+3+900+cacheEntryOverhead, budget.Used())
	require.True(t, budget.Full(), "two stores share one budget")

	require.NoError(t, c2.Commit(5))
	require.Equal(t, c1Bytes, budget.Used(), "commit releases only its own bytes")
	require.False(t, budget.Full())
	c1.Discard()
	require.Zero(t, budget.Used())

	zero := NewBudget(0)
	require.False(t, zero.Full())
	c3, _ := newTestCache(t, zero)
	put(t, c3, "k", "v")
	require.True(t, zero.Full(), "a zero budget is full once anything is dirty")

	var unbounded *Budget
	require.False(t, unbounded.Full())
	require.Zero(t, unbounded.Used())
}

func TestCacheCommit(t *testing.T) {
	c, inner := newTestCache(t, NewBudget(1<<20))
	put(t, inner, "stale", "old")

	require.NoError(t, c.Commit(1))
	require.Empty(t, inner.writes, "nothing dirty: no write, no position")
	pos, err := inner.Position()
	require.NoError(t, err)
	require.Equal(t, statestore.NoPosition, pos)

	put(t, c, "z", "26", "a", "1", "m", "13", "a", "one")
	require.NoError(t, c.Delete([]byte("stale")))
	dirty := c.Dirty()
	require.NoError(t, c.Commit(17))
	require.Len(t, inner.writes, 1)
	require.Equal(t, int64(17), inner.writes[0].position)
	require.Equal(t, entryStrings(dirty), entryStrings(inner.writes[0].entries))
	require.Equal(t, []kv{{"a", "one"}, {"m", "13"}, {"stale", "<tombstone>"}, {"z", "26"}}, entryStrings(inner.writes[0].entries))
	require.Zero(t, c.DirtyLen())
	require.Empty(t, c.Dirty())
	require.Equal(t, []kv{{"a", "one"}, {"m", "13"}, {"z", "26"}}, collectAll(t, inner))
	pos, err = inner.Position()
	require.NoError(t, err)
	require.Equal(t, int64(17), pos)

	// Entries handed out by Dirty are never modified afterwards.
	require.Equal(t, "one", string(dirty[0].Value))
	put(t, c, "a", "uno")
	require.Equal(t, "one", string(dirty[0].Value))
}

func TestCacheCommitFailureKeepsDirty(t *testing.T) {
	budget := NewBudget(1 << 20)
	c, inner := newTestCache(t, budget)
	put(t, c, "a", "1")
	used := budget.Used()
	boom := errors.New("boom")
	inner.failNext = boom
	require.ErrorIs(t, c.Commit(3), boom)
	require.Equal(t, 1, c.DirtyLen())
	require.Equal(t, used, budget.Used())
	require.NoError(t, c.Commit(3))
	require.Zero(t, budget.Used())
}

func TestCacheBeginCommit(t *testing.T) {
	budget := NewBudget(1 << 20)
	c, inner := newTestCache(t, budget)
	entries, done := c.BeginCommit()
	require.Empty(t, entries, "nothing dirty: nothing to write")
	require.Nil(t, done)

	put(t, c, "b", "2", "a", "1")
	entries, done = c.BeginCommit()
	require.Equal(t, []kv{{"a", "1"}, {"b", "2"}}, entryStrings(entries))
	// The caller writes the entries; until done, readers see them through
	// the cache and writers wait.
	require.NoError(t, inner.Store.Write(entries, 5))
	written := make(chan error)
	go func() { written <- c.Put([]byte("c"), []byte("3")) }()
	select {
	case <-written:
		t.Fatal("a Put went through while the commit's write was being made")
	case <-time.After(50 * time.Millisecond):
	}
	v, found, err := c.Get([]byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "1", string(v))
	done(errors.New("boom"))
	require.NoError(t, <-written)
	require.Equal(t, 3, c.DirtyLen(), "a failed write leaves the entries dirty")

	entries, done = c.BeginCommit()
	require.Len(t, entries, 3)
	require.NoError(t, inner.Store.Write(entries, 6))
	done(nil)
	require.Zero(t, c.DirtyLen())
	require.Zero(t, budget.Used())
	require.Empty(t, inner.writes, "BeginCommit leaves the write to its caller")
	require.Equal(t, []kv{{"a", "1"}, {"b", "2"}, {"c", "3"}}, collectAll(t, inner))
}

func TestCacheDiscard(t *testing.T) {
	budget := NewBudget(1 << 20)
	c, inner := newTestCache(t, budget)
	put(t, inner, "a", "committed")
	put(t, c, "a", "dirty", "b", "dirty")
	c.Discard()
	require.Zero(t, budget.Used())
	require.Empty(t, c.Dirty())
	require.NoError(t, c.Commit(9))
	require.Empty(t, inner.writes)
	require.Equal(t, []kv{{"a", "committed"}}, collectAll(t, c))
}

// An open iterator keeps its view while the cache is written and committed.
func TestCacheIteratorSnapshot(t *testing.T) {
	c, inner := newTestCache(t, nil)
	put(t, inner, "a", "1")
	put(t, c, "b", "2", "c", "3")
	it, err := c.All()
	require.NoError(t, err)
	require.True(t, it.Next())
	require.Equal(t, "a", string(it.Key()))

	put(t, c, "b", "changed", "bb", "new")
	require.NoError(t, c.Delete([]byte("c")))
	require.NoError(t, c.Commit(1))
	put(t, c, "d", "4")

	var rest []kv
	for it.Next() {
		rest = append(rest, kv{string(it.Key()), string(it.Value())})
	}
	require.NoError(t, it.Close())
	require.Equal(t, []kv{{"b", "2"}, {"c", "3"}}, rest)
	require.Equal(t, []kv{{"a", "1"}, {"b", "changed"}, {"bb", "new"}, {"d", "4"}}, collectAll(t, c))
}

// Whatever was handed out — Dirty's slice, an open iterator, a value from
// Get — stays as it was while the cache is written, committed and its
// slots reused, and a caller writing into a Get result changes nothing.
func TestCacheHandedOutDataIsIsolated(t *testing.T) {
	c, _ := newTestCache(t, NewBudget(1<<20))
	put(t, c, "b", "2", "a", "1")
	dirty := c.Dirty()
	it, err := c.Range([]byte("a"), nil)
	require.NoError(t, err)
	got, found, err := c.Get([]byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	got[0] = 'X'

	require.NoError(t, c.Commit(1))
	put(t, c, "c", "3", "a", "one", "b", "two") // reuses the cleared slots
	require.NoError(t, c.Delete([]byte("d")))

	require.Equal(t, []kv{{"a", "1"}, {"b", "2"}}, entryStrings(dirty))
	require.Equal(t, []kv{{"a", "1"}, {"b", "2"}}, collect(t, it, nil))
	require.Equal(t, []kv{{"a", "one"}, {"b", "two"}, {"c", "3"}, {"d", "<tombstone>"}}, entryStrings(c.Dirty()))
	require.Equal(t, []kv{{"a", "one"}, {"b", "two"}, {"c", "3"}}, collectAll(t, c))
}

// An empty value is a put, not a tombstone, in the cache and after commit.
func TestCacheEmptyValue(t *testing.T) {
	c, inner := newTestCache(t, nil)
	require.NoError(t, c.Put([]byte("k"), []byte{}))
	require.ErrorIs(t, c.Put([]byte("n"), nil), statestore.ErrNilValue)
	check := func(s statestore.ReadWriter) {
		t.Helper()
		v, found, err := s.Get([]byte("k"))
		require.NoError(t, err)
		require.True(t, found)
		require.NotNil(t, v)
		require.Empty(t, v)
		require.Equal(t, []kv{{"k", ""}}, collectAll(t, s))
	}
	check(c)
	require.Equal(t, []kv{{"k", ""}}, entryStrings(c.Dirty()))
	require.NoError(t, c.Commit(1))
	check(inner)
	check(c)
}

// A dirty set larger than what a commit keeps for reuse is dropped whole;
// the cache keeps working the same afterwards.
func TestCacheLargeDirtySet(t *testing.T) {
	budget := NewBudget(64 << 20)
	c, inner := newTestCache(t, budget)
	n := maxReusedEntries + 10
	for i := range n {
		require.NoError(t, c.Put(fmt.Appendf(nil, "k%06d", i), []byte("v")))
	}
	require.Equal(t, n, c.DirtyLen())
	require.NoError(t, c.Commit(1))
	require.Zero(t, budget.Used())
	count, err := inner.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(n), count)

	put(t, c, "k000001", "new")
	require.GreaterOrEqual(t, cap(c.entries), n, "made again at the size the commit released")
	require.NoError(t, c.Delete([]byte("k000002")))
	require.Equal(t, []kv{{"k000001", "new"}, {"k000002", "<tombstone>"}}, entryStrings(c.Dirty()))
	it, err := c.Range([]byte("k000000"), []byte("k000003"))
	require.Equal(t, []kv{{"k000000", "v"}, {"k000001", "new"}}, collect(t, it, err))
}

// A commit releases slots a round left mostly empty, so a store that once
// took a burst of new keys does not keep room for it while it takes few.
func TestCacheReleasesSlotsARoundLeftEmpty(t *testing.T) {
	c, _ := newTestCache(t, NewBudget(64<<20))
	round := func(n int, pos int64) {
		t.Helper()
		for i := range n {
			require.NoError(t, c.Put(fmt.Appendf(nil, "k%06d", i), []byte("v")))
		}
		require.NoError(t, c.Commit(pos))
	}
	round(3*maxReusedEntries, 1) // released: larger than maxReusedEntries
	round(10, 2)                 // made at the burst's size, then released
	put(t, c, "k000001", "w")
	require.Less(t, cap(c.entries), 100, "slots of the burst two rounds ago")

	round(1000, 3) // a steady round keeps its slots
	kept := cap(c.entries)
	require.GreaterOrEqual(t, kept, 1000)
	round(900, 4)
	put(t, c, "k000001", "x")
	require.Equal(t, kept, cap(c.entries), "slots of a round that filled more than half were kept")
	require.Equal(t, []kv{{"k000001", "x"}}, entryStrings(c.Dirty()))
}

// Random operations against a model, committing and discarding now and
// then, with an iterator snapshot checked against the model of its time.
func TestCacheRandomAgainstModel(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			inner := b.open(t)
			c := New(inner, NewBudget(1<<20))
			r := rand.New(rand.NewPCG(5, 6))
			committed := map[string]string{}
			view := map[string]string{}
			type pending struct {
				it   statestore.Iterator
				want []kv
			}
			var open []pending
			sorted := func(m map[string]string) []kv {
				out := make([]kv, 0, len(m))
				for k, v := range m {
					out = append(out, kv{k, v})
				}
				slices.SortFunc(out, func(a, b kv) int { return bytes.Compare([]byte(a.k), []byte(b.k)) })
				return out
			}
			for step := 0; step < 2000; step++ {
				k := fmt.Sprintf("%02d", r.IntN(40))
				switch op := r.IntN(100); {
				case op < 40:
					v := fmt.Sprint(step)
					require.NoError(t, c.Put([]byte(k), []byte(v)))
					view[k] = v
				case op < 50:
					want, ok := view[k]
					require.NoError(t, c.Update([]byte(k), func(old []byte, found bool) ([]byte, error) {
						require.Equal(t, ok, found)
						require.Equal(t, want, string(old))
						return []byte(string(old) + "+"), nil
					}))
					view[k] = want + "+"
				case op < 75:
					require.NoError(t, c.Delete([]byte(k)))
					delete(view, k)
				case op < 85:
					got, found, err := c.Get([]byte(k))
					require.NoError(t, err)
					want, ok := view[k]
					require.Equal(t, ok, found)
					require.Equal(t, want, string(got))
				case op < 90:
					require.NoError(t, c.Commit(int64(step)))
					committed = maps(view)
				case op < 92:
					c.Discard()
					view = maps(committed)
				case op < 96:
					it, err := c.All()
					require.NoError(t, err)
					open = append(open, pending{it, sorted(view)})
				default:
					if len(open) > 0 {
						p := open[0]
						open = open[1:]
						require.Equal(t, p.want, collect(t, p.it, nil))
					}
				}
			}
			for _, p := range open {
				require.Equal(t, p.want, collect(t, p.it, nil))
			}
			require.Equal(t, sorted(view), collectAll(t, c))
			require.NoError(t, c.Commit(1<<40))
			require.Equal(t, sorted(view), collectAll(t, inner))
		})
	}
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Readers on other goroutines run against the stream thread's writes and
// commits (meant for -race).
func TestCacheConcurrentReaders(t *testing.T) {
	c, _ := newTestCache(t, NewBudget(1<<20))
	stop := make(chan struct{})
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if _, _, err := c.Get([]byte("k05")); err != nil {
					errs <- err
					return
				}
				it, err := c.All()
				if err != nil {
					errs <- err
					return
				}
				var prev []byte
				for it.Next() {
					if prev != nil && bytes.Compare(prev, it.Key()) >= 0 {
						errs <- fmt.Errorf("out of order: %q then %q", prev, it.Key())
						_ = it.Close()
						return
					}
					prev = append(prev[:0], it.Key()...)
				}
				if err := it.Close(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 3000 && time.Now().Before(deadline); i++ {
		k := fmt.Appendf(nil, "k%02d", i%20)
		if i%3 == 0 {
			require.NoError(t, c.Delete(k))
		} else {
			require.NoError(t, c.Put(k, fmt.Appendf(nil, "%d", i)))
		}
		if i%50 == 0 {
			require.NoError(t, c.Commit(int64(i)))
		}
	}
	close(stop)
	wg.Wait()
	for r := 0; r < 2; r++ {
		require.NoError(t, <-errs)
	}
}

// BenchmarkCachedStoreCount is the word-count pattern on the processing
// path: read a key's count, write it back incremented, over a few thousand
// hot keys, committing every 100,000 records.
func BenchmarkCachedStoreCount(b *testing.B) {
	c := New(statestore.NewMemory(), NewBudget(64<<20))
	keys := make([][]byte, 5000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "word%d", i*7919)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[(i*31)%len(keys)]
		v, _, err := c.Get(k)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Put(k, append(v[:0:0], byte(len(v)))); err != nil {
			b.Fatal(err)
		}
		if i%100_000 == 99_999 {
			if err := c.Commit(int64(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestCacheUpdate(t *testing.T) {
	budget := NewBudget(1 << 20)
	c, _ := newTestCache(t, budget)
	incr := func(old []byte, found bool) ([]byte, error) {
		if !found {
			return []byte{1}, nil
		}
		return []byte{old[0] + 1}, nil
	}
	require.NoError(t, c.Update([]byte("k"), incr))
	require.NoError(t, c.Update([]byte("k"), incr))
	got, found, err := c.Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, []byte{2}, got, "the second update sees the first one's dirty value")
	require.Equal(t, int64(1+1+cacheEntryOverhead), budget.Used(), "charged like a put")
	require.Equal(t, 1, c.DirtyLen())

	require.NoError(t, c.Commit(7))
	require.NoError(t, c.Update([]byte("k"), incr))
	require.Equal(t, []statestore.Entry{{Key: []byte("k"), Value: []byte{3}}}, c.Dirty(), "an update of a clean key reads the inner store")

	require.NoError(t, c.Delete([]byte("k")))
	require.NoError(t, c.Update([]byte("k"), incr))
	require.Equal(t, []statestore.Entry{{Key: []byte("k"), Value: []byte{1}}}, c.Dirty(), "a tombstone reads as absent")

	boom := errors.New("boom")
	require.ErrorIs(t, c.Update([]byte("x"), func([]byte, bool) ([]byte, error) { return nil, boom }), boom)
	require.ErrorIs(t, c.Update([]byte("x"), func([]byte, bool) ([]byte, error) { return nil, nil }), statestore.ErrNilValue)
	_, found, err = c.Get([]byte("x"))
	require.NoError(t, err)
	require.False(t, found, "a failed update writes nothing")
	require.Equal(t, 1, c.DirtyLen())

}

// UpdateAt numbers keys by first write since the last commit or discard,
// and hands out the cache's own copy of the key.
func TestUpdateAtSlots(t *testing.T) {
	c := New(statestore.NewMemory(), NewBudget(1<<20))
	set := func(v string) func([]byte, bool) ([]byte, error) {
		return func([]byte, bool) ([]byte, error) { return []byte(v), nil }
	}
	at := func(key, v string) (int, string) {
		t.Helper()
		kb := []byte(key)
		slot, stored, err := c.UpdateAt(kb, set(v))
		require.NoError(t, err)
		kb[0] = 'x' // the cache copied it
		return slot, string(stored)
	}
	slot, stored := at("a", "1")
	require.Equal(t, 0, slot)
	require.Equal(t, "a", stored)
	slot, _ = at("b", "1")
	require.Equal(t, 1, slot)
	slot, stored = at("a", "2")
	require.Equal(t, 0, slot)
	require.Equal(t, "a", stored)
	require.NoError(t, c.Commit(1))
	slot, _ = at("b", "2")
	require.Equal(t, 0, slot)
	c.Discard()
	slot, _ = at("a", "3")
	require.Equal(t, 0, slot)
	_, _, err := c.UpdateAt([]byte("c"), func([]byte, bool) ([]byte, error) { return nil, errors.New("no") })
	require.Error(t, err)
	slot, _ = at("c", "1")
	require.Equal(t, 1, slot, "a failed update takes no slot")
}

// EntriesLeft counts the new entries a budget still has room for at the
// least each is charged, and says when no budget bounds anything.
func TestBudgetEntriesLeft(t *testing.T) {
	budget := NewBudget(10 * cacheEntryOverhead)
	n, bounded := budget.EntriesLeft()
	require.True(t, bounded)
	require.Equal(t, 10, n)
	c, _ := newTestCache(t, budget)
	put(t, c, "k1", "v") // 3 bytes beyond the overhead
	n, _ = budget.EntriesLeft()
	require.Equal(t, 8, n, "one entry and its key and value bytes taken")
	for i := range 9 {
		put(t, c, "x"+strconv.Itoa(i), "")
	}
	require.True(t, budget.Full())
	n, bounded = budget.EntriesLeft()
	require.True(t, bounded)
	require.Zero(t, n, "a full budget has room for none")
	require.NoError(t, c.Commit(1))
	n, _ = budget.EntriesLeft()
	require.Equal(t, 10, n, "a commit gives the room back")

	for _, b := range []*Budget{nil, NewBudget(0)} {
		_, bounded := b.EntriesLeft()
		require.False(t, bounded)
	}
}

// Ranges read between writes, over enough dirty keys that the cache's key
// order splits into many blocks: every range, and Dirty, match a model,
// and an iterator keeps what it saw when it was made.
func TestCacheOrderedRangesAgainstModel(t *testing.T) {
	inner := statestore.NewMemory()
	c := New(inner, NewBudget(64<<20))
	r := rand.New(rand.NewPCG(7, 8))
	view := map[string]string{}
	key := func() string { return fmt.Sprintf("%05d", r.IntN(20_000)) }
	want := func(from, to string) []kv {
		var out []kv
		for k, v := range view {
			if (from == "" || k >= from) && (to == "" || k < to) {
				out = append(out, kv{k, v})
			}
		}
		slices.SortFunc(out, func(a, b kv) int { return bytes.Compare([]byte(a.k), []byte(b.k)) })
		return out
	}
	bound := func(s string) []byte {
		if s == "" {
			return nil
		}
		return []byte(s)
	}
	var held statestore.Iterator
	var heldWant []kv
	for step := 0; step < 15_000; step++ {
		switch op := r.IntN(1000); {
		case op < 550:
			k, v := key(), fmt.Sprint(step)
			require.NoError(t, c.Put([]byte(k), []byte(v)))
			view[k] = v
		case op < 650:
			k := key()
			require.NoError(t, c.Delete([]byte(k)))
			delete(view, k)
		case op < 990:
			// Mostly the short ranges windows and joins read.
			lo := r.IntN(20_000)
			from, to := fmt.Sprintf("%05d", lo), fmt.Sprintf("%05d", lo+r.IntN(300))
			switch r.IntN(50) {
			case 0:
				from = ""
			case 1:
				to = ""
			}
			it, err := c.Range(bound(from), bound(to))
			got := collect(t, it, err)
			require.Equal(t, want(from, to), got, "step %d range [%q, %q)", step, from, to)
		case op < 995:
			if held != nil {
				require.Equal(t, heldWant, collect(t, held, nil), "step %d", step)
			}
			from := key()
			it, err := c.Range([]byte(from), nil)
			require.NoError(t, err)
			held, heldWant = it, want(from, "")
		case op < 998:
			d := c.Dirty()
			require.True(t, slices.IsSortedFunc(d, func(a, b statestore.Entry) int { return bytes.Compare(a.Key, b.Key) }))
			require.Equal(t, c.DirtyLen(), len(d))
		default:
			require.NoError(t, c.Commit(int64(step)))
		}
	}
	if held != nil {
		require.Equal(t, heldWant, collect(t, held, nil))
	}
	require.NoError(t, c.Commit(1<<40))
	require.Equal(t, want("", ""), collectAll(t, inner))
}

func TestCacheSkipTombstone(t *testing.T) {
	c, inner := newTestCache(t, NewBudget(1<<20))
	put(t, inner, "kept", "old")

	// "gone" was written and deleted within the interval, absent below:
	// its tombstone is skipped; "kept"'s tombstone and the puts are not.
	put(t, c, "gone", "1", "b", "2")
	require.NoError(t, c.Delete([]byte("gone")))
	require.NoError(t, c.Delete([]byte("kept")))
	c.SkipTombstone([]byte("gone"))
	c.SkipTombstone([]byte("gone"))
	c.SkipTombstone([]byte("b")) // a put: not skipped
	require.Equal(t, []kv{{"b", "2"}, {"kept", "<tombstone>"}}, entryStrings(c.Dirty()))
	require.Equal(t, 2, c.DirtyLen())
	_, found, err := c.Get([]byte("gone"))
	require.NoError(t, err)
	require.False(t, found)
	require.Equal(t, []kv{{"b", "2"}}, collectAll(t, c))
	require.NoError(t, c.Commit(5))
	require.Len(t, inner.writes, 1)
	require.Equal(t, []kv{{"b", "2"}, {"kept", "<tombstone>"}}, entryStrings(inner.writes[0].entries))

	// A write after the skip makes the key's entry dirty again.
	put(t, c, "x", "1")
	require.NoError(t, c.Delete([]byte("x")))
	c.SkipTombstone([]byte("x"))
	put(t, c, "x", "2")
	require.Equal(t, []kv{{"x", "2"}}, entryStrings(c.Dirty()))
	require.NoError(t, c.Commit(6))

	// Skipped tombstones alone write nothing, and leave the cache empty.
	require.NoError(t, c.Delete([]byte("y")))
	c.SkipTombstone([]byte("y"))
	require.Empty(t, c.Dirty())
	require.NoError(t, c.Commit(7))
	require.Len(t, inner.writes, 2)
	require.Zero(t, c.DirtyLen())
	require.NoError(t, c.Delete([]byte("z")))
	require.Equal(t, []kv{{"z", "<tombstone>"}}, entryStrings(c.Dirty()))
}
