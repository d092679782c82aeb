package cache

import (
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

// A retaining cache answers reads of what its last commit wrote from
// memory, tombstones included, and forgets it at the commit after; a plain
// cache reads every key again after each commit.
func TestRetainingCacheReadsLastCommitFromMemory(t *testing.T) {
	incr := func(old []byte, found bool) ([]byte, error) {
		if !found {
			return []byte{1}, nil
		}
		return []byte{old[0] + 1}, nil
	}
	inner := &gettingStore{Store: statestore.NewMemory()}
	t.Cleanup(func() { _ = inner.Close() })
	c := NewRetaining(inner, NewBudget(1<<20))
	require.NoError(t, c.Update([]byte("a"), incr))
	require.NoError(t, c.Put([]byte("gone"), []byte("x")))
	require.NoError(t, c.Commit(1))
	require.NoError(t, c.Delete([]byte("gone")))
	require.NoError(t, c.Commit(2))
	gets := inner.gets.Load()

	// "a" was committed at 1, not 2: read from the inner store once.
	require.NoError(t, c.Update([]byte("a"), incr))
	require.Equal(t, gets+1, inner.gets.Load())
	require.NoError(t, c.Commit(3))
	for want := byte(3); want < 6; want++ {
		require.NoError(t, c.Update([]byte("a"), incr))
		require.NoError(t, c.Commit(int64(want)+1))
		v, found, err := c.Get([]byte("a"))
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, []byte{want}, v)
	}
	require.Equal(t, gets+1, inner.gets.Load(), "a key written at every commit is read from the inner store once")
	v, found, err := inner.Store.Get([]byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, []byte{5}, v, "the inner store holds what the cache answers")

	// "gone" was deleted at 2 and forgotten at 3: read again, absent.
	_, found, err = c.Get([]byte("gone"))
	require.NoError(t, err)
	require.False(t, found)

	// A discarded write leaves the committed value readable.
	require.NoError(t, c.Update([]byte("a"), incr))
	c.Discard()
	gets = inner.gets.Load()
	v, found, err = c.Get([]byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, []byte{5}, v)
	require.Equal(t, gets, inner.gets.Load())

	// A failed commit keeps its entries dirty and the previous commit's
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

	// A plain cache reads the inner store after every commit.
	plain := &gettingStore{Store: statestore.NewMemory()}
	t.Cleanup(func() { _ = plain.Close() })
	p := New(plain, nil)
	for i := range 3 {
		require.NoError(t, p.Update([]byte("a"), incr))
		require.NoError(t, p.Commit(int64(i)))
	}
	require.Equal(t, int64(3), plain.gets.Load())
}
