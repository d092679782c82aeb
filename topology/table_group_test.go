package topology_test

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// member parses a "<group>:<amount>" value.
func member(_ string, v string) (string, int64) {
	g, a, _ := strings.Cut(v, ":")
	n, _ := strconv.ParseInt(a, 10, 64)
	return g, n
}

// groupedTopology groups the table "members" (user -> "<group>:<amount>"),
// amounts of 90 and more filtered out, by group, into a Count, a
// TableAggregate summing amounts and a Reduce summing them too, each
// streamed to a topic of its store's name.
func groupedTopology() *topology.Builder {
	b := topology.NewBuilder()
	members := topology.Table(b, "members", serde.String, serde.String, "members-store").
		Filter(func(k, v string) bool { _, a := member(k, v); return a < 90 })
	g := topology.GroupTableBy(members, member, "by-group", serde.String, serde.Int64)
	g.Count("counts").ToStream().To("counts", serde.String, serde.Int64)
	topology.TableAggregate(g, func() int64 { return 0 },
		func(_ string, v, agg int64) int64 { return agg + v },
		func(_ string, v, agg int64) int64 { return agg - v },
		"sums", serde.Int64).ToStream().To("sums", serde.String, serde.Int64)
	g.Reduce(func(agg, v int64) int64 { return agg + v }, func(agg, v int64) int64 { return agg - v }, "reduced").
		ToStream().To("reduced", serde.String, serde.Int64)
	return b
}

// TestTableAggregationRetracts moves members between groups, changes their
// amounts, filters them out and deletes them, at random, and checks every
// update each aggregation forwards and what each store holds at the end
// against a reference recomputed from the members after each input: a
// member leaving a group is subtracted from it before being added to its
// new one.
func TestTableAggregationRetracts(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			d, _ := start(t, groupedTopology())
			in := strIn(d, "members")
			rng := rand.New(rand.NewPCG(seed, 4))
			members := map[string]string{} // only those passing the filter
			counts, sums := map[string]int64{}, map[string]int64{}
			var wantCounts, wantSums []topology.KeyValue[string, int64]
			emit := func(g string) {
				wantCounts = append(wantCounts, topology.KV(g, counts[g]))
				wantSums = append(wantSums, topology.KV(g, sums[g]))
			}
			for range 500 {
				user := "u" + strconv.Itoa(rng.IntN(8))
				old, hadOld := members[user]
				var nv string
				hasNew := false
				if rng.IntN(5) == 0 {
					require.NoError(t, in.PipeTombstone(user))
				} else {
					nv = "g" + strconv.Itoa(rng.IntN(4)) + ":" + strconv.Itoa(rng.IntN(100))
					require.NoError(t, in.Pipe(user, nv))
					_, a := member(user, nv)
					hasNew = a < 90
				}
				delete(members, user)
				if hasNew {
					members[user] = nv
				}
				og, oa := member(user, old)
				ng, na := member(user, nv)
				if hadOld {
					counts[og]--
					sums[og] -= oa
				}
				if hadOld && (!hasNew || og != ng) {
					emit(og)
				}
				if hasNew {
					counts[ng]++
					sums[ng] += na
					emit(ng)
				}
			}
			require.Equal(t, wantCounts, readKVs(t, d, "counts", serde.String, serde.Int64))
			require.Equal(t, wantSums, readKVs(t, d, "sums", serde.String, serde.Int64))
			require.Equal(t, wantSums, readKVs(t, d, "reduced", serde.String, serde.Int64))

			// Every group's aggregate equals a recount of the members.
			recount, resum := map[string]int64{}, map[string]int64{}
			for g := range counts {
				recount[g], resum[g] = 0, 0
			}
			for u, v := range members {
				g, a := member(u, v)
				recount[g]++
				resum[g] += a
			}
			for store, want := range map[string]map[string]int64{"counts": recount, "sums": resum, "reduced": resum} {
				rw, err := d.Store(store)
				require.NoError(t, err)
				got, err := mustAll(t, topology.NewKeyValueStore(rw, serde.String, serde.Int64))
				require.NoError(t, err)
				require.Equal(t, want, got, store)
			}
		})
	}
}

// TestTableAggregationOfAnAggregation regroups a stream aggregation (a
// table whose old values come from its own store): the number of words
// seen n times, as the counts of words change.
func TestTableAggregationOfAnAggregation(t *testing.T) {
	b := topology.NewBuilder()
	words := topology.Stream(b, "words", serde.String, serde.String)
	perWord := topology.GroupBy(words, func(_, w string) string { return w }, "w", serde.String, serde.String).Count("per-word")
	topology.GroupTableBy(perWord, func(w string, n int64) (int64, string) { return n, w }, "by-count", serde.Int64, serde.String).
		Count("words-per-count").ToStream().To("out", serde.Int64, serde.Int64)
	d, _ := start(t, b)
	in := strIn(d, "words")
	for _, w := range []string{"a", "b", "a", "c", "a", "b"} {
		require.NoError(t, in.Pipe("", w))
	}
	// a:1 -> {1:1}; b:1 -> {1:2}; a:2 -> {1:1, 2:1}; c:1 -> {1:2};
	// a:3 -> {2:0, 3:1}; b:2 -> {1:1, 2:1}.
	require.Equal(t, kvs[int64, int64](
		int64(1), int64(1), int64(1), int64(2), int64(1), int64(1), int64(2), int64(1), int64(1), int64(2),
		int64(2), int64(0), int64(3), int64(1), int64(1), int64(1), int64(2), int64(1),
	), readKVs(t, d, "out", serde.Int64, serde.Int64))
}

// TestTableGroupByBuildErrors: the functions and serdes must be given.
func TestTableGroupByBuildErrors(t *testing.T) {
	b := topology.NewBuilder()
	tab := topology.Table(b, "t", serde.String, serde.String, "ts")
	g := topology.GroupTableBy(tab, func(k, v string) (string, string) { return v, k }, "g2", serde.String, serde.String)
	g.Reduce(nil, nil, "r")
	topology.TableAggregate(g, func() int64 { return 0 }, func(string, string, int64) int64 { return 0 }, nil, "a", serde.Int64)
	_, err := b.Build()
	require.Error(t, err)
	for _, want := range []string{
		`processor "table-reduce-`, `adder is nil`,
		`processor "table-aggregate-`, `subtractor is nil`,
	} {
		require.ErrorContains(t, err, want)
	}
}

// TestTableAggregationIgnoresRetractionFromUnknownGroup pipes a retraction
// alone, for a group with no aggregate, into the repartition topic (as
// after a store lost its state): the aggregations neither create the
// group nor emit anything.
func TestTableAggregationIgnoresRetractionFromUnknownGroup(t *testing.T) {
	d, _ := start(t, groupedTopology())
	old, err := serde.Int64.Encode(5)
	require.NoError(t, err)
	retraction := append([]byte{2}, old...) // flags: old value only
	require.NoError(t, d.Pipe(app+"-by-group-repartition", []byte("gx"), retraction, time.Unix(1, 0)))
	for _, topic := range []string{"counts", "sums", "reduced"} {
		require.Empty(t, readKVs(t, d, topic, serde.String, serde.Int64), topic)
		require.Empty(t, storeContents(t, d, topic, serde.Int64), topic)
	}
}
