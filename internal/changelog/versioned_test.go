package changelog

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/statestore"
)

// recordingStore keeps the entries a restoration writes, in order.
type recordingStore struct {
	*fakeStore
	got []statestore.Entry
}

func (s *recordingStore) Write(entries []statestore.Entry, position int64) error {
	s.got = append(s.got, entries...)
	return s.fakeStore.Write(entries, position)
}

// A versioned store's puts go out stamped with their version's time and
// marked as such, and a restoration hands them back with it, tombstones
// included, while an untimed record keeps only its produce time.
func TestTimedEntriesRoundTrip(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	prod := newProducer(t, c)
	ctx := context.Background()
	var track Offsets
	Send(ctx, prod, clTopic, 0, []statestore.Entry{
		statestore.VersionRecord([]byte("k"), []byte("v"), 1234),
		statestore.VersionRecord([]byte("k"), nil, 1300),
		kv("plain", "p"),
	}, &track)
	require.NoError(t, prod.Flush(ctx))
	require.NoError(t, track.Err())

	store := &recordingStore{fakeStore: newFakeStore()}
	r := newReader(t, c, nil)
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}))
	done := pollUntil(t, r, completedFor(clTopic, 0))
	require.NoError(t, done[0].Err)
	require.Len(t, store.got, 3)
	require.Equal(t, statestore.TimedRecord, store.got[0].Origin)
	require.Equal(t, int64(1234), store.got[0].Time)
	v, ts := statestore.SplitTimestamped(store.got[0].Value)
	require.Equal(t, "v", string(v))
	require.Equal(t, int64(1234), ts)
	require.Equal(t, statestore.TimedRecord, store.got[1].Origin)
	require.Nil(t, store.got[1].Value)
	require.Equal(t, int64(1300), store.got[1].Time)
	require.Equal(t, statestore.LoggedRecord, store.got[2].Origin)
}

// As Kafka Streams sets them: compacted, nothing compacted younger than
// the history retention plus a day.
func TestVersionedTopicConfigs(t *testing.T) {
	c := VersionedTopicConfigs(time.Hour.Milliseconds())
	require.Equal(t, "compact", *c["cleanup.policy"])
	require.Equal(t, "90000000", *c["min.compaction.lag.ms"])
	require.Equal(t, "9223372036854775807", *VersionedTopicConfigs(math.MaxInt64 - 5)["min.compaction.lag.ms"])
}
