package cache

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/statestore"
)

// A versioned store written through the cache, with commits and aborts
// (Discard) between batches, answers as one that only ever received the
// committed batches: its observed time, kept in the store, goes back with
// an abort like its versions, and removals of expired versions go through
// the cache as deletes. Reads go through the read cache, which a versioned
// store's task turns on.
func TestVersionedStoreThroughCache(t *testing.T) {
	opts := statestore.VersionedOptions{HistoryRetention: 40}
	c := New(statestore.NewMemory(), NewBudget(1<<20))
	c.SetReadCache(true)
	vs, err := statestore.NewVersionedStore(c, opts)
	require.NoError(t, err)
	ref, err := statestore.NewVersionedStore(statestore.NewMemory(), opts)
	require.NoError(t, err)

	type put struct {
		k, v string
		ts   int64
	}
	r := rand.New(rand.NewPCG(11, 12))
	clock := int64(0)
	for batch := range 300 {
		var pending []put
		for range 1 + r.IntN(8) {
			clock += r.Int64N(4)
			p := put{k: fmt.Sprint(r.IntN(5)), v: fmt.Sprint(batch), ts: clock - r.Int64N(60)}
			pending = append(pending, p)
			_, _, err := vs.Put([]byte(p.k), []byte(p.v), p.ts)
			require.NoError(t, err)
		}
		if r.IntN(3) == 0 {
			c.Discard()
			clock -= 10 // the input is processed again from an earlier time
		} else {
			require.NoError(t, c.Commit(int64(batch)))
			for _, p := range pending {
				_, _, err := ref.Put([]byte(p.k), []byte(p.v), p.ts)
				require.NoError(t, err)
			}
		}
		obs, err := vs.ObservedTime()
		require.NoError(t, err)
		refObs, err := ref.ObservedTime()
		require.NoError(t, err)
		require.Equal(t, refObs, obs, "batch %d", batch)
		for k := range 5 {
			for at := clock - 60; at <= clock; at += 3 {
				got, gfound, err := vs.GetAsOf([]byte(fmt.Sprint(k)), at)
				require.NoError(t, err)
				want, wfound, err := ref.GetAsOf([]byte(fmt.Sprint(k)), at)
				require.NoError(t, err)
				require.Equal(t, wfound, gfound, "batch %d: key %d as of %d", batch, k, at)
				require.Equal(t, want, got, "batch %d: key %d as of %d", batch, k, at)
			}
		}
	}
}
