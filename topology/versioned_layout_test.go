package topology_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// badgerEnv is a fakeEnv whose stores are badger stores, each in its own
// directory under dir, kept across task graphs until closed.
type badgerEnv struct {
	*fakeEnv
	dir    string
	opened map[string]statestore.Store
}

func (e *badgerEnv) Store(name string) (statestore.ReadWriter, error) {
	if s, ok := e.opened[name]; ok {
		return s, nil
	}
	s, err := statestore.OpenBadger(filepath.Join(e.dir, name), statestore.DefaultBadgerOptions())
	if err != nil {
		return nil, err
	}
	e.opened[name] = s
	return s, nil
}

func (e *badgerEnv) close() error {
	var errs []error
	for _, s := range e.opened {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// A table whose badger store was written in one layout and is then read
// in the other, plain then Versioned or the reverse, read with Table or
// derived with Materialized, fails on its first record with a
// StoreLayoutError naming the store, and on every record after it, rather
// than misreading the store. Read in its own layout again, the store is
// as it was left.
func TestTableStoreLayoutSwitchDetected(t *testing.T) {
	for _, tc := range []struct {
		name          string
		written, read bool // versioned
		// derived: the store is that of MapTableValues given
		// Materialized, over a plain table of its own.
		derived bool
	}{
		{name: "plain then versioned", written: false, read: true},
		{name: "versioned then plain", written: true, read: false},
		{name: "derived plain then versioned", written: false, read: true, derived: true},
		{name: "derived versioned then plain", written: true, read: false, derived: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			run := func(versioned bool, recs ...graph.InputRecord) error {
				env := &badgerEnv{fakeEnv: newFakeEnv(0), dir: dir, opened: map[string]statestore.Store{}}
				defer func() { require.NoError(t, env.close()) }()
				b := topology.NewBuilder()
				var opt topology.Option
				if versioned {
					opt = topology.Versioned(time.Hour)
				}
				if tc.derived {
					topology.MapTableValues(topology.Table(b, "in", serde.String, serde.String, "source"), func(_, v string) string { return v },
						topology.Materialized("prices"), topology.TableValueSerde(serde.String), opt).ToStream().To("out", serde.String, serde.String)
				} else {
					topology.Table(b, "in", serde.String, serde.String, "prices", opt).ToStream().To("out", serde.String, serde.String)
				}
				topo, err := b.Build()
				require.NoError(t, err)
				g, err := graph.Of(topo).NewTaskGraph(0, env)
				require.NoError(t, err)
				defer func() { require.NoError(t, g.Close()) }()
				for _, r := range recs {
					if err := g.Process(r); err != nil {
						return err
					}
				}
				return nil
			}
			rec := func(k, v string, ms int64) graph.InputRecord {
				return graph.InputRecord{Topic: "in", Key: []byte(k), Value: []byte(v), Timestamp: time.UnixMilli(ms)}
			}
			require.NoError(t, run(tc.written, rec("a", "1", 10), rec("b", "2", 20)))

			for range 2 {
				err := run(tc.read, rec("a", "3", 30))
				var le *topology.StoreLayoutError
				require.True(t, errors.As(err, &le), "got %v", err)
				require.Equal(t, "prices", le.Store)
				require.Equal(t, tc.read, le.Versioned)
				require.ErrorIs(t, err, statestore.ErrLayoutMismatch)
				require.ErrorContains(t, err, `store "prices"`)
				require.ErrorContains(t, err, "reset the application")
			}
			require.NoError(t, run(tc.written, rec("a", "3", 30)), "the store is left as it was")
		})
	}
}
