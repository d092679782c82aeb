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
)

// orderCustomer is the key selector of the global joins below: an order's
// value is "<customer>:<item>".
func orderCustomer(_ string, v string) string { c, _, _ := strings.Cut(v, ":"); return c }

// globalJoinTopology joins the stream "orders", keyed by order ID, with
// the global table "customers" on the customer its value names, into
// "inner" (JoinGlobal) and "left" (LeftJoinGlobal).
func globalJoinTopology() *topology.Builder {
	b := topology.NewBuilder()
	customers := topology.GlobalTable(b, "customers", serde.String, serde.String, "customers-global")
	orders := topology.Stream(b, "orders", serde.String, serde.String)
	topology.JoinGlobal(orders, customers, orderCustomer, innerJoiner, topology.Named("enrich")).To("inner", serde.String, serde.String)
	topology.LeftJoinGlobal(orders, customers, orderCustomer, leftJoiner).To("left", serde.String, serde.String)
	return b
}

// TestGlobalJoinMatchesReference feeds random interleavings of global-table
// updates and tombstones and stream records (some with null keys, some
// with null values), and compares both joins' output with a reference
// replaying the same events against a map.
func TestGlobalJoinMatchesReference(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 16))
			d, _ := start(t, globalJoinTopology())
			custIn := strIn(d, "customers")
			table := make(map[string]string)
			var wantInner, wantLeft []topology.KeyValue[string, string]
			var nullValues int64
			base := time.Unix(1000, 0)
			for i := range 300 {
				cust := "c" + strconv.Itoa(rng.IntN(8))
				ts := base.Add(time.Duration(i) * time.Millisecond)
				switch r := rng.IntN(12); {
				case r < 3:
					v := "name" + strconv.Itoa(i)
					require.NoError(t, custIn.PipeAt(cust, v, ts))
					table[cust] = v
				case r < 4:
					require.NoError(t, custIn.PipeTombstone(cust))
					delete(table, cust)
				case r < 5:
					require.NoError(t, d.Pipe("orders", []byte("o"+strconv.Itoa(i)), nil, ts))
					nullValues++
				default:
					key := "o" + strconv.Itoa(i)
					v := cust + ":item" + strconv.Itoa(i)
					var kb []byte
					if r == 5 {
						key = "" // a null key: joined on its value all the same
					} else {
						kb = []byte(key)
					}
					require.NoError(t, d.Pipe("orders", kb, []byte(v), ts))
					tv, found := table[cust]
					if found {
						wantInner = append(wantInner, topology.KV(key, innerJoiner(v, tv)))
					}
					wantLeft = append(wantLeft, topology.KV(key, leftJoiner(v, tv, found)))
				}
			}
			require.Equal(t, wantInner, readKVs(t, d, "inner", serde.String, serde.String))
			require.Equal(t, wantLeft, readKVs(t, d, "left", serde.String, serde.String))
			require.Equal(t, 2*nullValues, d.DroppedJoinRecords())
		})
	}
}

// TestGlobalTableIsNoTask checks that a global table adds no source, no
// task store and no sub-topology, that its store reaches the runtime as a
// global store, and that Describe shows it with its readers.
func TestGlobalTableIsNoTask(t *testing.T) {
	topo, err := globalJoinTopology().Build()
	require.NoError(t, err)
	g := graph.Of(topo)
	require.Len(t, g.SubTopologies(), 1)
	require.Empty(t, g.SubTopologies()[0].Stores)
	require.Equal(t, []string{"orders"}, g.SourceTopics("app"))
	require.Equal(t, []graph.GlobalStore{{Store: topology.StoreInfo{Name: "customers-global", Persistent: true}, Topic: "customers"}}, g.GlobalStores())
	_, owned := g.StoreSubTopology("customers-global")
	require.False(t, owned)
	desc := topo.Describe().String()
	require.Contains(t, desc, "Global store customers-global (persistent, topic: customers, every partition, no tasks)\n    --> enrich, globalleftjoin-")
}

// TestGlobalTableErrors checks the mistakes Build reports.
func TestGlobalTableErrors(t *testing.T) {
	b := topology.NewBuilder()
	topology.GlobalTable(b, "customers", serde.String, serde.String, "dup", topology.InMemory())
	topology.Table(b, "other", serde.String, serde.String, "dup")
	topology.GlobalTable(b, "orders", serde.String, serde.String, "g2")
	g3 := topology.GlobalTable(b, "customers", serde.String, serde.String, "g3")
	orders := topology.Stream(b, "orders", serde.String, serde.String)
	topology.JoinGlobal[string, string, string, string, string](orders, g3, nil, innerJoiner)
	_, err := b.Build()
	require.Error(t, err)
	for _, want := range []string{
		`store "dup" is declared twice`,
		`topic "orders" is read by the global table of store "g2" and by source`,
		`topic "customers" is read by the global table of store "g3" and by the global table of store "dup"`,
		`key selector is nil`,
	} {
		require.ErrorContains(t, err, want)
	}
}
