package topology_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

// TestTableJoinWithoutStore feeds random updates to both sides of each
// table-table join without a store (the right side filtered, as in
// TestTableJoinsMatchReference) and checks the three things its readers
// see: the updates it forwards, which are Kafka Streams'; a stream joined
// with it, which reads both sides' current values joined; and a count
// grouped from it, whose retractions need the old values its sides
// compute, so that it ends equal to the number of keys the join holds.
func TestTableJoinWithoutStore(t *testing.T) {
	for _, kind := range tableJoinKinds {
		for seed := range uint64(4) {
			t.Run(kind.name+"/"+strconv.FormatUint(seed, 10), func(t *testing.T) {
				b := topology.NewBuilder()
				l := topology.Table(b, "left", serde.String, serde.String, "left-store")
				r := topology.Table(b, "right", serde.String, serde.String, "right-store").Filter(even)
				j := kind.join(l, r, "", topology.Named("j"))
				require.Empty(t, j.StoreName())
				j.ToStream().To("joined", serde.String, serde.String)
				topology.LeftJoin(topology.Stream(b, "probe", serde.String, serde.String), j, func(_, jv string, found bool) string {
					if !found {
						return "none"
					}
					return jv
				}).To("probed", serde.String, serde.String)
				topology.GroupTableBy(j, func(_, v string) (string, string) { return "n", v }, "all", serde.String, serde.String).
					Count("counts").ToStream().To("counts", serde.String, serde.Int64)
				d, _ := start(t, b)
				lin, rin, probe := strIn(d, "left"), strIn(d, "right"), strIn(d, "probe")

				rng := rand.New(rand.NewPCG(seed, 7))
				left, right := map[string]string{}, map[string]string{}
				holds := func(leftSide bool, k string) bool {
					if leftSide {
						_, ok := left[k]
						return ok
					}
					v, ok := right[k]
					return ok && even(k, v)
				}
				result := func(k string) (string, bool) {
					lv, lok := left[k]
					rv := right[k]
					return kind.want(lv, lok, rv, holds(false, k))
				}
				var want []update
				var wantProbed []string
				base := time.Unix(1000, 0)
				for i := range 300 {
					k := "k" + strconv.Itoa(rng.IntN(4))
					side, in, leftSide := left, lin, true
					if rng.IntN(2) == 0 {
						side, in, leftSide = right, rin, false
					}
					sOld := holds(leftSide, k)
					if rng.IntN(4) == 0 {
						require.NoError(t, in.PipeTombstone(k))
						delete(side, k)
					} else {
						v := strconv.Itoa(rng.IntN(100))
						require.NoError(t, in.PipeAt(k, v, base.Add(time.Duration(i)*time.Millisecond)))
						side[k] = v
					}
					// The grouping makes both tables send old values, as
					// Kafka Streams' joins do when their result must send
					// them, so the right filter sends nothing for an update
					// that neither passed before nor passes now.
					sNew := holds(leftSide, k)
					filtered := !leftSide && !sOld && !sNew
					if !filtered && ksTableJoinForwards(kind.name, leftSide, sOld, sNew, holds(!leftSide, k)) {
						if v, ok := result(k); ok {
							want = append(want, update{k, ptr(v)})
						} else {
							want = append(want, update{key: k})
						}
					}
					pk := "k" + strconv.Itoa(rng.IntN(4))
					require.NoError(t, probe.Pipe(pk, "p"))
					if v, ok := result(pk); ok {
						wantProbed = append(wantProbed, pk+"="+v)
					} else {
						wantProbed = append(wantProbed, pk+"=none")
					}
				}
				require.Equal(t, want, readUpdates(d, "joined"))
				var probed []string
				for _, kv := range readKVs(t, d, "probed", serde.String, serde.String) {
					probed = append(probed, kv.Key+"="+kv.Value)
				}
				require.Equal(t, wantProbed, probed)
				held := 0
				for i := range 4 {
					if _, ok := result("k" + strconv.Itoa(i)); ok {
						held++
					}
				}
				counts := readKVs(t, d, "counts", serde.String, serde.Int64)
				require.NotEmpty(t, counts)
				require.Equal(t, int64(held), counts[len(counts)-1].Value)
			})
		}
	}
}

// A table join without a store keeps no history, nor stored old values,
// so Versioned and StoredOldValues, which need a store, are refused when
// the topology is built.
func TestTableJoinWithoutStoreRefusesStoreOptions(t *testing.T) {
	for msg, opt := range map[string]topology.Option{
		"Versioned needs a store":       topology.Versioned(time.Minute),
		"StoredOldValues needs a store": topology.StoredOldValues(),
	} {
		b := topology.NewBuilder()
		l := topology.Table(b, "left", serde.String, serde.String, "left-store")
		r := topology.Table(b, "right", serde.String, serde.String, "right-store")
		tableJoinKinds[0].join(l, r, "", opt).ToStream().To("out", serde.String, serde.String)
		_, err := b.Build()
		require.ErrorContains(t, err, msg)
	}
}

// Under the record cache a join without a store forwards each update as a
// side's table flushes it, as Kafka Streams' join without Materialized,
// whose caching is the tables' stores': both sides updated within one
// commit send the result twice, once per table's flush, where a result
// store sends it once.
func TestTableJoinWithoutStoreUnderCache(t *testing.T) {
	for _, store := range []string{"", "joined-store"} {
		t.Run("store="+store, func(t *testing.T) {
			b := topology.NewBuilder()
			l := topology.Table(b, "left", serde.String, serde.String, "left-store")
			r := topology.Table(b, "right", serde.String, serde.String, "right-store")
			tableJoinKinds[0].join(l, r, store).ToStream().To("joined", serde.String, serde.String)
			topo, err := b.Build()
			require.NoError(t, err)
			d, err := topologytest.New(topo, topologytest.Config{AppID: app, Commits: true})
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()
			require.NoError(t, strIn(d, "left").Pipe("a", "A"))
			require.NoError(t, strIn(d, "right").Pipe("a", "x"))
			require.Empty(t, readUpdates(d, "joined"))
			require.NoError(t, d.Commit())
			want := []update{{"a", ptr("A+x")}, {"a", ptr("A+x")}}
			if store != "" {
				want = want[:1]
			}
			require.Equal(t, want, readUpdates(d, "joined"))
		})
	}
}

// Suppress keeps the held updates' values, so it needs the value serde a
// join without a store may be given nil.
func TestTableJoinWithoutStoreSuppressNeedsValueSerde(t *testing.T) {
	for _, vs := range []serde.Serde[string]{nil, serde.String} {
		b := topology.NewBuilder()
		l := topology.Table(b, "left", serde.String, serde.String, "left-store")
		r := topology.Table(b, "right", serde.String, serde.String, "right-store")
		topology.JoinTables(l, r, func(lv, rv string) string { return lv + rv }, "", vs).
			Suppress(topology.UntilTimeLimit(time.Second, topology.Unbounded()), "held").
			ToStream().To("out", serde.String, serde.String)
		_, err := b.Build()
		if vs == nil {
			require.ErrorContains(t, err, "a table join without a store its valueSerde")
		} else {
			require.NoError(t, err)
		}
	}
}

// After a self-join a materialized join's updates can carry old values
// that its store did not hold: the right update c reaches it twice
// (KAFKA-6443's duplicate), and a stored result can outlive what its sides
// make (TableTableJoinIntegrationTest.testInnerInner's record 11). By
// default each old value is Kafka Streams': the updated side's old value
// joined with the other side's current one, here none each time, so a
// count grouped from the result counts C-c-c twice and never retracts it;
// with StoredOldValues it is what the store held, which the count
// retracts.
func TestTableJoinOldValuesAfterSelfJoin(t *testing.T) {
	for _, stored := range []bool{false, true} {
		t.Run("stored="+strconv.FormatBool(stored), func(t *testing.T) {
			b := topology.NewBuilder()
			l := topology.Table(b, "left", serde.String, serde.String, "left-store")
			r := topology.Table(b, "right", serde.String, serde.String, "right-store")
			joiner := func(lv, rv string) string { return lv + "-" + rv }
			var opts []topology.Option
			if stored {
				opts = append(opts, topology.StoredOldValues())
			}
			j := topology.JoinTables(topology.JoinTables(l, r, joiner, "", nil), r, joiner, "joined", serde.String, opts...)
			topology.GroupTableBy(j, func(k, v string) (string, string) { return v, k }, "by-value", serde.String, serde.String).
				Count("counts").ToStream().To("counts", serde.String, serde.Int64)
			d, _ := start(t, b)
			lin, rin := strIn(d, "left"), strIn(d, "right")
			require.NoError(t, lin.Pipe("0", "C"))
			require.NoError(t, rin.Pipe("0", "c"))
			require.NoError(t, rin.PipeTombstone("0")) // nothing: the stored C-c-c stays
			require.NoError(t, lin.PipeTombstone("0"))
			require.NoError(t, rin.Pipe("0", "d"))
			require.NoError(t, lin.Pipe("0", "D"))
			last := map[string]int64{}
			for _, kv := range readKVs(t, d, "counts", serde.String, serde.Int64) {
				last[kv.Key] = kv.Value
			}
			want := map[string]int64{"C-c-c": 2, "D-d-d": 1}
			if stored {
				want["C-c-c"] = 0
			}
			require.Equal(t, want, last)
		})
	}
}
