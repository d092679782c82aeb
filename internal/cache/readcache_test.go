package cache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/statestore"
)

// countingStore counts the point reads that reach the inner store.
type countingStore struct {
	*recordingStore
	gets atomic.Int64
}

func (c *countingStore) Get(key []byte) ([]byte, bool, error) {
	c.gets.Add(1)
	return c.recordingStore.Get(key)
}

// slowGets widens the window between a point read of the inner store and
// the cache keeping what it read, where a commit can slip in.
type slowGets struct{ statestore.Store }

func (s *slowGets) Get(key []byte) ([]byte, bool, error) {
	v, found, err := s.Store.Get(key)
	time.Sleep(20 * time.Microsecond)
	return v, found, err
}

// newReadCache returns a cache with its read cache on in front of a store
// holding pairs: the inner store must not change behind the read cache's
// back once it is on.
func newReadCache(t *testing.T, budget *Budget, pairs ...string) (*Store, *countingStore) {
	inner := &countingStore{recordingStore: &recordingStore{Store: statestore.NewMemory()}}
	t.Cleanup(func() { _ = inner.Close() })
	put(t, inner, pairs...)
	c := New(inner, budget)
	c.SetReadCache(true)
	return c, inner
}

func get(t *testing.T, c *Store, key string) (string, bool) {
	t.Helper()
	v, found, err := c.Get([]byte(key))
	require.NoError(t, err)
	return string(v), found
}

func TestReadCacheServesRepeatReads(t *testing.T) {
	c, inner := newReadCache(t, NewBudget(1<<20), "a", "1")
	for range 3 {
		v, found := get(t, c, "a")
		require.True(t, found)
		require.Equal(t, "1", v)
	}
	require.EqualValues(t, 1, inner.gets.Load())
	require.Equal(t, 1, c.ReadCacheLen())

	// A caller scribbling on what it read changes nothing.
	v, _, err := c.Get([]byte("a"))
	require.NoError(t, err)
	v[0] = 'x'
	got, _ := get(t, c, "a")
	require.Equal(t, "1", got)

	// Absent keys are not kept, so a later put is seen at once.
	_, found := get(t, c, "b")
	require.False(t, found)
	require.Equal(t, 1, c.ReadCacheLen())

	c.SetReadCache(false)
	require.Zero(t, c.ReadCacheLen())
	get(t, c, "a")
	require.EqualValues(t, 3, inner.gets.Load())
}

func TestReadCacheOffWithoutBudget(t *testing.T) {
	c, inner := newReadCache(t, nil, "a", "1")
	get(t, c, "a")
	get(t, c, "a")
	require.EqualValues(t, 2, inner.gets.Load())
	require.Zero(t, c.ReadCacheLen())
}

func TestReadCacheFollowsCommits(t *testing.T) {
	c, inner := newReadCache(t, NewBudget(1<<20), "a", "1", "b", "1")
	get(t, c, "a")
	get(t, c, "b")
	put(t, c, "a", "2")
	require.NoError(t, c.Delete([]byte("b")))
	v, _ := get(t, c, "a")
	require.Equal(t, "2", v)
	require.NoError(t, c.Commit(1))
	gets := inner.gets.Load()
	v, found := get(t, c, "a")
	require.True(t, found)
	require.Equal(t, "2", v)
	_, found = get(t, c, "b")
	require.False(t, found)
	require.Equal(t, gets+1, inner.gets.Load(), "a from the read cache, b (deleted) from the store")

	// Update reads through the read cache too and leaves it right.
	incr := func(old []byte, found bool) ([]byte, error) {
		n, _ := strconv.Atoi(string(old))
		return []byte(strconv.Itoa(n + 1)), nil
	}
	gets = inner.gets.Load()
	require.NoError(t, c.Update([]byte("a"), incr))
	require.Equal(t, gets, inner.gets.Load())
	require.NoError(t, c.Commit(2))
	require.NoError(t, c.Update([]byte("a"), incr))
	require.NoError(t, c.Commit(3))
	v, _ = get(t, c, "a")
	require.Equal(t, "4", v)
	require.Equal(t, gets, inner.gets.Load())
}

// GetCommitted reads what the last commit wrote, never a dirty value, from
// the read cache when it holds the key; callers own what it returns.
func TestGetCommitted(t *testing.T) {
	c, inner := newReadCache(t, NewBudget(1<<20), "old", "1")
	committed := func(key string) (string, bool) {
		t.Helper()
		v, found, err := c.GetCommitted([]byte(key))
		require.NoError(t, err)
		return string(v), found
	}
	put(t, c, "new", "dirty")
	_, found := committed("new")
	require.False(t, found)
	v, _ := committed("old")
	require.Equal(t, "1", v)
	require.EqualValues(t, 2, inner.gets.Load())
	v, _ = committed("old")
	require.Equal(t, "1", v)
	require.EqualValues(t, 2, inner.gets.Load(), "kept by the first read")

	put(t, c, "old", "2")
	v, _ = committed("old")
	require.Equal(t, "1", v)
	require.NoError(t, c.Commit(1))
	v, _ = committed("old")
	require.Equal(t, "2", v)
	require.EqualValues(t, 2, inner.gets.Load(), "the commit updated the kept entry")
	v, _ = committed("new")
	require.Equal(t, "dirty", v)
	require.EqualValues(t, 3, inner.gets.Load())
	committed("new")
	require.EqualValues(t, 3, inner.gets.Load())

	b, _, err := c.GetCommitted([]byte("old"))
	require.NoError(t, err)
	b[0] = 'x'
	v, _ = committed("old")
	require.Equal(t, "2", v)
}

// HasCommitted answers as GetCommitted does, from a kept entry without a
// read, and keeps nothing it read.
func TestHasCommitted(t *testing.T) {
	c, inner := newReadCache(t, NewBudget(1<<20), "old", "1", "gone", "2")
	has := func(key string) bool {
		t.Helper()
		found, err := c.HasCommitted([]byte(key))
		require.NoError(t, err)
		return found
	}
	put(t, c, "new", "dirty")
	require.NoError(t, c.Delete([]byte("gone")))
	require.False(t, has("new"), "a dirty value is not committed")
	require.True(t, has("gone"), "a dirty delete is not committed")
	require.EqualValues(t, 2, inner.gets.Load())
	require.True(t, has("old"))
	require.True(t, has("old"))
	require.EqualValues(t, 4, inner.gets.Load(), "nothing read is kept")
	get(t, c, "old")
	require.EqualValues(t, 5, inner.gets.Load())
	require.True(t, has("old"))
	require.EqualValues(t, 5, inner.gets.Load(), "a kept entry answers")
	require.NoError(t, c.Commit(1))
	require.True(t, has("new"))
	require.False(t, has("gone"))
}

// Has answers as Get does, dirty values and deletes first, reading the
// inner store only for a key without a dirty entry.
func TestHas(t *testing.T) {
	c, inner := newReadCache(t, NewBudget(1<<20), "old", "1", "gone", "2")
	has := func(key string) bool {
		t.Helper()
		found, err := c.Has([]byte(key))
		require.NoError(t, err)
		return found
	}
	put(t, c, "new", "dirty")
	require.NoError(t, c.Delete([]byte("gone")))
	require.True(t, has("new"))
	require.False(t, has("gone"))
	require.EqualValues(t, 0, inner.gets.Load(), "a dirty entry answers")
	require.True(t, has("old"))
	require.False(t, has("never"))
	require.EqualValues(t, 2, inner.gets.Load())
	require.NoError(t, c.Commit(1))
	require.True(t, has("new"))
	require.False(t, has("gone"))
}

func TestReadCacheDiscardKeepsCleanEntries(t *testing.T) {
	c, inner := newReadCache(t, NewBudget(1<<20), "a", "committed")
	get(t, c, "a")
	put(t, c, "a", "dirty")
	c.Discard()
	v, _ := get(t, c, "a")
	require.Equal(t, "committed", v)
	require.EqualValues(t, 1, inner.gets.Load())
}

func TestReadCacheCommitFailureDropsCleanEntries(t *testing.T) {
	budget := NewBudget(1 << 20)
	c, inner := newReadCache(t, budget, "a", "1", "b", "1")
	get(t, c, "a")
	get(t, c, "b")
	put(t, c, "a", "2")
	inner.failNext = errors.New("boom")
	require.Error(t, c.Commit(1))
	require.Zero(t, c.ReadCacheLen())
	require.Zero(t, budget.ReadUsed())
	v, _ := get(t, c, "a")
	require.Equal(t, "2", v)
	c.Discard()
	v, _ = get(t, c, "a")
	require.Equal(t, "1", v)
}

// Clean entries of stores sharing a budget stay within its read share,
// which never makes the budget Full, and leave it when the cache is off.
func TestReadCacheBudget(t *testing.T) {
	budget := NewBudget(4000)
	var pairs1, pairs2 []string
	for i := range 200 {
		k := fmt.Sprintf("key-%03d", i)
		pairs1 = append(pairs1, k, "v1-"+k)
		pairs2 = append(pairs2, k, "v2-"+k)
	}
	c1, _ := newReadCache(t, budget, pairs1...)
	c2, _ := newReadCache(t, budget, pairs2...)
	for round := range 3 {
		for i := range 200 {
			k := fmt.Sprintf("key-%03d", (i*7+round)%200)
			v, found := get(t, c1, k)
			require.True(t, found)
			require.Equal(t, "v1-"+k, v)
			v, found = get(t, c2, k)
			require.True(t, found)
			require.Equal(t, "v2-"+k, v)
			require.LessOrEqual(t, budget.ReadUsed(), int64(4000))
			require.False(t, budget.Full())
		}
	}
	require.NotZero(t, c1.ReadCacheLen())
	require.Less(t, c1.ReadCacheLen(), 200)
	c1.SetReadCache(false)
	c2.SetReadCache(false)
	require.Zero(t, budget.ReadUsed())
}

// The cache with its read cache on, and a read share small enough to
// evict, against a map, through puts, updates, deletes, commits and
// discards.
func TestReadCacheRandomAgainstModel(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			budget := NewBudget(2000)
			c := New(b.open(t), budget)
			c.SetReadCache(true)
			r := rand.New(rand.NewPCG(7, 8))
			committed := map[string]string{}
			view := map[string]string{}
			for step := range 5000 {
				k := fmt.Sprintf("%02d", r.IntN(60))
				switch op := r.IntN(100); {
				case op < 25:
					v := fmt.Sprint(step)
					require.NoError(t, c.Put([]byte(k), []byte(v)))
					view[k] = v
				case op < 40:
					want, ok := view[k]
					require.NoError(t, c.Update([]byte(k), func(old []byte, found bool) ([]byte, error) {
						require.Equal(t, ok, found)
						require.Equal(t, want, string(old))
						return []byte(string(old) + "+"), nil
					}))
					view[k] = want + "+"
				case op < 50:
					require.NoError(t, c.Delete([]byte(k)))
					delete(view, k)
				case op < 80:
					got, found := get(t, c, k)
					want, ok := view[k]
					require.Equal(t, ok, found, "step %d key %s", step, k)
					require.Equal(t, want, got, "step %d key %s", step, k)
				case op < 90:
					got, found, err := c.GetCommitted([]byte(k))
					require.NoError(t, err)
					want, ok := committed[k]
					require.Equal(t, ok, found, "step %d key %s", step, k)
					require.Equal(t, want, string(got), "step %d key %s", step, k)
				case op < 97:
					require.NoError(t, c.Commit(int64(step)))
					committed = maps(view)
				default:
					c.Discard()
					view = maps(committed)
				}
				require.LessOrEqual(t, budget.ReadUsed(), int64(2000))
			}
			c.SetReadCache(false)
			require.Zero(t, budget.ReadUsed())
		})
	}
}

// Readers on other goroutines race the writer's commits: a value read
// just before a commit must not be kept after it. Each key's values only
// grow, so a reader that ever sees one shrink has read a stale clean
// entry; after the last commit every key must read its last value.
func TestReadCacheConcurrentReadersAndCommits(t *testing.T) {
	inner := &slowGets{Store: statestore.NewMemory()}
	t.Cleanup(func() { _ = inner.Close() })
	// Room for about three clean entries: the evictions keep keys
	// coming back into the read cache, each time from a read that may
	// race a commit.
	c := New(inner, NewBudget(220))
	c.SetReadCache(true)
	const keys, writes = 8, 4000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for r := range 4 {
		// Half the readers are queries, which see committed values only.
		read := c.Get
		if r%2 == 1 {
			read = c.GetCommitted
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := make([]int, keys)
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				for k := range keys {
					v, found, err := read([]byte(strconv.Itoa(k)))
					if err != nil {
						errs <- err
						return
					}
					if !found {
						continue
					}
					n, _ := strconv.Atoi(string(v))
					if n < last[k] {
						errs <- fmt.Errorf("key %d read %d after %d", k, n, last[k])
						return
					}
					last[k] = n
				}
			}
		}()
	}
	for i := 1; i <= writes; i++ {
		k := []byte(strconv.Itoa(i % keys))
		if i%5 == 0 {
			require.NoError(t, c.Update(k, func([]byte, bool) ([]byte, error) { return []byte(strconv.Itoa(i)), nil }))
		} else {
			require.NoError(t, c.Put(k, []byte(strconv.Itoa(i))))
		}
		if i%3 == 0 {
			require.NoError(t, c.Commit(int64(i)))
		}
	}
	require.NoError(t, c.Commit(writes+1))
	close(stop)
	wg.Wait()
	for range 4 {
		require.NoError(t, <-errs)
	}
	for k := range keys {
		v, _ := get(t, c, strconv.Itoa(k))
		want := writes - (writes-k)%keys
		require.Equal(t, strconv.Itoa(want), v, "key %d", k)
	}
}

// pausingGets holds the point read that finds pause set after it has read
// the inner store, until release is closed.
type pausingGets struct {
	statestore.Store
	pause   atomic.Bool
	read    chan struct{}
	release chan struct{}
}

func (s *pausingGets) Get(key []byte) ([]byte, bool, error) {
	v, found, err := s.Store.Get(key)
	if s.pause.CompareAndSwap(true, false) {
		close(s.read)
		<-s.release
	}
	return v, found, err
}

// A query reads the old value from the inner store, a commit writes a new
// one, and only then does the query finish: what it read must not be kept.
func TestReadCacheReadRacingCommit(t *testing.T) {
	inner := &pausingGets{Store: statestore.NewMemory(), read: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { _ = inner.Close() })
	c := New(inner, NewBudget(1<<20))
	put(t, inner, "a", "old")
	c.SetReadCache(true)
	inner.pause.Store(true)
	done := make(chan string)
	go func() {
		v, _, _ := c.Get([]byte("a"))
		done <- string(v)
	}()
	<-inner.read
	put(t, c, "a", "new")
	require.NoError(t, c.Commit(1))
	close(inner.release)
	require.Equal(t, "old", <-done)
	v, _ := get(t, c, "a")
	require.Equal(t, "new", v)
}
