package changelog

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/statestore"
)

// A restoration restores records with keys beyond badger's 65,000-byte key
// limit, and one that meets a record its store cannot hold fails naming the
// changelog partition and the record's offset, having applied nothing of
// that batch.
func TestRestoreBigRecordsAndUnstorableOne(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	prod := newProducer(t, c)
	long := bytes.Repeat([]byte("k"), 70_000)
	produce(t, prod, clTopic, 0, kv("a", "1"), statestore.Entry{Key: long, Value: []byte("2")})

	o := statestore.DefaultBadgerOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	store, err := statestore.OpenBadger(t.TempDir(), o)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	r := newReader(t, c, nil)
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore, Task: "0_0"}))
	done := pollUntil(t, r, completedFor(clTopic, 0))
	require.NoError(t, done[0].Err)
	v, found, err := store.Get(long)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "2", string(v))
	r.Unregister(clTopic, 0) // a finished restoration may already be gone

	// A store whose value log cannot take a 990 KB value (with its staging overhead).
	o.ValueLogFileSize = 1 << 20
	small, err := statestore.OpenBadger(t.TempDir(), o)
	require.NoError(t, err)
	t.Cleanup(func() { small.Close() })
	produce(t, prod, clTopic, 0, statestore.Entry{Key: []byte("big"), Value: make([]byte, 990_000)})
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: small, Mode: Restore, Task: "0_0"}))
	done = pollUntil(t, r, completedFor(clTopic, 0))
	require.ErrorIs(t, done[0].Err, statestore.ErrTooLarge)
	require.ErrorContains(t, done[0].Err, fmt.Sprintf("%s[0]", clTopic))
	require.ErrorContains(t, done[0].Err, "offset 2")
}
