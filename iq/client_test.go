package iq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
)

// sixPartitions is 3 instances over 6 partitions: instance i is active
// for partitions i and i+3 and standby for i+1 and i+4 (mod 6).
func sixPartitions(t *testing.T) (*cluster, map[int32]*fakeReplica) {
	c := newCluster(t, 3, 6, ServerConfig{})
	actives := map[int32]*fakeReplica{}
	for i, in := range c.ins {
		for _, p := range []int32{int32(i), int32(i + 3)} {
			actives[p] = in.b.add(testStore, p, RoleActive)
			in.b.add(testStore, (p+1)%6, RoleStandby)
		}
	}
	c.publish()
	return c, actives
}

func TestClientReachesEveryKeyFromOneAddress(t *testing.T) {
	noLeaks(t)
	c, actives := sixPartitions(t)
	want := map[string]int64{}
	for i := 0; i < 60; i++ {
		k := fmt.Sprintf("word-%d", i)
		p := partitionOf(k, 6)
		actives[p].put(t, k, int64(i))
		want[k] = int64(i)
	}
	cl, err := NewClient([]string{c.ins[1].addr()}, ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()
	owner := func(p int32) string { return c.ins[p%3].addr() }
	for k, v := range want {
		res, err := ClientGet[string, int64](ctx, cl, testStore, k, serde.String)
		require.NoError(t, err, k)
		require.True(t, res.Found)
		require.Equal(t, v, res.Value)
		p := partitionOf(k, 6)
		require.Equal(t, p, res.Provenance.Partition)
		require.Equal(t, owner(p), res.Provenance.Host)
		require.Equal(t, RoleActive, res.Provenance.Role)
		last, ok := cl.LastPosition(testStore, p)
		require.True(t, ok)
		require.Equal(t, res.Provenance.Position, last)
	}
	res, err := ClientGet[string, int64](ctx, cl, testStore, "absent", serde.String)
	require.NoError(t, err)
	require.False(t, res.Found)
	require.Equal(t, owner(partitionOf("absent", 6)), res.Provenance.Host)

	km, err := cl.KeyMetadata(ctx, testStore, []byte("word-1"))
	require.NoError(t, err)
	p := partitionOf("word-1", 6)
	require.Equal(t, KeyQueryMetadata{Partition: p, Active: owner(p), Standbys: []string{c.ins[(p+5)%6%3].addr()}}, km)

	// Unknown store: typed, after one refresh.
	_, err = ClientGet[string, int64](ctx, cl, "nope", "k", serde.String)
	require.ErrorIs(t, err, ErrUnknownStore)
	// The default bound with the active gone: typed, with the attempts.
	c.kill(int(p % 3))
	_, err = cl.Get(ctx, testStore, "word-1", []byte("word-1"))
	require.ErrorIs(t, err, ErrNotAvailable)
	var ue *UnavailableError
	require.True(t, errors.As(err, &ue))
	require.Equal(t, p, ue.Partition)
	require.NotEmpty(t, ue.Tried)
	require.Equal(t, owner(p), ue.Tried[0].Host)
	// Within a bound the standby answers, with no failed query, for a
	// client that does not insist on monotonic reads (the fake standby is
	// behind everything the first client saw).
	_, err = cl.Get(ctx, testStore, "word-1", []byte("word-1"), WithStaleness(MaxLag(10000)))
	require.True(t, errors.As(err, &ue))
	require.ErrorIs(t, ue.Tried[len(ue.Tried)-1].Err, ErrBehind)
	cl2, err := NewClient([]string{c.ins[(p+1)%3].addr()}, ClientOptions{DisableMonotonic: true})
	require.NoError(t, err)
	defer cl2.Close()
	res, err = ClientGet[string, int64](ctx, cl2, testStore, "word-1", serde.String, WithStaleness(MaxLag(10000)))
	require.NoError(t, err)
	require.Equal(t, RoleStandby, res.Provenance.Role)
	require.False(t, res.Found, "the fake standby never received the write")
}

func TestClientFollowsAHandOver(t *testing.T) {
	noLeaks(t)
	c, actives := sixPartitions(t)
	k := keyIn(0, 6, "h")
	actives[0].put(t, k, 1)
	cl, err := NewClient([]string{"http://" + c.ins[2].addr() + "/"}, ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()
	res, err := ClientGet[string, int64](ctx, cl, testStore, k, serde.String)
	require.NoError(t, err)
	require.Equal(t, c.ins[0].addr(), res.Provenance.Host)

	// Partition 0 moves from instance 0 to its standby on instance 1,
	// which has caught up; the client still holds the old table.
	c.ins[0].b.remove(testStore, 0)
	c.ins[1].b.remove(testStore, 0)
	moved := c.ins[1].b.add(testStore, 0, RoleActive)
	moved.put(t, k, 1)
	moved.put(t, k, 2)
	c.publish()
	res, err = ClientGet[string, int64](ctx, cl, testStore, k, serde.String)
	require.NoError(t, err)
	require.Equal(t, c.ins[1].addr(), res.Provenance.Host)
	require.Equal(t, int64(2), res.Value)
}

func TestClientMonotonicReadsAcrossFailover(t *testing.T) {
	noLeaks(t)
	for _, monotonic := range []bool{true, false} {
		t.Run(fmt.Sprintf("monotonic=%v", monotonic), func(t *testing.T) {
			c := newCluster(t, 3, 1, ServerConfig{})
			active := c.ins[0].b.add(testStore, 0, RoleActive)
			standby := c.ins[1].b.add(testStore, 0, RoleStandby)
			c.publish()
			const k = "word"
			// The value is the position it was written at: the standby
			// is 4 records behind the active when the active dies.
			for i := int64(1); i <= 10; i++ {
				active.put(t, k, i)
				if i <= 6 {
					standby.put(t, k, i)
				}
			}
			standby.set(func(i *ReplicaInfo) { i.End = 10 })
			cl, err := NewClient([]string{c.ins[2].addr()}, ClientOptions{DisableMonotonic: !monotonic})
			require.NoError(t, err)
			defer cl.Close()
			ctx := context.Background()
			bound := WithStaleness(MaxLag(10000))
			res, err := ClientGet[string, int64](ctx, cl, testStore, k, serde.String, bound)
			require.NoError(t, err)
			require.Equal(t, int64(10), res.Value)

			c.kill(0)
			res, err = ClientGet[string, int64](ctx, cl, testStore, k, serde.String, bound)
			if !monotonic {
				// Without monotonic reads the count goes backwards.
				require.NoError(t, err)
				require.Equal(t, int64(6), res.Value)
				return
			}
			require.ErrorIs(t, err, ErrNotAvailable)
			var ue *UnavailableError
			require.True(t, errors.As(err, &ue))
			require.ErrorIs(t, ue.Tried[len(ue.Tried)-1].Err, ErrBehind)

			// The standby catches up while the client keeps reading: no
			// answer is ever older than one already returned.
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int64(7); i <= 40; i++ {
					standby.put(t, k, i)
				}
			}()
			last := int64(10)
			deadline := time.Now().Add(10 * time.Second)
			for last < 40 {
				require.True(t, time.Now().Before(deadline), "standby never caught up for the client")
				res, err := ClientGet[string, int64](ctx, cl, testStore, k, serde.String, bound)
				if err != nil {
					require.ErrorIs(t, err, ErrNotAvailable)
					continue
				}
				require.GreaterOrEqual(t, res.Value, last)
				require.GreaterOrEqual(t, res.Provenance.Position, res.Value)
				require.Equal(t, RoleStandby, res.Provenance.Role)
				last = res.Value
			}
			wg.Wait()
		})
	}
}

func TestClientBootstrap(t *testing.T) {
	noLeaks(t)
	_, err := NewClient(nil, ClientOptions{})
	require.Error(t, err)
	_, err = NewClient([]string{"no-port"}, ClientOptions{})
	require.Error(t, err)

	c, actives := sixPartitions(t)
	actives[3].put(t, keyIn(3, 6, "b"), 9)
	// A dead seed first, a live one second: the client bootstraps anyway.
	dead := c.ins[0].addr()
	c.kill(0)
	cl, err := NewClient([]string{dead, c.ins[1].addr()}, ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	defer cl.Close()
	m, err := cl.Metadata(context.Background())
	require.NoError(t, err)
	require.Len(t, m.Hosts, 3)
	require.Equal(t, int32(6), m.Partitions[testStore])

	// Nothing reachable: typed, not a hang.
	c.kill(1)
	c.kill(2)
	cl2, err := NewClient([]string{dead}, ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	defer cl2.Close()
	_, err = ClientGet[string, int64](context.Background(), cl2, testStore, "x", serde.String)
	require.ErrorIs(t, err, ErrNotAvailable)
}

// A replica just behind what the client saw is given a moment to catch up
// instead of failing the lookup.
func TestClientWaitsForBehindReplica(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3, 1, ServerConfig{})
	active := c.ins[0].b.add(testStore, 0, RoleActive)
	standby := c.ins[1].b.add(testStore, 0, RoleStandby)
	c.publish()
	const k = "word"
	for i := int64(1); i <= 10; i++ {
		active.put(t, k, i)
		if i <= 6 {
			standby.put(t, k, i)
		}
	}
	standby.set(func(i *ReplicaInfo) { i.End = 10 })
	cl, err := NewClient([]string{c.ins[2].addr()}, ClientOptions{BehindWait: 5 * time.Second})
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()
	bound := WithStaleness(MaxLag(10000))
	res, err := ClientGet[string, int64](ctx, cl, testStore, k, serde.String, bound)
	require.NoError(t, err)
	require.Equal(t, int64(10), res.Value)

	c.kill(0)
	caughtUp := make(chan struct{})
	go func() {
		defer close(caughtUp)
		time.Sleep(100 * time.Millisecond) // the standby catches up while the lookup waits
		for i := int64(7); i <= 10; i++ {
			standby.put(t, k, i)
		}
	}()
	res, err = ClientGet[string, int64](ctx, cl, testStore, k, serde.String, bound)
	<-caughtUp
	require.NoError(t, err, "the lookup waits for the standby instead of failing")
	require.Equal(t, int64(10), res.Value)
	require.Equal(t, RoleStandby, res.Provenance.Role)
}

// A lookup that finds the partition moved — the host the table names says
// it holds none, and the instances' tables still say so for a moment, as
// during a rebalance — refreshes the table and asks again within
// RebalanceWait instead of failing at the first stale table.
func TestClientWaitsOutAMovingPartition(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 2, 1, ServerConfig{SuspectFor: time.Minute})
	c.ins[0].b.add(testStore, 0, RoleActive).put(t, "w", 7)
	c.publish()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := NewClient([]string{c.ins[0].addr()}, ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	res, err := ClientGet[string, int64](ctx, cl, testStore, "w", serde.String)
	require.NoError(t, err)
	require.EqualValues(t, 7, res.Value)

	// The partition moves to instance 1; the tables learn of it only
	// after the client has been refused and has asked for the table
	// again, more than a client that gives up at once would.
	base := c.ins[0].hits.Load()
	c.ins[0].b.remove(testStore, 0)
	c.ins[1].b.add(testStore, 0, RoleActive).put(t, "w", 8)
	published := make(chan struct{})
	go func() {
		defer close(published)
		for c.ins[0].hits.Load() < base+3 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		c.publish()
	}()
	res, err = ClientGet[string, int64](ctx, cl, testStore, "w", serde.String)
	<-published
	require.NoError(t, err)
	require.EqualValues(t, 8, res.Value)

}
