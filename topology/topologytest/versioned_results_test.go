package topologytest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

// versionedStore opens the versioned store name of d's topology.
func versionedStore[V any](t *testing.T, d *topologytest.Driver, topo *topology.Topology, name string, vs serde.Serde[V]) *topology.VersionedKeyValueStore[string, V] {
	t.Helper()
	for _, st := range topo.Describe().SubTopologies {
		for _, info := range st.Stores {
			if info.Name == name {
				s, err := topology.GetVersionedStore(d, info, serde.String, vs)
				require.NoError(t, err)
				return s
			}
		}
	}
	t.Fatalf("no store %q", name)
	return nil
}

func at(ms int64) time.Time { return time.UnixMilli(ms) }

// A count given Versioned keeps its results as versions, as Kafka
// Streams' KStreamAggregate does with a versioned store: each at the
// latest time of its records, forwarded as it is put, and one older than
// the store's history neither put nor forwarded.
func TestVersionedAggregationResults(t *testing.T) {
	b := topology.NewBuilder()
	topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).
		Count("counts", topology.Versioned(10*time.Millisecond)).ToStream().To("out", serde.String, serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	d, err := topologytest.New(topo, topologytest.Config{})
	require.NoError(t, err)
	defer d.Close()
	in := topologytest.NewInputTopic(d, "in", serde.String, serde.String)
	out := topologytest.NewOutputTopic(d, "out", serde.String, serde.Int64)

	require.NoError(t, in.PipeAt("a", "x", at(100)))
	require.NoError(t, in.PipeAt("b", "x", at(200)))
	require.NoError(t, in.PipeAt("a", "x", at(50)))  // a's count would be at 100, older than 200-10: dropped
	require.NoError(t, in.PipeAt("b", "x", at(195))) // b's count is at 200 still
	require.NoError(t, in.PipeAt("a", "x", at(300)))
	recs, err := out.ReadRecords()
	require.NoError(t, err)
	type res struct {
		k  string
		v  int64
		ts int64
	}
	var got []res
	for _, r := range recs {
		got = append(got, res{r.Key, r.Value, r.Timestamp.UnixMilli()})
	}
	require.Equal(t, []res{{"a", 1, 100}, {"b", 1, 200}, {"b", 2, 200}, {"a", 2, 300}}, got)

	s := versionedStore(t, d, topo, "counts", serde.Int64)
	v, found, err := s.Get("a")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, topology.VersionedRecord[int64]{Value: 2, ValidFrom: 300, ValidTo: 1<<63 - 1}, v)
	v, found, err = s.GetAsOf("a", 295)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, int64(1), v.Value, "the count before, within the history")
}

// A table join given Versioned keeps its results as versions, each at the
// later of its sides' times: a result older than the key's latest goes
// into the history and is forwarded marked as not the latest, so a table
// join downstream ignores it, as Kafka Streams' KTableKTableJoin with a
// versioned store does, while the store's latest result stays.
func TestVersionedTableJoinResults(t *testing.T) {
	b := topology.NewBuilder()
	l := topology.Table(b, "l", serde.String, serde.String, "l-store")
	r := topology.Table(b, "r", serde.String, serde.String, "r-store")
	joined := topology.JoinTables(l, r, func(lv, rv string) string { return lv + rv }, "joined", serde.String, topology.Versioned(time.Minute))
	joined.ToStream().To("out", serde.String, serde.String)
	other := topology.Table(b, "o", serde.String, serde.String, "o-store")
	topology.JoinTables(joined, other, func(jv, ov string) string { return jv + "+" + ov }, "", serde.String).
		ToStream().To("downstream", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	d, err := topologytest.New(topo, topologytest.Config{})
	require.NoError(t, err)
	defer d.Close()
	li := topologytest.NewInputTopic(d, "l", serde.String, serde.String)
	ri := topologytest.NewInputTopic(d, "r", serde.String, serde.String)
	oi := topologytest.NewInputTopic(d, "o", serde.String, serde.String)
	outTopic := topologytest.NewOutputTopic(d, "out", serde.String, serde.String)
	downTopic := topologytest.NewOutputTopic(d, "downstream", serde.String, serde.String)

	require.NoError(t, oi.PipeAt("k", "o", at(1)))
	require.NoError(t, li.PipeAt("k", "l1", at(10)))
	require.NoError(t, ri.PipeAt("k", "r1", at(30))) // l1r1 at 30
	require.NoError(t, li.PipeAt("k", "l2", at(5)))  // l2r1 at 30: replaces it
	require.NoError(t, ri.PipeAt("k", "r0", at(20))) // l2r0 at 20: history only
	kvs, err := outTopic.ReadKeyValues()
	require.NoError(t, err)
	var got []string
	for _, kv := range kvs {
		got = append(got, kv.Value)
	}
	require.Equal(t, []string{"l1r1", "l2r1", "l2r0"}, got, "every result is forwarded")
	kvs, err = downTopic.ReadKeyValues()
	require.NoError(t, err)
	got = got[:0]
	for _, kv := range kvs {
		got = append(got, kv.Value)
	}
	require.Equal(t, []string{"l1r1+o", "l2r1+o"}, got, "the result that is not the latest goes no further")

	s := versionedStore(t, d, topo, "joined", serde.String)
	v, found, err := s.Get("k")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "l2r1", v.Value)
	v, found, err = s.GetAsOf("k", 25)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "l2r0", v.Value)
}

// A foreign-key join given Versioned keeps its results as versions too,
// and a stream joined with it meets, for each record, the result its key
// had at the record's time.
func TestVersionedForeignKeyJoinResults(t *testing.T) {
	b := topology.NewBuilder()
	l := topology.Table(b, "l", serde.String, serde.String, "l-store")
	r := topology.Table(b, "r", serde.String, serde.String, "r-store")
	joined := topology.JoinByForeignKey(l, r, func(_, v string) string { return v }, func(lv, rv string) string { return lv + "=" + rv },
		"fk", serde.String, topology.Versioned(time.Minute))
	topology.Join(topology.Stream(b, "s", serde.String, serde.String), joined, func(sv, jv string) string { return sv + ":" + jv }).
		To("out", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	d, err := topologytest.New(topo, topologytest.Config{})
	require.NoError(t, err)
	defer d.Close()
	li := topologytest.NewInputTopic(d, "l", serde.String, serde.String)
	ri := topologytest.NewInputTopic(d, "r", serde.String, serde.String)
	si := topologytest.NewInputTopic(d, "s", serde.String, serde.String)
	out := topologytest.NewOutputTopic(d, "out", serde.String, serde.String)

	require.NoError(t, ri.PipeAt("x", "X1", at(10)))
	require.NoError(t, ri.PipeAt("y", "Y1", at(10)))
	require.NoError(t, li.PipeAt("k", "x", at(20))) // k=x=X1 at 20
	require.NoError(t, li.PipeAt("k", "y", at(40))) // k=y=Y1 at 40
	require.NoError(t, si.PipeAt("k", "s30", at(30)))
	require.NoError(t, si.PipeAt("k", "s50", at(50)))
	kvs, err := out.ReadKeyValues()
	require.NoError(t, err)
	var got []string
	for _, kv := range kvs {
		got = append(got, kv.Value)
	}
	require.Equal(t, []string{"s30:x=X1", "s50:y=Y1"}, got)
	s := versionedStore(t, d, topo, "fk", serde.String)
	v, found, err := s.GetAsOf("k", 25)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "x=X1", v.Value)
}
