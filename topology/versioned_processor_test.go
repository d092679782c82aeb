package topology_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

// A Processor reaches a versioned store it declared through
// GetVersionedStore: each record puts a version at its time, and the
// processor forwards where that version ends and what the key held just
// before it.
func TestProcessorVersionedStore(t *testing.T) {
	info := topology.StoreInfo{Name: "history", Persistent: true, Logged: true, Kind: topology.VersionedKind, Retention: 100}
	b := topology.NewBuilder()
	b.AddStore(info)
	s := topology.Stream(b, "in", serde.String, serde.String)
	out := topology.Process(s, "versions", func() topology.Processor[string, string, string, string] {
		var vs *topology.VersionedKeyValueStore[string, string]
		return &funcProc[string, string, string, string]{
			init: func(ctx strCtx) (err error) {
				vs, err = topology.GetVersionedStore(ctx, info, serde.String, serde.String)
				return err
			},
			process: func(ctx strCtx, r strRec) error {
				ts := r.Timestamp.UnixMilli()
				before := "-"
				if v, found, err := vs.GetAsOf(r.Key, ts-1); err != nil {
					return err
				} else if found {
					to := "∞"
					if v.ValidTo != statestore.OpenEnded {
						to = fmt.Sprint(v.ValidTo)
					}
					before = fmt.Sprintf("%s[%d,%s)", v.Value, v.ValidFrom, to)
				}
				validTo, put, err := vs.Put(r.Key, r.Value, ts)
				if err != nil {
					return err
				}
				res := "dropped"
				switch {
				case put && validTo == statestore.OpenEnded:
					res = "latest"
				case put:
					res = fmt.Sprintf("until %d", validTo)
				}
				return ctx.Forward(topology.Record[string, string]{Key: r.Key, Value: res + " after " + before})
			},
		}
	}, "history")
	out.To("out", serde.String, serde.String)
	d, _ := start(t, b)
	in := topologytest.NewInputTopic(d, "in", serde.String, serde.String)
	for _, r := range []struct {
		v  string
		ms int64
	}{{"a", 10}, {"b", 20}, {"c", 15}, {"d", 200}, {"e", 50}} {
		require.NoError(t, in.PipeAt("k", r.v, time.UnixMilli(r.ms)))
	}
	kvs, err := topologytest.NewOutputTopic(d, "out", serde.String, serde.String).ReadKeyValues()
	require.NoError(t, err)
	var got []string
	for _, kv := range kvs {
		got = append(got, kv.Value)
	}
	require.Equal(t, []string{
		"latest after -",
		"latest after a[10,∞)",
		"until 20 after a[10,20)",
		"latest after b[20,∞)",
		"dropped after -", // observed time 200, history 100: 50 is too old
	}, got)

	_, err = topology.GetVersionedStore(d, topology.StoreInfo{Name: "history"}, serde.String, serde.String)
	require.ErrorContains(t, err, "not a versioned store")
}

// A stream joined with a table derived from a versioned one, without a
// store of its own, meets the derived value as of each record's time.
func TestJoinDerivedVersionedTable(t *testing.T) {
	b := topology.NewBuilder()
	prices := topology.Table(b, "right", serde.String, serde.String, "right-store", topology.Versioned(5*time.Minute)).
		Filter(func(_, v string) bool { return v != "b" })
	topology.Join(topology.Stream(b, "left", serde.String, serde.String), prices, func(l, r string) string { return l + "-" + r }).
		To("out", serde.String, serde.String)
	d, _ := start(t, b)
	right := topologytest.NewInputTopic(d, "right", serde.String, serde.String)
	left := topologytest.NewInputTopic(d, "left", serde.String, serde.String)
	for _, r := range []struct {
		v  string
		ms int64
	}{{"a", 4}, {"b", 6}, {"c", 10}} {
		require.NoError(t, right.PipeAt("k", r.v, time.UnixMilli(r.ms)))
	}
	for _, r := range []struct {
		v  string
		ms int64
	}{{"X", 5}, {"Y", 7}, {"Z", 11}, {"W", 8}, {"V", 4}, {"U", 3}} {
		require.NoError(t, left.PipeAt("k", r.v, time.UnixMilli(r.ms)))
	}
	kvs, err := topologytest.NewOutputTopic(d, "out", serde.String, serde.String).ReadKeyValues()
	require.NoError(t, err)
	var got []string
	for _, kv := range kvs {
		got = append(got, kv.Value)
	}
	require.Equal(t, []string{"X-a", "Z-c", "V-a"}, got, "Y and W meet b, which the filter drops; U comes before any price")
}

// With the record cache (topologytest's Commits), a plain table forwards
// each key's latest value at the commit, but a versioned table forwards
// every update at once, out-of-order ones included, as Kafka Streams,
// which does not cache versioned stores.
func TestVersionedTableBypassesTheRecordCache(t *testing.T) {
	for _, versioned := range []bool{false, true} {
		b := topology.NewBuilder()
		var opt topology.Option
		if versioned {
			opt = topology.Versioned(time.Minute)
		}
		topology.Table(b, "in", serde.String, serde.String, "in-store", opt).ToStream().To("out", serde.String, serde.String)
		topo, err := b.Build()
		require.NoError(t, err)
		d, err := topologytest.New(topo, topologytest.Config{Commits: true})
		require.NoError(t, err)
		in := topologytest.NewInputTopic(d, "in", serde.String, serde.String)
		outTopic := topologytest.NewOutputTopic(d, "out", serde.String, serde.String)
		for _, r := range []struct {
			v  string
			ms int64
		}{{"a", 10}, {"b", 20}, {"c", 15}} {
			require.NoError(t, in.PipeAt("k", r.v, time.UnixMilli(r.ms)))
		}
		values := func() []string {
			kvs, err := outTopic.ReadKeyValues()
			require.NoError(t, err)
			var vs []string
			for _, kv := range kvs {
				vs = append(vs, kv.Value)
			}
			return vs
		}
		before := values()
		require.NoError(t, d.Commit())
		after := values()
		if versioned {
			require.Equal(t, []string{"a", "b", "c"}, before)
			require.Empty(t, after)
		} else {
			require.Empty(t, before)
			require.Equal(t, []string{"c"}, after)
		}
		require.NoError(t, d.Close())
	}
}
