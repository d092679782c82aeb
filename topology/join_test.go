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

func innerJoiner(v, tv string) string { return v + "|" + tv }

func leftJoiner(v, tv string, found bool) string {
	if !found {
		return v + "|<none>"
	}
	return v + "|" + tv
}

// joinTopology joins the stream "orders" with the table "customers" into
// "inner" (Join) and "left" (LeftJoin).
func joinTopology() *topology.Builder {
	b := topology.NewBuilder()
	customers := topology.Table(b, "customers", serde.String, serde.String, "customers-store")
	orders := topology.Stream(b, "orders", serde.String, serde.String)
	topology.Join(orders, customers, innerJoiner, topology.Named("enrich")).To("inner", serde.String, serde.String)
	topology.LeftJoin(orders, customers, leftJoiner).To("left", serde.String, serde.String)
	return b
}

// TestJoinMatchesReference feeds random interleavings of table updates,
// table tombstones, stream records and null-key stream records, and
// compares both joins' output with a reference that replays the same
// events against a map.
func TestJoinMatchesReference(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 15))
			d, _ := start(t, joinTopology())
			custIn, ordIn := strIn(d, "customers"), strIn(d, "orders")
			table := make(map[string]string)
			var wantInner, wantLeft []topology.KeyValue[string, string]
			var nullKeys int64
			base := time.Unix(1000, 0)
			for i := range 300 {
				key := "c" + strconv.Itoa(rng.IntN(8))
				ts := base.Add(time.Duration(i) * time.Millisecond)
				switch r := rng.IntN(10); {
				case r < 3:
					v := "name" + strconv.Itoa(i)
					require.NoError(t, custIn.PipeAt(key, v, ts))
					table[key] = v
				case r < 4:
					require.NoError(t, custIn.PipeTombstone(key))
					delete(table, key)
				case r < 5:
					v := "orphan" + strconv.Itoa(i)
					require.NoError(t, d.Pipe("orders", nil, []byte(v), ts))
					nullKeys++
					// KIP-962: the left join keeps it, joined with nothing
					// (a null key reads as "").
					wantLeft = append(wantLeft, topology.KV("", leftJoiner(v, "", false)))
				default:
					v := "order" + strconv.Itoa(i)
					require.NoError(t, ordIn.PipeAt(key, v, ts))
					tv, found := table[key]
					if found {
						wantInner = append(wantInner, topology.KV(key, innerJoiner(v, tv)))
					}
					wantLeft = append(wantLeft, topology.KV(key, leftJoiner(v, tv, found)))
				}
			}
			require.Equal(t, wantInner, readKVs(t, d, "inner", serde.String, serde.String))
			require.Equal(t, wantLeft, readKVs(t, d, "left", serde.String, serde.String))
			// The inner join drops each null-key record.
			require.Equal(t, nullKeys, d.DroppedJoinRecords())
		})
	}
}

// TestJoinTableUpdateOrder pins the lookup semantics: the stream record
// sees the table as it is when the record is processed; later updates
// produce no output and do not change what was joined.
func TestJoinTableUpdateOrder(t *testing.T) {
	d, _ := start(t, joinTopology())
	custIn, ordIn := strIn(d, "customers"), strIn(d, "orders")
	require.NoError(t, ordIn.Pipe("c1", "o1"))      // before any update
	require.NoError(t, custIn.Pipe("c1", "alice"))  // update after o1
	require.NoError(t, ordIn.Pipe("c1", "o2"))      // after the update
	require.NoError(t, custIn.Pipe("c1", "alicia")) // second update
	require.NoError(t, ordIn.Pipe("c1", "o3"))      //
	require.NoError(t, custIn.PipeTombstone("c1"))  // delete
	require.NoError(t, ordIn.Pipe("c1", "o4"))      // after the delete
	require.NoError(t, ordIn.PipeTombstone("c1"))   // null value: dropped
	require.Equal(t, kvs[string, string]("c1", "o2|alice", "c1", "o3|alicia"),
		readKVs(t, d, "inner", serde.String, serde.String))
	require.Equal(t, kvs[string, string]("c1", "o1|<none>", "c1", "o2|alice", "c1", "o3|alicia", "c1", "o4|<none>"),
		readKVs(t, d, "left", serde.String, serde.String))
	require.Equal(t, int64(2), d.DroppedJoinRecords())
}

// TestLeftJoinKeylessRecord: a left join keeps a record without a key,
// joined with nothing (KIP-962); an inner join drops and counts it.
func TestLeftJoinKeylessRecord(t *testing.T) {
	d, _ := start(t, joinTopology())
	require.NoError(t, strIn(d, "customers").Pipe("", "nobody"))
	require.NoError(t, strIn(d, "orders").PipeValue("o1"))
	left := d.ReadOutput("left")
	require.Len(t, left, 1)
	require.Nil(t, left[0].Key)
	require.Equal(t, "o1|<none>", string(left[0].Value))
	require.Empty(t, d.ReadOutput("inner"))
	require.Equal(t, int64(1), d.DroppedJoinRecords())
}

// TestJoinRepartitionsRekeyedStream re-keys the stream before the join:
// it must go through a repartition topic and join on the new key.
func TestJoinRepartitionsRekeyedStream(t *testing.T) {
	b := topology.NewBuilder()
	customers := topology.Table(b, "customers", serde.String, serde.String, "customers-store")
	orders := topology.Stream(b, "orders", serde.String, serde.String)
	// Orders are keyed by order id; the value is "<customer>:<item>".
	byCustomer := topology.SelectKey(orders, func(_, v string) string { return strings.SplitN(v, ":", 2)[0] })
	topology.Join(byCustomer, customers, innerJoiner, topology.Named("enrich"), topology.JoinValueSerde(serde.String)).
		To("out", serde.String, serde.String)
	d, topo := start(t, b)

	custIn, ordIn := strIn(d, "customers"), strIn(d, "orders")
	require.NoError(t, custIn.Pipe("c1", "alice"))
	require.NoError(t, custIn.Pipe("c2", "bob"))
	require.NoError(t, ordIn.Pipe("o1", "c1:apple"))
	require.NoError(t, ordIn.Pipe("o2", "c3:pear"))
	require.NoError(t, ordIn.Pipe("o3", "c2:fig"))
	require.Equal(t, kvs[string, string]("c1", "c1:apple|alice", "c2", "c2:fig|bob"),
		readKVs(t, d, "out", serde.String, serde.String))

	desc := topo.Describe().String()
	require.Contains(t, desc, "Processor: enrich (stores: customers-store)")
	require.Contains(t, desc, "(topic: enrich-repartition, internal)")
	rv := graph.Of(topo)
	require.Equal(t, []graph.Repartition{{Topic: topology.TopicRef{Name: "enrich-repartition", Internal: true}, WriterSubTopology: 1}},
		rv.RepartitionTopics())
	// The join reads the repartition topic and the table's topic in one
	// sub-topology, so they are checked for co-partitioning together.
	err := rv.CheckCoPartitioning(map[string]int32{"orders": 3, "customers": 2, app + "-enrich-repartition": 3}, app)
	require.ErrorContains(t, err, "customers (2)")
	require.ErrorContains(t, err, app+"-enrich-repartition (3)")
}

func TestJoinDescribe(t *testing.T) {
	topo, err := joinTopology().Build()
	require.NoError(t, err)
	d := topo.Describe()
	// Stream, table and both joins share one sub-topology (one task per
	// partition reads the order and the customer of a key).
	require.Len(t, d.SubTopologies, 1)
	s := d.String()
	require.Contains(t, s, "Processor: enrich (stores: customers-store)")
	require.Contains(t, s, "Store: customers-store (persistent, logged)")
	// Table updates do not flow into the joins.
	for _, n := range d.SubTopologies[0].Nodes {
		if n.Name == "enrich" {
			require.Len(t, n.Parents, 1)
		}
		if strings.HasPrefix(n.Name, "table-") {
			require.Empty(t, n.Children)
		}
	}
	err = graph.Of(topo).CheckCoPartitioning(map[string]int32{"orders": 4, "customers": 2}, app)
	require.ErrorContains(t, err, "orders (4)")
	require.ErrorContains(t, err, "customers (2)")
}

func TestJoinBuildErrors(t *testing.T) {
	b := topology.NewBuilder()
	customers := topology.Table(b, "customers", serde.String, serde.String, "customers-store")
	orders := topology.Stream(b, "orders", serde.String, serde.String)
	rekeyed := topology.SelectKey(orders, func(_, v string) string { return v })
	topology.Join(rekeyed, customers, innerJoiner, topology.Named("nos")).To("a", serde.String, serde.String)
	topology.Join(rekeyed, customers, innerJoiner, topology.Named("wrong"), topology.JoinValueSerde(serde.Int64)).To("b", serde.String, serde.String)
	topology.LeftJoin[string, string, string, string](orders, customers, nil, topology.Named("nilfn")).To("c", serde.String, serde.String)
	_, err := b.Build()
	require.ErrorContains(t, err, `processor "nos": the stream was re-keyed`)
	require.ErrorContains(t, err, `processor "wrong": JoinValueSerde is`)
	require.ErrorContains(t, err, `processor "nilfn": joiner is nil`)

	// A table of another Builder cannot be joined.
	other := topology.NewBuilder()
	ot := topology.Table(other, "t2", serde.String, serde.String, "s2")
	b2 := topology.NewBuilder()
	topology.Join(topology.Stream(b2, "x", serde.String, serde.String), ot, innerJoiner).To("y", serde.String, serde.String)
	_, err = b2.Build()
	require.ErrorContains(t, err, "another Builder")
}
