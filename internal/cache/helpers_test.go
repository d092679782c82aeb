package cache

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/statestore"
)

// kv is an entry as strings, for readable comparisons.
type kv struct{ k, v string }

// collect drains an iterator, copying every pair.
func collect(t *testing.T, it statestore.Iterator, err error) []kv {
	t.Helper()
	require.NoError(t, err)
	var out []kv
	for it.Next() {
		out = append(out, kv{string(it.Key()), string(it.Value())})
	}
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
	return out
}

func collectAll(t *testing.T, s statestore.ReadWriter) []kv {
	t.Helper()
	it, err := s.All()
	return collect(t, it, err)
}

func put(t *testing.T, s statestore.ReadWriter, pairs ...string) {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		require.NoError(t, s.Put([]byte(pairs[i]), []byte(pairs[i+1])))
	}
}

// backend opens a fresh store of one kind, so that the cache is checked in
// front of both.
type backend struct {
	name string
	open func(t *testing.T) statestore.Store
}

func backends() []backend {
	return []backend{
		{name: "memory", open: func(t *testing.T) statestore.Store {
			s := statestore.NewMemory()
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{name: "badger", open: func(t *testing.T) statestore.Store {
			o := statestore.DefaultBadgerOptions()
			o.Logger = slog.New(slog.DiscardHandler)
			s, err := statestore.OpenBadger(t.TempDir(), o)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
	}
}
