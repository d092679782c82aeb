package cache

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/statestore"
)

// gettingStore counts the inner store's point reads.
type gettingStore struct {
	statestore.Store
	gets atomic.Int64
}

func (g *gettingStore) Get(key []byte) ([]byte, bool, error) {
	g.gets.Add(1)
	return g.Store.Get(key)
}

func newGettingStore(t *testing.T) *gettingStore {
	g := &gettingStore{Store: statestore.NewMemory()}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func incr(old []byte, found bool) ([]byte, error) {
	if !found {
		return []byte{1}, nil
	}
	return []byte{old[0] + 1}, nil
}

// A retaining cache answers reads of what it committed from memory,
// tombstones included, across commits; a plain cache reads every key again
// after each commit.
func TestRetainingCacheReadsCommittedFromMemory(t *testing.T) {
	inner := newGettingStore(t)
	c := NewRetaining(inner, NewBudget(1<<20))
	require.NoError(t, c.Update([]byte("a"), incr))
	require.NoError(t, c.Put([]byte("gone"), []byte("x")))
	require.NoError(t, c.Commit(1))
	require.NoError(t, c.Delete([]byte("gone")))
	require.NoError(t, c.Commit(2))
	require.Equal(t, int64(1), inner.gets.Load(), "the first update of a new key reads the inner store")

	for want := byte(2); want < 6; want++ {
		require.NoError(t, c.Update([]byte("a"), incr))
		require.NoError(t, c.Commit(int64(want)+1))
		v, found, err := c.Get([]byte("a"))
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, []byte{want}, v)
	}
	_, found, err := c.Get([]byte("gone"))
	require.NoError(t, err)
	require.False(t, found)
	require.Equal(t, int64(1), inner.gets.Load(), "committed keys are read from memory")
	v, found, err := inner.Store.Get([]byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, []byte{5}, v, "the inner store holds what the cache answers")

	// A discarded write leaves the committed value readable.
	require.NoError(t, c.Update([]byte("a"), incr))
	c.Discard()
	v, found, err = c.Get([]byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, []byte{5}, v)
	require.Equal(t, int64(1), inner.gets.Load())

	// Released, it reads the inner store again.
	c.Release()
	_, _, err = c.Get([]byte("a"))
	require.NoError(t, err)
	require.Equal(t, int64(2), inner.gets.Load())

	// A failed commit keeps its entries dirty and the earlier ones
	// readable.
	rec := &recordingStore{Store: statestore.NewMemory()}
	t.Cleanup(func() { _ = rec.Close() })
	c = NewRetaining(rec, nil)
	put(t, c, "k", "1")
	require.NoError(t, c.Commit(1))
	put(t, c, "k", "2")
	rec.failNext = statestore.ErrNilValue
	require.Error(t, c.Commit(2))
	require.Equal(t, []kv{{"k", "2"}}, entryStrings(c.Dirty()))
	c.Discard()
	v, found, err = c.Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "1", string(v))

	plain := newGettingStore(t)
	p := New(plain, nil)
	for i := range 3 {
		require.NoError(t, p.Update([]byte("a"), incr))
		require.NoError(t, p.Commit(int64(i)))
	}
	require.Equal(t, int64(3), plain.gets.Load(), "a plain cache reads the inner store after every commit")
}

// What retaining caches keep is charged to their budget's retained share
// and bounded by the budget's size: a commit that would pass it keeps only
// its own entries, and a released cache returns its share.
func TestRetainingCacheBounded(t *testing.T) {
	const perEntry = 4 + 1 + cacheEntryOverhead // "k%03d" keys, 1-byte values
	budget := NewBudget(10 * perEntry)
	inners := []*gettingStore{newGettingStore(t), newGettingStore(t)}
	caches := []*Store{NewRetaining(inners[0], budget), NewRetaining(inners[1], budget)}
	write := func(c *Store, from, to, pos int) {
		t.Helper()
		for i := from; i < to; i++ {
			require.NoError(t, c.Update(fmt.Appendf(nil, "k%03d", i), incr))
		}
		require.NoError(t, c.Commit(int64(pos)))
	}
	write(caches[0], 0, 4, 1)
	write(caches[1], 0, 4, 1)
	require.Equal(t, int64(8*perEntry), budget.Retained())
	require.Zero(t, budget.Used(), "retained entries do not fill the budget")

	// Cache 0's next commit would pass the bound: it keeps only its own
	// four entries, and cache 1 keeps its four.
	write(caches[0], 10, 14, 2)
	require.Equal(t, int64(8*perEntry), budget.Retained())
	gets := inners[0].gets.Load()
	write(caches[0], 10, 14, 3)
	require.Equal(t, gets, inners[0].gets.Load(), "this commit's keys are retained")
	write(caches[0], 0, 1, 4)
	require.Equal(t, gets+1, inners[0].gets.Load(), "the dropped keys are read again")
	gets = inners[1].gets.Load()
	write(caches[1], 0, 4, 2)
	require.Equal(t, gets, inners[1].gets.Load(), "the other cache kept its entries")

	// A commit larger than the whole bound retains nothing.
	write(caches[1], 100, 120, 3)
	require.LessOrEqual(t, budget.Retained(), int64(10*perEntry))
	caches[0].Release()
	caches[1].Release()
	require.Zero(t, budget.Retained())
}
