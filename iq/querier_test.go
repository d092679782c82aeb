package iq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// oneInstance is a backend holding partition 0 active, 1 standby, 2
// restoring from scratch, of a 4-partition store, with metadata naming
// other hosts too.
func oneInstance(t *testing.T) (*fakeBackend, map[int32]*fakeReplica) {
	b := newFakeBackend("self:1", map[string]int32{testStore: 4})
	reps := map[int32]*fakeReplica{
		0: b.add(testStore, 0, RoleActive),
		1: b.add(testStore, 1, RoleStandby),
		2: b.add(testStore, 2, RoleRestoring),
	}
	b.setMeta(Metadata{
		Hosts: []HostMetadata{
			{Host: "other:1", Active: []StorePartition{{testStore, 1}}, Standby: []StorePartition{{testStore, 0}}},
			{Host: "self:1", Active: []StorePartition{{testStore, 0}, {testStore, 2}}, Standby: []StorePartition{{testStore, 1}}},
			{Host: "third:1", Warmup: []StorePartition{{testStore, 1}}, Standby: []StorePartition{{"other", 0}}},
		},
		Partitions: map[string]int32{testStore: 4, "other": 1},
	}, nil)
	return b, reps
}

func TestQuerierGet(t *testing.T) {
	b, reps := oneInstance(t)
	q := NewQuerier(b)
	ctx := context.Background()
	k0, k1, k2, k3 := keyIn(0, 4, "a"), keyIn(1, 4, "b"), keyIn(2, 4, "c"), keyIn(3, 4, "d")
	reps[0].put(t, k0, 7)
	reps[1].put(t, k1, 8)
	reps[1].set(func(i *ReplicaInfo) { i.End = i.Position + 40; i.CaughtUpAgo = 3 * time.Second })
	reps[2].put(t, k2, 9)
	reps[2].set(func(i *ReplicaInfo) { i.End, i.Position, i.Rebuilding, i.CaughtUpAgo = 5000, -1, true, Unknown })

	t.Run("active answers with provenance", func(t *testing.T) {
		res, err := Get(ctx, q, testStore, k0, serde.String, serde.Int64)
		require.NoError(t, err)
		require.True(t, res.Found)
		require.Equal(t, int64(7), res.Value)
		require.Equal(t, Provenance{Host: "self:1", Partition: 0, Role: RoleActive, Position: 1, Lag: 0}, res.Provenance)
	})
	t.Run("absent key has provenance too", func(t *testing.T) {
		res, err := Get(ctx, q, testStore, keyIn(0, 4, "zz"), serde.String, serde.Int64)
		require.NoError(t, err)
		require.False(t, res.Found)
		require.Equal(t, RoleActive, res.Provenance.Role)
		require.Equal(t, int64(1), res.Provenance.Position)
	})
	t.Run("standby refuses the default bound", func(t *testing.T) {
		_, err := Get(ctx, q, testStore, k1, serde.String, serde.Int64)
		require.ErrorIs(t, err, ErrTooStale)
		var se *StaleError
		require.True(t, errors.As(err, &se))
		require.Equal(t, StaleError{Store: testStore, Partition: 1, Host: "self:1", Role: RoleStandby, Position: 1, Lag: 40,
			SinceCaughtUp: 3 * time.Second, ContactAgo: Unknown, Bound: ActiveOnly()}, *se)
		require.Contains(t, err.Error(), "standby replica on self:1 at position 1, lag 40")
	})
	t.Run("standby answers any and lag within bound", func(t *testing.T) {
		for _, bound := range []Staleness{AnyStaleness(), MaxLag(40), MaxAge(5 * time.Second)} {
			res, err := Get(ctx, q, testStore, k1, serde.String, serde.Int64, WithStaleness(bound))
			require.NoError(t, err, bound.String())
			require.Equal(t, int64(8), res.Value)
			require.Equal(t, Provenance{Host: "self:1", Partition: 1, Role: RoleStandby, Position: 1, Lag: 40, Age: 3 * time.Second, ContactAgo: Unknown}, res.Provenance)
		}
		_, err := Get(ctx, q, testStore, k1, serde.String, serde.Int64, WithStaleness(MaxLag(39)))
		require.ErrorIs(t, err, ErrTooStale)
		_, err = Get(ctx, q, testStore, k1, serde.String, serde.Int64, WithStaleness(MaxAge(time.Second)))
		require.ErrorIs(t, err, ErrTooStale)
	})
	t.Run("replica rebuilding from scratch serves only any", func(t *testing.T) {
		_, err := Get(ctx, q, testStore, k2, serde.String, serde.Int64, WithStaleness(MaxLag(1_000_000)))
		var se *StaleError
		require.True(t, errors.As(err, &se))
		require.Equal(t, RoleRestoring, se.Role)
		require.Equal(t, int64(-1), se.Lag)
		require.True(t, se.Rebuilding)
		require.Contains(t, err.Error(), "rebuilding (no consistent position yet), lag unknown")
		_, err = Get(ctx, q, testStore, k2, serde.String, serde.Int64, WithStaleness(MaxAge(time.Hour)))
		require.ErrorIs(t, err, ErrTooStale)
		res, err := Get(ctx, q, testStore, k2, serde.String, serde.Int64, WithStaleness(AnyStaleness()))
		require.NoError(t, err)
		require.Equal(t, int64(9), res.Value)
		require.Equal(t, Provenance{Host: "self:1", Partition: 2, Role: RoleRestoring, Position: -1, Lag: -1, Rebuilding: true, Age: Unknown, ContactAgo: Unknown}, res.Provenance)
	})
	t.Run("not hosted, unknown store, unknown partition", func(t *testing.T) {
		_, err := Get(ctx, q, testStore, k3, serde.String, serde.Int64, WithStaleness(AnyStaleness()))
		require.ErrorIs(t, err, ErrNotHostedHere)
		_, err = Get(ctx, q, "nope", k0, serde.String, serde.Int64)
		require.ErrorIs(t, err, ErrUnknownStore)
		_, err = Get(ctx, q, testStore, k0, serde.String, serde.Int64, WithPartition(9))
		require.ErrorIs(t, err, ErrUnknownPartition)
		_, err = Get(ctx, q, testStore, k0, serde.String, serde.Int64, WithPartition(-1))
		require.ErrorIs(t, err, ErrUnknownPartition)
	})
	t.Run("explicit partition replaces hashing", func(t *testing.T) {
		res, err := Get(ctx, q, testStore, k0, serde.String, serde.Int64, WithPartition(1), WithStaleness(AnyStaleness()))
		require.NoError(t, err)
		require.False(t, res.Found)
		require.Equal(t, int32(1), res.Provenance.Partition)
	})
	t.Run("min position", func(t *testing.T) {
		_, err := Get(ctx, q, testStore, k0, serde.String, serde.Int64, WithMinPosition(1))
		require.NoError(t, err)
		_, err = Get(ctx, q, testStore, k0, serde.String, serde.Int64, WithMinPosition(2))
		require.ErrorIs(t, err, ErrBehind)
		var be *BehindError
		require.True(t, errors.As(err, &be))
		require.Equal(t, BehindError{Store: testStore, Partition: 0, Host: "self:1", Role: RoleActive, Position: 1, MinPosition: 2}, *be)
		_, err = Get(ctx, q, testStore, k0, serde.String, serde.Int64, WithMinPosition(-1))
		require.ErrorIs(t, err, ErrInvalidQuery)
	})
	t.Run("errors from the backend pass through", func(t *testing.T) {
		b.replicaErr = ErrRebalancing
		defer func() { b.replicaErr = nil }()
		_, err := Get(ctx, q, testStore, k0, serde.String, serde.Int64)
		require.ErrorIs(t, err, ErrRebalancing)
	})
	t.Run("cancelled context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := Get(cctx, q, testStore, k0, serde.String, serde.Int64)
		require.ErrorIs(t, err, context.Canceled)
	})
	t.Run("value that does not decode", func(t *testing.T) {
		_, err := Get(ctx, q, testStore, k0, serde.String, serde.JSON[[]string]())
		require.ErrorContains(t, err, "decode value")
	})
}

func TestQuerierStoreClosedWhileReading(t *testing.T) {
	b, reps := oneInstance(t)
	q := NewQuerier(b)
	require.NoError(t, reps[0].store.Close())
	_, err := q.GetBytes(context.Background(), testStore, []byte(keyIn(0, 4, "a")))
	require.ErrorIs(t, err, ErrNotHostedHere)
	require.ErrorContains(t, err, "moved")
	_, err = q.RangeBytes(context.Background(), testStore, nil, nil, WithPartition(0))
	require.ErrorIs(t, err, ErrNotHostedHere)
}

// provenanceStore reports the position a concurrent writer reached during
// a read, to check that provenance is taken after the read.
type provenanceStore struct {
	statestore.Store
	during func()
}

func (s provenanceStore) Get(k []byte) ([]byte, bool, error) {
	s.during()
	return s.Store.Get(k)
}

func TestProvenanceIsReadAfterTheRead(t *testing.T) {
	b, reps := oneInstance(t)
	k := keyIn(0, 4, "a")
	reps[0].put(t, k, 1)
	r := reps[0]
	inner := r.store
	r.store = provenanceStore{Store: inner, during: func() { r.put(t, k, 2) }}
	res, err := Get(context.Background(), NewQuerier(b), testStore, k, serde.String, serde.Int64)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Value)
	require.Equal(t, int64(2), res.Provenance.Position, "the position must cover what the read saw")
}

func TestQuerierRangeAllCount(t *testing.T) {
	b, reps := oneInstance(t)
	q := NewQuerier(b)
	ctx := context.Background()
	for i, k := range []string{"a", "b", "c", "d"} {
		reps[0].put(t, k, int64(i))
	}
	reps[1].put(t, "x", 10)
	reps[1].put(t, "y", 11)
	reps[2].set(func(i *ReplicaInfo) { i.End = 1 << 20 })

	t.Run("all local partitions under the default bound", func(t *testing.T) {
		res, err := All(ctx, q, testStore, serde.String, serde.Int64)
		require.NoError(t, err)
		require.Len(t, res.Partitions, 1)
		require.Equal(t, Provenance{Host: "self:1", Partition: 0, Role: RoleActive, Position: 4}, res.Partitions[0].Provenance)
		require.Equal(t, []KeyValue[string, int64]{{Key: "a", Value: 0}, {Key: "b", Value: 1}, {Key: "c", Value: 2}, {Key: "d", Value: 3}}, res.Partitions[0].Entries)
		require.Len(t, res.Refused, 2)
		require.Equal(t, int32(1), res.Refused[0].Partition)
		require.ErrorIs(t, res.Refused[0].Err, ErrTooStale)
		require.Equal(t, int32(2), res.Refused[1].Partition)
	})
	t.Run("any staleness reads every local replica", func(t *testing.T) {
		res, err := All(ctx, q, testStore, serde.String, serde.Int64, WithStaleness(AnyStaleness()))
		require.NoError(t, err)
		require.Len(t, res.Partitions, 3)
		require.Empty(t, res.Refused)
		require.Equal(t, RoleStandby, res.Partitions[1].Provenance.Role)
		require.Equal(t, []KeyValue[string, int64]{{Key: "x", Value: 10}, {Key: "y", Value: 11}}, res.Partitions[1].Entries)
		require.Empty(t, res.Partitions[2].Entries)
		require.Equal(t, int64(1<<20), res.Partitions[2].Provenance.Lag)
	})
	t.Run("range of one partition with a limit", func(t *testing.T) {
		res, err := Range(ctx, q, testStore, "b", "d", serde.String, serde.Int64, WithPartition(0))
		require.NoError(t, err)
		require.Equal(t, []KeyValue[string, int64]{{Key: "b", Value: 1}, {Key: "c", Value: 2}}, res.Partitions[0].Entries)
		res, err = Range(ctx, q, testStore, "a", "z", serde.String, serde.Int64, WithPartition(0), WithLimit(3))
		require.NoError(t, err)
		require.True(t, res.Partitions[0].Truncated)
		require.Len(t, res.Partitions[0].Entries, 3)
		raw, err := q.RangeBytes(ctx, testStore, []byte("c"), nil, WithPartition(0))
		require.NoError(t, err)
		require.Len(t, raw.Partitions[0].Entries, 2)
	})
	t.Run("one partition that refuses fails the call", func(t *testing.T) {
		_, err := All(ctx, q, testStore, serde.String, serde.Int64, WithPartition(1))
		require.ErrorIs(t, err, ErrTooStale)
		_, err = All(ctx, q, testStore, serde.String, serde.Int64, WithPartition(3))
		require.ErrorIs(t, err, ErrNotHostedHere)
		_, err = All(ctx, q, testStore, serde.String, serde.Int64, WithPartition(0), WithMinPosition(5))
		require.ErrorIs(t, err, ErrBehind)
	})
	t.Run("invalid scans", func(t *testing.T) {
		_, err := All(ctx, q, testStore, serde.String, serde.Int64, WithMinPosition(1))
		require.ErrorIs(t, err, ErrInvalidQuery)
		_, err = All(ctx, q, "nope", serde.String, serde.Int64)
		require.ErrorIs(t, err, ErrUnknownStore)
		b.setMeta(Metadata{}, ErrNotStarted)
		_, err = All(ctx, q, testStore, serde.String, serde.Int64)
		require.ErrorIs(t, err, ErrNotStarted)
	})
	b, reps = oneInstance(t)
	q = NewQuerier(b)
	for i, k := range []string{"a", "b", "c"} {
		reps[0].put(t, k, int64(i))
	}
	reps[1].put(t, "x", 1)
	t.Run("approximate count", func(t *testing.T) {
		res, err := q.ApproximateCount(ctx, testStore)
		require.NoError(t, err)
		require.Equal(t, int64(3), res.Total)
		require.Len(t, res.Partitions, 1)
		require.Len(t, res.Refused, 2)
		res, err = q.ApproximateCount(ctx, testStore, WithStaleness(AnyStaleness()))
		require.NoError(t, err)
		require.Equal(t, int64(4), res.Total)
		require.Equal(t, int64(1), res.Partitions[1].Count)
		require.Equal(t, RoleStandby, res.Partitions[1].Provenance.Role)
		_, err = q.ApproximateCount(ctx, testStore, WithPartition(1))
		require.ErrorIs(t, err, ErrTooStale)
	})
}

func TestQuerierMetadata(t *testing.T) {
	b, _ := oneInstance(t)
	q := NewQuerier(b)

	km, err := q.PartitionMetadata(testStore, 0)
	require.NoError(t, err)
	require.Equal(t, KeyQueryMetadata{Partition: 0, Active: "self:1", Standbys: []string{"other:1"}}, km)
	km, err = q.PartitionMetadata(testStore, 1)
	require.NoError(t, err)
	require.Equal(t, KeyQueryMetadata{Partition: 1, Active: "other:1", Standbys: []string{"self:1"}, Warmups: []string{"third:1"}}, km)

	k := keyIn(2, 4, "k")
	km, err = KeyMetadataFor(q, testStore, k, serde.String)
	require.NoError(t, err)
	require.Equal(t, KeyQueryMetadata{Partition: 2, Active: "self:1"}, km)

	// Partition 3 is held by nobody: no guess.
	_, err = q.KeyMetadata(testStore, []byte(keyIn(3, 4, "k")))
	require.ErrorIs(t, err, ErrNotAvailable)
	var ue *UnavailableError
	require.True(t, errors.As(err, &ue))
	require.Equal(t, int32(3), ue.Partition)

	_, err = q.KeyMetadata("nope", []byte("k"))
	require.ErrorIs(t, err, ErrUnknownStore)

	sm, err := q.StoreMetadata(testStore)
	require.NoError(t, err)
	require.Equal(t, int32(4), sm.Partitions)
	require.Equal(t, []HostMetadata{
		{Host: "other:1", Active: []StorePartition{{testStore, 1}}, Standby: []StorePartition{{testStore, 0}}},
		{Host: "self:1", Active: []StorePartition{{testStore, 0}, {testStore, 2}}, Standby: []StorePartition{{testStore, 1}}},
		{Host: "third:1", Warmup: []StorePartition{{testStore, 1}}},
	}, sm.Hosts)
	sm, err = q.StoreMetadata("other")
	require.NoError(t, err)
	require.Equal(t, []HostMetadata{{Host: "third:1", Standby: []StorePartition{{"other", 0}}}}, sm.Hosts)
	_, err = q.StoreMetadata("nope")
	require.ErrorIs(t, err, ErrUnknownStore)

	// A partition with standbys but no active names them, with no active.
	m, _ := b.Metadata()
	m.Hosts = m.Hosts[:1]
	b.setMeta(m, nil)
	km, err = q.PartitionMetadata(testStore, 0)
	require.NoError(t, err)
	require.Equal(t, KeyQueryMetadata{Partition: 0, Standbys: []string{"other:1"}}, km)

	// Before the first assignment: not available, because not started.
	b.setMeta(Metadata{}, ErrNotStarted)
	_, err = q.KeyMetadata(testStore, []byte("k"))
	require.ErrorIs(t, err, ErrNotAvailable)
	require.ErrorIs(t, err, ErrNotStarted)
	_, err = q.StoreMetadata(testStore)
	require.ErrorIs(t, err, ErrNotStarted)
}

func TestProvenanceOfAReplicaReplacedUnderTheRead(t *testing.T) {
	b, reps := oneInstance(t)
	k := keyIn(0, 4, "a")
	reps[0].put(t, k, 1)
	reps[0].put(t, k, 2)
	r := reps[0]
	r.store = provenanceStore{Store: r.store, during: func() {
		r.set(func(i *ReplicaInfo) { i.Role, i.Position, i.End = RoleRestoring, 0, 1<<40 })
	}}
	res, err := Get(context.Background(), NewQuerier(b), testStore, k, serde.String, serde.Int64)
	require.NoError(t, err)
	require.Equal(t, Provenance{Host: "self:1", Partition: 0, Role: RoleActive, Position: 2, Lag: 0}, res.Provenance)
}

// An answer never describes its replica as outside the bound it was served
// under: the bound is checked before the read, and a standby whose age or
// lag grows past it meanwhile is described as it was then, with the
// position after the read.
func TestProvenanceWithinTheBoundItWasServedUnder(t *testing.T) {
	for _, c := range []struct {
		bound  Staleness
		during func(i *ReplicaInfo)
	}{
		{MaxAge(time.Second), func(i *ReplicaInfo) {
			i.CaughtUpAgo, i.InputCommittedAgo = 1002*time.Millisecond, 1002*time.Millisecond
		}},
		{MaxLag(0), func(i *ReplicaInfo) { i.End = i.Position + 3 }},
		{ActiveOnly(), func(i *ReplicaInfo) { i.Role = RoleStandby }},
	} {
		t.Run(c.bound.String(), func(t *testing.T) {
			b, reps := oneInstance(t)
			k := keyIn(0, 4, "a")
			r := reps[0]
			r.put(t, k, 1)
			if c.bound.AllowsNonActive() {
				r.set(func(i *ReplicaInfo) {
					i.Role, i.LagConfirmedAgo = RoleStandby, 10*time.Millisecond
					i.CaughtUpAgo, i.InputCommittedAgo = 999*time.Millisecond, 999*time.Millisecond
				})
			}
			r.store = provenanceStore{Store: r.store, during: func() {
				r.put(t, k, 2)
				r.set(c.during)
			}}
			res, err := Get(context.Background(), NewQuerier(b), testStore, k, serde.String, serde.Int64, WithStaleness(c.bound))
			require.NoError(t, err)
			require.Equal(t, int64(2), res.Value)
			require.Equal(t, int64(2), res.Provenance.Position, "the position covers what the read saw")
			info := ReplicaInfo{Role: res.Provenance.Role, Position: res.Provenance.Position, Lag: res.Provenance.Lag,
				LagConfirmedAgo: res.Provenance.LagConfirmedAgo, CaughtUpAgo: res.Provenance.Age, InputCommittedAgo: res.Provenance.InputCommittedAgo}
			require.True(t, c.bound.Allows(info), "answer served under %s describes its replica as %+v", c.bound, res.Provenance)
		})
	}
}
