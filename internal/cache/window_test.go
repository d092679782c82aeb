package cache

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/statestore"
)

// Window stores run under the record cache in tasks: a cache over a
// SegmentedStore. These check that pairing on both backends: windows
// expire at commit, and random puts and removes through the cache read
// back as a model says, before and after commits.

func windowBackends(t *testing.T) map[string]func() statestore.Store {
	return map[string]func() statestore.Store{
		"memory": statestore.NewMemory,
		"badger": func() statestore.Store {
			s, err := statestore.OpenBadger(t.TempDir(), statestore.DefaultBadgerOptions())
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

func rawCount(t *testing.T, s statestore.ReadWriter) int {
	t.Helper()
	it, err := s.All()
	require.NoError(t, err)
	defer it.Close()
	n := 0
	for it.Next() {
		n++
	}
	require.NoError(t, it.Err())
	return n
}

func fetchTimes(t *testing.T, w *statestore.WindowStore, key string, from, to int64) map[int64]string {
	t.Helper()
	it, err := w.Fetch([]byte(key), from, to)
	require.NoError(t, err)
	defer it.Close()
	out := map[int64]string{}
	for it.Next() {
		out[it.Start()] = string(it.Value())
	}
	require.NoError(t, it.Err())
	return out
}

func TestCachedWindowStoreExpiresAtCommit(t *testing.T) {
	for name, open := range windowBackends(t) {
		t.Run(name, func(t *testing.T) {
			opts := statestore.WindowOptions{Retention: 20, SegmentInterval: 10}
			seg, err := statestore.NewSegmentedStore(open(), opts)
			require.NoError(t, err)
			c := New(seg, nil)
			w, err := statestore.NewWindowStore(c, opts)
			require.NoError(t, err)
			for ts := int64(0); ts < 100; ts++ {
				require.NoError(t, w.Put([]byte("k"), ts, []byte("v")))
			}
			require.Zero(t, rawCount(t, seg), "nothing reaches the store before the commit")
			require.Len(t, fetchTimes(t, w, "k", 0, 1000), 20, "reads through the cache show the live windows only")
			require.Len(t, c.Dirty(), 100)
			require.NoError(t, c.Commit(7))
			require.Equal(t, 20, rawCount(t, seg), "the commit skipped the windows of expired segments")
			require.Len(t, fetchTimes(t, w, "k", 0, 1000), 20)
			p, err := seg.Position()
			require.NoError(t, err)
			require.Equal(t, int64(7), p)
		})
	}
}

func TestCachedWindowStoreAgainstModel(t *testing.T) {
	for name, open := range windowBackends(t) {
		t.Run(name, func(t *testing.T) {
			opts := statestore.WindowOptions{Retention: 1 << 40, SegmentInterval: 17, WindowSize: 3}
			seg, err := statestore.NewSegmentedStore(open(), opts)
			require.NoError(t, err)
			c := New(seg, nil)
			w, err := statestore.NewWindowStore(c, opts)
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(11, 12))
			keys := []string{"", "a", "a\x00", "ab", "\xff"}
			model := map[string]map[int64]string{}
			for _, k := range keys {
				model[k] = map[int64]string{}
			}
			pos := int64(0)
			for i := range 2000 {
				k, ts := keys[r.IntN(len(keys))], r.Int64N(200)
				if r.IntN(4) == 0 {
					require.NoError(t, w.Remove([]byte(k), ts))
					delete(model[k], ts)
				} else {
					v := fmt.Sprint(i)
					require.NoError(t, w.Put([]byte(k), ts, []byte(v)))
					model[k][ts] = v
				}
				if r.IntN(100) == 0 {
					pos++
					c.Dirty()
					require.NoError(t, c.Commit(pos))
				}
				if r.IntN(50) == 0 {
					for _, k := range keys {
						require.Equal(t, model[k], fetchTimes(t, w, k, 0, 1000), "key %q after %d operations", k, i)
					}
				}
			}
			p, err := seg.Position()
			require.NoError(t, err)
			require.Equal(t, pos, p)
		})
	}
}
