package topology_test

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

// update is one table update as written to a topic: a nil value is a
// tombstone.
type update struct {
	key   string
	value *string
}

func (u update) String() string {
	if u.value == nil {
		return u.key + "=<nil>"
	}
	return u.key + "=" + *u.value
}

func ptr(s string) *string { return &s }

// readUpdates reads topic's records, string-encoded, keeping tombstones.
func readUpdates(d *topologytest.Driver, topic string) []update {
	var out []update
	for _, r := range d.ReadOutput(topic) {
		u := update{key: string(r.Key)}
		if r.Value != nil {
			u.value = ptr(string(r.Value))
		}
		out = append(out, u)
	}
	return out
}

func even(_, v string) bool     { n, _ := strconv.Atoi(v); return n%2 == 0 }
func double(_, v string) string { n, _ := strconv.Atoi(v); return strconv.Itoa(2 * n) }
func length(_, v string) int64  { return int64(len(v)) }

// tableOpsTopology derives tables from the table "in": filtered, rejected
// and doubled stream their updates to topics of those names; "lens"
// materializes the length of the even values, a chain with a store at its
// end; "orders" are joined with the doubled even values, a chain without
// one.
func tableOpsTopology() *topology.Builder {
	b := topology.NewBuilder()
	in := topology.Table(b, "in", serde.String, serde.String, "in-store")
	in.Filter(even, topology.Named("evens")).ToStream().To("filtered", serde.String, serde.String)
	in.FilterNot(even).ToStream().To("rejected", serde.String, serde.String)
	topology.MapTableValues(in, double).ToStream().To("doubled", serde.String, serde.String)
	evens := in.Filter(even, topology.Materialized("evens-store"), topology.InMemory())
	topology.MapTableValues(evens, length, topology.Named("lens"), topology.Materialized("lens-store"), topology.TableValueSerde(serde.Int64))
	doubledEvens := topology.MapTableValues(in.Filter(even), double)
	orders := topology.Stream(b, "orders", serde.String, serde.String)
	topology.Join(orders, doubledEvens, innerJoiner).To("joined", serde.String, serde.String)
	return b
}

// TestTableOperatorsMatchReference feeds random updates and tombstones to
// a table and compares what each derived table forwards, what the
// materialized one holds, and what a join with an unmaterialized chain
// finds, with references computed from the same updates.
func TestTableOperatorsMatchReference(t *testing.T) {
	for seed := range uint64(10) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 16))
			d, _ := start(t, tableOpsTopology())
			in, orders := strIn(d, "in"), strIn(d, "orders")
			table := map[string]string{}
			var wantFiltered, wantRejected, wantDoubled, wantJoined []update
			base := time.Unix(1000, 0)
			for i := range 300 {
				key := "k" + strconv.Itoa(rng.IntN(6))
				ts := base.Add(time.Duration(i) * time.Millisecond)
				switch r := rng.IntN(10); {
				case r < 5:
					v := strconv.Itoa(rng.IntN(1000))
					require.NoError(t, in.PipeAt(key, v, ts))
					table[key] = v
					tomb := update{key: key}
					if even(key, v) {
						wantFiltered = append(wantFiltered, update{key, ptr(v)})
						wantRejected = append(wantRejected, tomb)
					} else {
						wantFiltered = append(wantFiltered, tomb)
						wantRejected = append(wantRejected, update{key, ptr(v)})
					}
					wantDoubled = append(wantDoubled, update{key, ptr(double(key, v))})
				case r < 7:
					require.NoError(t, in.PipeTombstone(key))
					delete(table, key)
					tomb := update{key: key}
					wantFiltered = append(wantFiltered, tomb)
					wantRejected = append(wantRejected, tomb)
					wantDoubled = append(wantDoubled, tomb)
				default:
					o := "o" + strconv.Itoa(i)
					require.NoError(t, orders.PipeAt(key, o, ts))
					if v, ok := table[key]; ok && even(key, v) {
						wantJoined = append(wantJoined, update{key, ptr(innerJoiner(o, double(key, v)))})
					}
				}
			}
			require.Equal(t, wantFiltered, readUpdates(d, "filtered"))
			require.Equal(t, wantRejected, readUpdates(d, "rejected"))
			require.Equal(t, wantDoubled, readUpdates(d, "doubled"))
			require.Equal(t, wantJoined, readUpdates(d, "joined"))

			wantLens := map[string]int64{}
			for k, v := range table {
				if even(k, v) {
					wantLens[k] = length(k, v)
				}
			}
			require.Equal(t, wantLens, storeContents(t, d, "lens-store", serde.Int64))
		})
	}
}

// storeContents reads every entry of the string-keyed store name.
func storeContents[V any](t *testing.T, d *topologytest.Driver, name string, vs serde.Serde[V]) map[string]V {
	t.Helper()
	rw, err := d.Store(name)
	require.NoError(t, err)
	it, err := topology.NewKeyValueStore(rw, serde.String, vs).All()
	require.NoError(t, err)
	defer it.Close()
	got := map[string]V{}
	for it.Next() {
		got[it.Key()] = it.Value()
	}
	require.NoError(t, it.Err())
	return got
}

// TestMaterializedMapValuesQueryable reads a materialized MapTableValues
// table through its typed store after updates and a tombstone, and checks
// that StoreName names the store only when the table is materialized.
func TestMaterializedMapValuesQueryable(t *testing.T) {
	b := topology.NewBuilder()
	in := topology.Table(b, "in", serde.String, serde.String, "in-store")
	lens := topology.MapTableValues(in, length, topology.Materialized("lens"), topology.TableValueSerde(serde.Int64))
	plain := topology.MapTableValues(in, length)
	require.Equal(t, "lens", lens.StoreName())
	require.Empty(t, plain.StoreName())
	d, _ := start(t, b)
	src := strIn(d, "in")
	require.NoError(t, src.Pipe("a", "xyz"))
	require.NoError(t, src.Pipe("b", "hello"))
	require.NoError(t, src.Pipe("a", "x"))
	require.NoError(t, src.PipeTombstone("b"))
	require.NoError(t, src.PipeTombstone("never-there"))
	rw, err := d.Store(lens.StoreName())
	require.NoError(t, err)
	kv := lens.TypedStore(rw)
	v, found, err := kv.Get("a")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, int64(1), v)
	_, found, err = kv.Get("b")
	require.NoError(t, err)
	require.False(t, found, "the tombstone deleted b")
	require.Equal(t, map[string]int64{"a": 1}, storeContents(t, d, "lens", serde.Int64))
}

// TestTableOperatorsDescribe checks the derived nodes, their stores and the
// join's reading of the nearest store in the description.
func TestTableOperatorsDescribe(t *testing.T) {
	topo, err := tableOpsTopology().Build()
	require.NoError(t, err)
	desc := topo.Describe()
	require.Len(t, desc.SubTopologies, 1, "derived tables and the join share the table's sub-topology")
	nodes := map[string]topology.NodeDescription{}
	for _, n := range desc.SubTopologies[0].Nodes {
		nodes[n.Name] = n
	}
	require.Empty(t, nodes["evens"].Stores, "an unmaterialized filter keeps no store")
	require.Equal(t, []string{"lens-store"}, nodes["lens"].Stores)
	var joinStores []string
	for name, n := range nodes {
		if strings.HasPrefix(name, "join-") {
			joinStores = n.Stores
		}
	}
	require.Equal(t, []string{"in-store"}, joinStores, "the join reads the chain's values from the table's store")
	s := desc.String()
	require.Contains(t, s, "Processor: evens\n")
	require.Contains(t, s, "Processor: lens (stores: lens-store)")
	require.Contains(t, s, "Store: evens-store (in-memory, logged)")
	require.Contains(t, s, "Store: lens-store (persistent, logged)")
	require.Regexp(t, `Processor: table-filternot-\d+\n`, s)
	require.Regexp(t, `Processor: table-mapvalues-\d+\n`, s)
}

// TestTableOperatorErrors checks the mistakes Build reports.
func TestTableOperatorErrors(t *testing.T) {
	b := topology.NewBuilder()
	in := topology.Table(b, "in", serde.String, serde.String, "in-store")
	topology.MapTableValues(in, length, topology.Materialized("no-serde"))
	topology.MapTableValues(in, length, topology.Materialized("bad-serde"), topology.TableValueSerde(serde.String))
	in.Filter(nil)
	in.Filter(even, topology.Materialized("in-store"))
	_, err := b.Build()
	require.Error(t, err)
	for _, want := range []string{`store "no-serde": value serde is nil`, "TableValueSerde is", "function is nil", `store "in-store" is declared twice`} {
		require.ErrorContains(t, err, want)
	}
}

// TestDerivedTablesBuffered runs derived tables in a task that buffers
// table updates, as the runtime's record cache does: the parent table
// forwards each key's latest value at Flush, a materialized filter holds
// back its own results until the same Flush (and, as Kafka Streams'
// caching store, forwards no tombstone for a key it did not hold), and
// an unmaterialized MapTableValues forwards what it receives.
func TestDerivedTablesBuffered(t *testing.T) {
	b := topology.NewBuilder()
	in := topology.Table(b, "tin", serde.String, serde.String, "table")
	in.Filter(even, topology.Materialized("evens")).ToStream().To("fout", serde.String, serde.String)
	topology.MapTableValues(in, double).ToStream().To("mout", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)

	env := bufferingEnv{newFakeEnv(0)}
	g, err := graph.Of(topo).NewTaskGraph(0, env)
	require.NoError(t, err)
	for _, kv := range [][2]string{{"k", "2"}, {"j", "4"}, {"k", "3"}} {
		require.NoError(t, g.Process(graph.InputRecord{Topic: "tin", Key: []byte(kv[0]), Value: []byte(kv[1])}))
	}
	require.Empty(t, env.sent, "nothing is forwarded before Flush")
	require.NoError(t, g.Flush())
	got := map[string][]update{}
	for _, r := range env.sent {
		u := update{key: string(r.Key)}
		if r.Value != nil {
			u.value = ptr(string(r.Value))
		}
		got[r.Topic] = append(got[r.Topic], u)
	}
	require.Equal(t, []update{{"j", ptr("4")}}, got["fout"], "k's latest value 3 fails the filter, which never held k")
	require.Equal(t, []update{{"k", ptr("6")}, {"j", ptr("8")}}, got["mout"])
	n := len(env.sent)
	require.NoError(t, g.Flush())
	require.Len(t, env.sent, n, "a second Flush forwards nothing")
}
