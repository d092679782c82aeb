package iq

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
)

// globalCluster is three fake instances each holding the store "counts" as
// a global store (one partition, role global) whose key "k" holds 10+i on
// instance i, so that an answer tells which instance gave it.
func globalCluster(t *testing.T) *cluster {
	c := newCluster(t, 3, 1, ServerConfig{})
	for i, in := range c.ins {
		r := in.b.add(testStore, 0, RoleGlobal)
		r.set(func(ri *ReplicaInfo) { ri.End, ri.LagConfirmedAgo, ri.CaughtUpAgo = 5, 0, Unknown })
		r.put(t, "k", int64(10+i))
	}
	m := c.publish()
	m.Global = []string{testStore}
	for _, in := range c.ins {
		in.b.setMeta(m, nil)
	}
	return c
}

// TestGlobalStoreAnsweredLocally checks that a global store is answered by
// the instance asked, in-process and over HTTP with routing on, with role
// global, under the default bound once restored and only under any while
// rebuilding.
func TestGlobalStoreAnsweredLocally(t *testing.T) {
	c := globalCluster(t)
	ctx := context.Background()
	q := NewQuerier(c.ins[1].b)
	res, err := Get(ctx, q, testStore, "k", serde.String, serde.Int64)
	require.NoError(t, err)
	require.Equal(t, int64(11), res.Value)
	require.Equal(t, RoleGlobal, res.Provenance.Role)
	require.Equal(t, int32(0), res.Provenance.Partition)
	require.Positive(t, res.Provenance.Lag, "lagging, and still the answer: there is no active to prefer")

	// Routing on: still local, though not caught up.
	resp, err := http.Get("http://" + c.ins[1].addr() + "/v1/stores/counts/keys?key=k&route=true")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var k wireKey
	require.NoError(t, json.Unmarshal(body, &k))
	require.Equal(t, "11", string(k.Value))
	require.Equal(t, RoleGlobal, k.ServedBy.Role)
	require.Zero(t, c.ins[0].hits.Load()+c.ins[2].hits.Load(), "nothing forwarded")

	r, err := c.ins[1].b.Replica(testStore, 0)
	require.NoError(t, err)
	r.(*fakeReplica).set(func(ri *ReplicaInfo) { ri.Rebuilding = true })
	_, err = Get(ctx, q, testStore, "k", serde.String, serde.Int64)
	var se *StaleError
	require.ErrorAs(t, err, &se)
	require.Equal(t, RoleGlobal, se.Role)
	_, err = Get(ctx, q, testStore, "k", serde.String, serde.Int64, WithStaleness(AnyStaleness()))
	require.NoError(t, err)

	role, err := json.Marshal(RoleGlobal)
	require.NoError(t, err)
	require.Equal(t, `"global"`, string(role))
	var back Role
	require.NoError(t, json.Unmarshal(role, &back))
	require.Equal(t, RoleGlobal, back)
}

// TestClientAsksGlobalStoreOfFirstInstance checks that the routing Client
// answers a global store from the first instance it was given, without
// routing by partition, and falls back to the others when it is down.
func TestClientAsksGlobalStoreOfFirstInstance(t *testing.T) {
	c := globalCluster(t)
	ctx := context.Background()
	cl, err := NewClient([]string{c.ins[2].addr(), c.ins[0].addr()}, ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	res, err := ClientGet[string, int64](ctx, cl, testStore, "k", serde.String)
	require.NoError(t, err)
	require.Equal(t, int64(12), res.Value)
	require.Equal(t, RoleGlobal, res.Provenance.Role)
	require.Equal(t, c.ins[2].addr(), res.Provenance.Host)
	require.Zero(t, c.ins[1].hits.Load(), "no instance but the first is asked")

	c.kill(2)
	res, err = ClientGet[string, int64](ctx, cl, testStore, "k", serde.String)
	require.NoError(t, err)
	require.NotEqual(t, c.ins[2].addr(), res.Provenance.Host)
	require.Equal(t, RoleGlobal, res.Provenance.Role)

	res, err = ClientGet[string, int64](ctx, cl, testStore, "absent", serde.String)
	require.NoError(t, err)
	require.False(t, res.Found)
	require.Equal(t, RoleGlobal, res.Provenance.Role)
}

// getInto asks an instance for path and decodes the 200 answer into out.
func getInto(t *testing.T, addr, path string, out any) {
	t.Helper()
	st, body := getBody(t, "http://"+addr+path)
	require.Equal(t, http.StatusOK, st, string(body))
	require.NoError(t, json.Unmarshal(body, out), string(body))
}

// TestGlobalStoreRangesAndKeyMetadata checks that range, all-keys and count
// queries of a global store are answered from the local copy, as partition
// 0 with role global and its lag, in-process and over HTTP with and
// without routing, and that key metadata says every instance holds the
// key rather than naming a partition's hosts.
func TestGlobalStoreRangesAndKeyMetadata(t *testing.T) {
	c := globalCluster(t)
	ctx := context.Background()
	q := NewQuerier(c.ins[1].b)
	all, err := All(ctx, q, testStore, serde.String, serde.Int64)
	require.NoError(t, err)
	require.Empty(t, all.Refused)
	require.Len(t, all.Partitions, 1)
	p := all.Partitions[0]
	require.Equal(t, []KeyValue[string, int64]{{Key: "k", Value: 11}}, p.Entries)
	require.Equal(t, RoleGlobal, p.Provenance.Role)
	require.Equal(t, int32(0), p.Provenance.Partition)
	require.Equal(t, int64(4), p.Provenance.Lag, "end 5, position 1")
	rng, err := Range(ctx, q, testStore, "a", "z", serde.String, serde.Int64)
	require.NoError(t, err)
	require.Len(t, rng.Partitions, 1)
	require.Len(t, rng.Partitions[0].Entries, 1)
	cnt, err := q.ApproximateCount(ctx, testStore)
	require.NoError(t, err)
	require.Len(t, cnt.Partitions, 1)
	require.Equal(t, RoleGlobal, cnt.Partitions[0].Provenance.Role)

	for _, route := range []string{"true", "false"} {
		var wr wireRange
		getInto(t, c.ins[1].addr(), "/v1/stores/counts/range?route="+route, &wr)
		require.Empty(t, wr.Failed, "route=%s", route)
		require.Len(t, wr.Partitions, 1, "route=%s", route)
		require.Equal(t, RoleGlobal, wr.Partitions[0].ServedBy.Role)
		require.Equal(t, c.ins[1].addr(), wr.Partitions[0].ServedBy.Host)
		require.Equal(t, "11", string(wr.Partitions[0].Entries[0].Value))
		getInto(t, c.ins[1].addr(), "/v1/stores/counts/range?from=a&to=z&route="+route, &wr)
		require.Len(t, wr.Partitions, 1, "route=%s", route)
		require.Len(t, wr.Partitions[0].Entries, 1, "route=%s", route)
	}
	require.Zero(t, c.ins[0].hits.Load()+c.ins[2].hits.Load(), "nothing forwarded")

	km, err := q.KeyMetadata(testStore, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, KeyQueryMetadata{Partition: 0, Global: true}, km)
	var wkm wireKeyMetadata
	getInto(t, c.ins[1].addr(), "/v1/metadata/stores/counts/keys/k", &wkm)
	require.True(t, wkm.Global)
	require.Nil(t, wkm.Active)
	sm, err := q.StoreMetadata(testStore)
	require.NoError(t, err)
	require.True(t, sm.Global)

	cl, err := NewClient([]string{c.ins[0].addr()}, ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	km, err = cl.KeyMetadata(ctx, testStore, []byte("anything"))
	require.NoError(t, err)
	require.Equal(t, KeyQueryMetadata{Partition: 0, Global: true}, km)
}

// TestGlobalStoreBeforeFirstAssignment checks that a routing table served
// before the instance's first assignment, which names the global stores
// alone, lets the Client read them, while the other stores are reported
// not started rather than unknown.
func TestGlobalStoreBeforeFirstAssignment(t *testing.T) {
	c := globalCluster(t)
	ctx := context.Background()
	m := Metadata{Unassigned: true, Partitions: map[string]int32{testStore: 1}, Global: []string{testStore}}
	for _, in := range c.ins {
		in.b.setMeta(m, nil)
	}
	var wm wireMetadata
	getInto(t, c.ins[0].addr(), "/v1/metadata", &wm)
	require.True(t, wm.Unassigned)
	require.Equal(t, []string{testStore}, wm.Global)

	cl, err := NewClient([]string{c.ins[1].addr()}, ClientOptions{RebalanceWait: -1})
	require.NoError(t, err)
	defer cl.Close()
	res, err := ClientGet[string, int64](ctx, cl, testStore, "k", serde.String)
	require.NoError(t, err)
	require.Equal(t, int64(11), res.Value)
	require.Equal(t, RoleGlobal, res.Provenance.Role)

	var wr wireRange
	getInto(t, c.ins[1].addr(), "/v1/stores/counts/range?route=true", &wr)
	require.Len(t, wr.Partitions, 1)
	require.Equal(t, RoleGlobal, wr.Partitions[0].ServedBy.Role)
	var k wireKey
	getInto(t, c.ins[1].addr(), "/v1/stores/counts/keys?key=k&route=true", &k)
	require.Equal(t, "11", string(k.Value))

	_, err = cl.Get(ctx, "other", "k", []byte("k"))
	require.ErrorIs(t, err, ErrNotStarted)
	require.NotErrorIs(t, err, ErrUnknownStore)
	_, err = cl.KeyMetadata(ctx, "other", []byte("k"))
	require.ErrorIs(t, err, ErrNotStarted)

	q := NewQuerier(c.ins[1].b)
	_, err = q.PartitionMetadata("other", 0)
	require.ErrorIs(t, err, ErrNotStarted)
	all, err := All(ctx, q, testStore, serde.String, serde.Int64)
	require.NoError(t, err)
	require.Len(t, all.Partitions, 1)
}
