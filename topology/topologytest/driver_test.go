package topologytest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

func TestDriverBasics(t *testing.T) {
	b := topology.NewBuilder()
	topology.Stream(b, "in", serde.String, serde.String).To("out", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	d, err := New(topo, Config{AppID: "wc", StartTime: start})
	require.NoError(t, err)
	require.Equal(t, "wc", d.AppID())
	require.Equal(t, start, d.Now())

	require.ErrorContains(t, d.Pipe("nowhere", nil, nil, start), `no source reads topic "nowhere"`)
	require.Empty(t, d.ReadOutput("out"))

	in := NewInputTopic(d, "in", serde.String, serde.String)
	require.NoError(t, in.PipeRecord(topology.Record[string, string]{Key: "k", Value: "v", Headers: []topology.Header{{Key: "h"}}}))
	recs, err := NewOutputTopic(d, "out", serde.String, serde.String).ReadRecords()
	require.NoError(t, err)
	require.Equal(t, []topology.Record[string, string]{{Key: "k", Value: "v", Timestamp: start, Headers: []topology.Header{{Key: "h"}}}}, recs)

	require.NoError(t, in.Pipe("k", "v"))
	_, err = NewOutputTopic(d, "out", serde.String, serde.Int64).ReadRecords()
	require.ErrorContains(t, err, `decode value from "out"`)

	require.NoError(t, d.Close())
	require.Error(t, d.Pipe("in", nil, nil, start))
	require.Error(t, d.AdvanceWallClock(time.Second))
}

func TestMemStore(t *testing.T) {
	s := newMemStore(false)
	require.Error(t, s.Put([]byte("k"), nil))
	for _, k := range []string{"b", "a", "d", "c"} {
		require.NoError(t, s.Put([]byte(k), []byte(k)))
	}
	it, err := s.Range([]byte("b"), []byte("d"))
	require.NoError(t, err)
	var keys []string
	for it.Next() {
		keys = append(keys, string(it.Key()))
	}
	require.False(t, it.Next())
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
	require.Equal(t, []string{"b", "c"}, keys)
	v, found, err := s.Get([]byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, []byte("a"), v)
}

// Under Config.Commits a store tells what the last commit left in it,
// beneath the writes made since, as the runtime's record cache does.
func TestMemStoreHasCommitted(t *testing.T) {
	s := newMemStore(true)
	require.NoError(t, s.Put([]byte("kept"), []byte("1")))
	s.commit()
	require.NoError(t, s.Put([]byte("kept"), []byte("2")))
	require.NoError(t, s.Delete([]byte("kept")))
	require.NoError(t, s.Put([]byte("new"), []byte("3")))
	has := func(key string) bool {
		t.Helper()
		found, err := s.HasCommitted([]byte(key))
		require.NoError(t, err)
		return found
	}
	require.True(t, has("kept"))
	require.False(t, has("new"))
	s.commit()
	require.False(t, has("kept"))
	require.True(t, has("new"))
}
