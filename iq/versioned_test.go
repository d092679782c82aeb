package iq

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

const verStore = "prices"

var verOpts = statestore.VersionedOptions{HistoryRetention: 1000}

// versionedCluster is two instances with the key-value store counts and
// the versioned store prices, of two partitions: instance i holds
// partition i of each as active and the other as standby.
func versionedCluster(t *testing.T) (*cluster, map[[2]int]*fakeReplica) {
	c := newCluster(t, 2, 2, ServerConfig{})
	reps := map[[2]int]*fakeReplica{}
	for i, in := range c.ins {
		in.b.partitions = map[string]int32{testStore: 2, verStore: 2}
		in.b.layouts = map[string]StoreLayout{verStore: {Kind: KindVersioned, Versioned: verOpts}}
		in.srv = NewServer(in.b, ServerConfig{}, countsCodec(), CodecFor(verStore, serde.String, serde.Int64, nil))
		t.Cleanup(in.srv.Close)
		for _, p := range []struct {
			part int
			role Role
		}{{i, RoleActive}, {1 - i, RoleStandby}} {
			in.b.add(testStore, int32(p.part), p.role)
			reps[[2]int{i, p.part}] = in.b.add(verStore, int32(p.part), p.role)
		}
	}
	c.publish()
	return c, reps
}

// putVersion writes a version through the store's changelog form, as a
// commit or a standby's changelog reader would, and moves the position.
func putVersion(t testing.TB, r *fakeReplica, key string, value int64, ts int64) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	vs, err := statestore.NewVersionedStore(r.store, verOpts)
	require.NoError(t, err)
	v, _ := serde.Int64.Encode(value)
	_, _, err = vs.Put([]byte(key), v, ts)
	require.NoError(t, err)
	r.info.Position++
	r.info.End = max(r.info.End, r.info.Position)
	r.info.Lag = r.info.End - r.info.Position
}

// The value of a key as of a time, from the Querier, over HTTP and through
// a Client, from an active or, within the bound, a standby, each answer
// with its provenance and the version's validity.
func TestVersionedQueries(t *testing.T) {
	noLeaks(t)
	c, reps := versionedCluster(t)
	k := keyIn(0, 2, "sku")
	// Partition 0: active on instance 0, standby on instance 1, both at
	// the same position.
	for _, r := range []*fakeReplica{reps[[2]int{0, 0}], reps[[2]int{1, 0}]} {
		putVersion(t, r, k, 10, 1000)
		putVersion(t, r, k, 20, 2000)
		putVersion(t, r, k, 30, 2600)
	}
	ctx := context.Background()
	q := NewQuerier(c.ins[0].b)

	res, err := Get(ctx, q, verStore, k, serde.String, serde.Int64)
	require.NoError(t, err)
	require.Equal(t, Result[int64]{Value: 30, Found: true, Timestamp: 2600, ValidFrom: 2600, ValidTo: statestore.OpenEnded, Provenance: res.Provenance}, res)
	require.Equal(t, RoleActive, res.Provenance.Role)
	res, err = Get(ctx, q, verStore, k, serde.String, serde.Int64, AsOf(time.UnixMilli(2500)))
	require.NoError(t, err)
	require.Equal(t, Result[int64]{Value: 20, Found: true, Timestamp: 2000, ValidFrom: 2000, ValidTo: 2600, Provenance: res.Provenance}, res)
	res, err = Get(ctx, q, verStore, k, serde.String, serde.Int64, AsOfMillis(1600))
	require.NoError(t, err)
	require.Equal(t, int64(10), res.Value, "observed time 2600, history 1000: 1600 is the oldest time kept")
	res, err = Get(ctx, q, verStore, k, serde.String, serde.Int64, AsOfMillis(1599))
	require.NoError(t, err)
	require.False(t, res.Found, "older than the history kept")

	// A standby at the same position answers alike.
	res, err = Get(ctx, NewQuerier(c.ins[1].b), verStore, k, serde.String, serde.Int64, AsOfMillis(2500), WithStaleness(MaxLag(0)))
	require.NoError(t, err)
	require.Equal(t, RoleStandby, res.Provenance.Role)
	require.Equal(t, Result[int64]{Value: 20, Found: true, Timestamp: 2000, ValidFrom: 2000, ValidTo: 2600, Provenance: res.Provenance}, res)

	// As-of on a store without history, and ranges over a versioned
	// store, are refused as invalid.
	_, err = Get(ctx, q, testStore, k, serde.String, serde.Int64, AsOfMillis(2500))
	require.ErrorIs(t, err, ErrInvalidQuery)
	_, err = q.RangeBytes(ctx, verStore, nil, nil, WithPartition(0))
	require.ErrorIs(t, err, ErrInvalidQuery)

	// HTTP, asked of the instance without the active: routed to it.
	get := func(query url.Values) (int, map[string]any) {
		t.Helper()
		query.Set("key", k)
		resp, err := http.Get("http://" + c.ins[1].addr() + "/v1/stores/" + verStore + "/keys?" + query.Encode())
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var out map[string]any
		require.NoError(t, json.Unmarshal(body, &out), string(body))
		return resp.StatusCode, out
	}
	st, out := get(url.Values{"as_of": {time.UnixMilli(2500).UTC().Format(time.RFC3339Nano)}})
	require.Equal(t, http.StatusOK, st, out)
	require.Equal(t, 20.0, out["value"])
	require.Equal(t, 2000.0, out["valid_from"])
	require.Equal(t, 2600.0, out["valid_to"])
	require.Equal(t, "active", out["served_by"].(map[string]any)["role"])
	st, out = get(url.Values{"as_of": {"3500"}})
	require.Equal(t, http.StatusOK, st, out)
	require.Equal(t, 30.0, out["value"])
	require.Equal(t, 2600.0, out["valid_from"])
	require.NotContains(t, out, "valid_to", "the latest version is valid from then on")
	st, _ = get(url.Values{"as_of": {"500"}})
	require.Equal(t, http.StatusNotFound, st)
	st, _ = get(url.Values{"as_of": {"yesterday"}})
	require.Equal(t, http.StatusBadRequest, st)

	// A Client, with the active gone: the standby answers within the
	// bound, as of the time asked.
	cl, err := NewClient([]string{c.ins[1].addr()}, ClientOptions{DisableMonotonic: true})
	require.NoError(t, err)
	defer cl.Close()
	cres, err := ClientGet[string, int64](ctx, cl, verStore, k, serde.String, AsOfMillis(1700))
	require.NoError(t, err)
	require.Equal(t, Result[int64]{Value: 10, Found: true, Timestamp: 1000, ValidFrom: 1000, ValidTo: 2000, Provenance: cres.Provenance}, cres)
	require.Equal(t, RoleActive, cres.Provenance.Role)
	c.kill(0)
	cres, err = ClientGet[string, int64](ctx, cl, verStore, k, serde.String, AsOfMillis(1700), WithStaleness(MaxLag(0)))
	require.NoError(t, err)
	require.Equal(t, RoleStandby, cres.Provenance.Role)
	require.Equal(t, Result[int64]{Value: 10, Found: true, Timestamp: 1000, ValidFrom: 1000, ValidTo: 2000, Provenance: cres.Provenance}, cres)
	_, err = ClientGet[string, int64](ctx, cl, testStore, k, serde.String, AsOfMillis(1500), WithStaleness(MaxLag(0)))
	require.ErrorIs(t, err, ErrInvalidQuery)
}
