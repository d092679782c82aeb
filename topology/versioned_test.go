package topology

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
)

// A join grace needs a versioned table with at least that much history,
// and the stream's value serde to keep waiting records in its store.
func TestJoinGraceChecks(t *testing.T) {
	build := func(history time.Duration, versioned bool, opts ...Option) error {
		b := NewBuilder()
		var topt Option
		if versioned {
			topt = Versioned(history)
		}
		tbl := Table(b, "right", serde.String, serde.String, "right-store", topt)
		Join(Stream(b, "left", serde.String, serde.String), tbl, func(l, r string) string { return l + r }, opts...).To("out", serde.String, serde.String)
		_, err := b.Build()
		return err
	}
	grace := JoinGrace(time.Minute)
	vs := JoinValueSerde(serde.String)
	require.NoError(t, build(5*time.Minute, true, grace, vs, Named("j")))
	require.ErrorContains(t, build(0, false, grace, vs), "needs a table that keeps its history")
	require.ErrorContains(t, build(30*time.Second, true, grace, vs), "exceeds the table's history")
	require.ErrorContains(t, build(5*time.Minute, true, grace), "JoinValueSerde")
	require.ErrorContains(t, build(5*time.Minute, true, JoinGrace(-time.Second), vs), "negative")
	require.ErrorContains(t, build(0, false, JoinGrace(0), vs), "needs a table that keeps its history", "as in Kafka Streams, even a zero grace")
	require.NoError(t, build(0, true, JoinGrace(0), vs))

	// The history is inherited through derived tables without a store of
	// their own, as in Kafka Streams' KStreamKTableJoinTest
	// shouldNotFailIfTableIsVersionedButMaterializationIsInherited and the
	// two tests after it.
	derived := func(history time.Duration, versioned bool, opts ...Option) error {
		b := NewBuilder()
		var topt Option
		if versioned {
			topt = Versioned(history)
		}
		tbl := Table(b, "right", serde.String, serde.String, "right-store", topt).Filter(func(string, string) bool { return true }, opts...)
		Join(Stream(b, "left", serde.String, serde.String), tbl, func(l, r string) string { return l + r }, JoinGrace(6*time.Millisecond), vs).To("out", serde.String, serde.String)
		_, err := b.Build()
		return err
	}
	require.NoError(t, derived(5*time.Minute, true))
	require.ErrorContains(t, derived(0, false), "needs a table that keeps its history")
	require.ErrorContains(t, derived(0, true), "exceeds the table's history")
	require.ErrorContains(t, derived(5*time.Minute, true, Materialized("filtered")), "needs a table that keeps its history",
		"a derived table in a store of its own keeps no history")

	b := NewBuilder()
	tbl := Table(b, "right", serde.String, serde.String, "right-store", Versioned(5*time.Minute))
	Join(Stream(b, "left", serde.String, serde.String), tbl, func(l, r string) string { return l + r }, grace, vs, Named("j")).To("out", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	var stores []StoreInfo
	for _, st := range topo.Describe().SubTopologies {
		stores = append(stores, st.Stores...)
	}
	require.ElementsMatch(t, []StoreInfo{
		{Name: "right-store", Persistent: true, Logged: true, Kind: VersionedKind, Retention: 5 * 60 * 1000},
		{Name: "j-buffer", Persistent: true, Logged: true},
	}, stores)
}

// A versioned table forwards out-of-order updates, which a suppression
// cannot hold as latest values: Kafka Streams refuses it, and so does
// the Builder, for the table and what derives from it without a store.
func TestSuppressRefusesVersionedTables(t *testing.T) {
	build := func(versioned bool, opts ...Option) error {
		b := NewBuilder()
		var topt Option
		if versioned {
			topt = Versioned(time.Minute)
		}
		tbl := Table(b, "in", serde.String, serde.String, "in-store", topt).Filter(func(string, string) bool { return true }, opts...)
		tbl.Suppress(UntilTimeLimit(time.Second, Unbounded()), "held").ToStream().To("out", serde.String, serde.String)
		_, err := b.Build()
		return err
	}
	require.NoError(t, build(false))
	require.ErrorContains(t, build(true), "versioned table, or one derived from it without Materialized, cannot be suppressed")
	require.NoError(t, build(true, Materialized("filtered")), "a store of its own keeps no history")
}

// Versioned applies to a derived table given Materialized, whose store
// is then declared versioned and which joins a stream as of each record's
// time; it needs Materialized. Aggregations and table joins take it too,
// as Kafka Streams does, their stores declared versioned.
func TestVersionedDerivedTables(t *testing.T) {
	build := func(f func(b *Builder, tbl KTable[string, string])) (*Topology, error) {
		b := NewBuilder()
		f(b, Table(b, "in", serde.String, serde.String, "in-store"))
		return b.Build()
	}
	topo, err := build(func(b *Builder, tbl KTable[string, string]) {
		f := tbl.Filter(func(_, v string) bool { return v != "x" }, Materialized("f"), Versioned(time.Minute))
		Join(Stream(b, "s", serde.String, serde.String), f, func(l, r string) string { return l + r },
			JoinGrace(time.Second), JoinValueSerde(serde.String)).To("out", serde.String, serde.String)
	})
	require.NoError(t, err)
	var found bool
	for _, st := range topo.Describe().SubTopologies {
		for _, s := range st.Stores {
			if s.Name == "f" {
				found = true
				require.Equal(t, StoreInfo{Name: "f", Persistent: true, Logged: true, Kind: VersionedKind, Retention: 60_000}, s)
			}
		}
	}
	require.True(t, found)

	_, err = build(func(_ *Builder, tbl KTable[string, string]) {
		MapTableValues(tbl, func(_, v string) string { return v }, Versioned(time.Minute))
	})
	require.ErrorContains(t, err, "Versioned needs Materialized")
	// Aggregations and table joins accept it, as Kafka Streams does.
	for name, f := range map[string]func(b *Builder, tbl KTable[string, string]){
		"counts": func(_ *Builder, tbl KTable[string, string]) {
			GroupTableBy(tbl, func(k, v string) (string, string) { return v, k }, "", serde.String, serde.String).Count("counts", Versioned(time.Minute))
		},
		"joined": func(b *Builder, tbl KTable[string, string]) {
			JoinTables(tbl, Table(b, "other", serde.String, serde.String, "other-store"), func(l, r string) string { return l + r }, "joined", serde.String, Versioned(time.Minute))
		},
		"c": func(b *Builder, _ KTable[string, string]) {
			Stream(b, "s", serde.String, serde.String).GroupByKey(serde.String, serde.String).Count("c", Versioned(time.Minute))
		},
	} {
		topo, err := build(f)
		require.NoError(t, err, name)
		var kind StoreKind = -1
		for _, st := range topo.Describe().SubTopologies {
			for _, s := range st.Stores {
				if s.Name == name {
					kind = s.Kind
					require.Equal(t, int64(60_000), s.Retention, name)
				}
			}
		}
		require.Equal(t, VersionedKind, kind, name)
	}
	_, err = build(func(b *Builder, tbl KTable[string, string]) {
		JoinTables(tbl, Table(b, "other", serde.String, serde.String, "other-store"), func(l, r string) string { return l + r }, "", serde.String, Versioned(time.Minute))
	})
	require.ErrorContains(t, err, "Versioned needs a store")
}

// As in Kafka Streams' StreamsBuilderTest
// shouldThrowOnVersionedStoreSupplierForGlobalTable, a global table
// cannot be versioned.
func TestGlobalTableRefusesVersioned(t *testing.T) {
	b := NewBuilder()
	GlobalTable(b, "g", serde.String, serde.String, "g-store", Versioned(time.Minute))
	_, err := b.Build()
	require.ErrorContains(t, err, "a global table cannot be Versioned")
}
