package topology_test

import (
	"encoding/binary"
	"hash/fnv"
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

func customerOf(_ string, order string) string { c, _, _ := strings.Cut(order, ":"); return c }

// TestForeignKeyJoinsMatchReference changes orders (order -> "<customer>:
// <item>") and customers (customer -> name) at random: orders move between
// customers, customers are renamed, deleted and come back, orders are
// deleted. After every input the result store must equal the join of the
// two tables as they are, and at the end the result topic's latest value
// per key must equal the store and only the current subscriptions remain.
func TestForeignKeyJoinsMatchReference(t *testing.T) {
	for _, left := range []bool{false, true} {
		for seed := range uint64(5) {
			name := "inner"
			if left {
				name = "left"
			}
			t.Run(name+"/"+strconv.FormatUint(seed, 10), func(t *testing.T) {
				b := topology.NewBuilder()
				orders := topology.Table(b, "orders", serde.String, serde.String, "orders-store")
				customers := topology.Table(b, "customers", serde.String, serde.String, "customers-store")
				var res topology.KTable[string, string]
				if left {
					res = topology.LeftJoinByForeignKey(orders, customers, customerOf, func(o, c string, found bool) string {
						if !found {
							c = "?"
						}
						return o + "@" + c
					}, "enriched", serde.String, topology.Named("by-customer"))
				} else {
					res = topology.JoinByForeignKey(orders, customers, customerOf, func(o, c string) string { return o + "@" + c },
						"enriched", serde.String, topology.Named("by-customer"))
				}
				res.ToStream().To("out", serde.String, serde.String)
				d, topo := start(t, b)
				var internal []string
				for _, rp := range graph.Of(topo).RepartitionTopics() {
					internal = append(internal, rp.Topic.Name)
				}
				require.ElementsMatch(t, []string{"by-customer-subscription-registration", "by-customer-subscription-response"}, internal)

				oin, cin := strIn(d, "orders"), strIn(d, "customers")
				ords, custs := map[string]string{}, map[string]string{}
				rng := rand.New(rand.NewPCG(seed, 9))
				for i := range 300 {
					switch r := rng.IntN(10); {
					case r < 5:
						o := "o" + strconv.Itoa(rng.IntN(8))
						v := "c" + strconv.Itoa(rng.IntN(4)) + ":item" + strconv.Itoa(i)
						require.NoError(t, oin.Pipe(o, v))
						ords[o] = v
					case r < 6:
						o := "o" + strconv.Itoa(rng.IntN(8))
						require.NoError(t, oin.PipeTombstone(o))
						delete(ords, o)
					case r < 9:
						c := "c" + strconv.Itoa(rng.IntN(4))
						v := "name" + strconv.Itoa(i)
						require.NoError(t, cin.Pipe(c, v))
						custs[c] = v
					default:
						c := "c" + strconv.Itoa(rng.IntN(4))
						require.NoError(t, cin.PipeTombstone(c))
						delete(custs, c)
					}
					want := map[string]string{}
					for o, v := range ords {
						name, ok := custs[customerOf(o, v)]
						switch {
						case ok:
							want[o] = v + "@" + name
						case left:
							want[o] = v + "@?"
						}
					}
					require.Equal(t, want, storeContents(t, d, "enriched", serde.String), "after input %d", i)
				}
				latest := map[string]string{}
				for _, u := range readUpdates(d, "out") {
					if u.value == nil {
						delete(latest, u.key)
					} else {
						latest[u.key] = *u.value
					}
				}
				require.Equal(t, storeContents(t, d, "enriched", serde.String), latest)
				// One subscription per order: those of an order's earlier
				// customers and of deleted orders were removed.
				subs := storeContents(t, d, "by-customer-subscriptions", serde.Bytes)
				require.Len(t, subs, len(ords))
			})
		}
	}
}

// TestForeignKeyJoinSubTopologies: the two tables stay in sub-topologies
// of their own, joined only by the registration and response topics, so
// they need not be co-partitioned.
func TestForeignKeyJoinSubTopologies(t *testing.T) {
	b := topology.NewBuilder()
	orders := topology.Table(b, "orders", serde.String, serde.String, "orders-store")
	customers := topology.Table(b, "customers", serde.String, serde.String, "customers-store")
	topology.JoinByForeignKey(orders, customers, customerOf, func(o, c string) string { return o + c }, "enriched", serde.String, topology.Named("fk"))
	topo, err := b.Build()
	require.NoError(t, err)
	subs := graph.Of(topo).SubTopologies()
	require.Len(t, subs, 2)
	require.ElementsMatch(t, []topology.TopicRef{{Name: "orders"}, {Name: "fk-subscription-response", Internal: true}}, subs[0].Sources)
	require.ElementsMatch(t, []topology.TopicRef{{Name: "customers"}, {Name: "fk-subscription-registration", Internal: true}}, subs[1].Sources)
	require.NoError(t, graph.Of(topo).CheckCoPartitioning(map[string]int32{
		"orders": 3, "customers": 5, app + "-fk-subscription-response": 3, app + "-fk-subscription-registration": 5,
	}, app))
}

// TestForeignKeyJoinDropsStaleResponses pipes responses straight into the
// response topic: one carrying the hash of an order's earlier value is
// dropped, as it would be when it arrives after the answer for the
// current value; one carrying the current value's hash is joined.
func TestForeignKeyJoinDropsStaleResponses(t *testing.T) {
	b := topology.NewBuilder()
	orders := topology.Table(b, "orders", serde.String, serde.String, "orders-store")
	customers := topology.Table(b, "customers", serde.String, serde.String, "customers-store")
	topology.JoinByForeignKey(orders, customers, customerOf, func(o, c string) string { return o + "@" + c },
		"enriched", serde.String, topology.Named("fk"))
	d, _ := start(t, b)
	require.NoError(t, strIn(d, "customers").Pipe("c1", "ann"))
	require.NoError(t, strIn(d, "customers").Pipe("c2", "bob"))
	require.NoError(t, strIn(d, "orders").Pipe("o1", "c1:tea"))
	require.NoError(t, strIn(d, "orders").Pipe("o1", "c2:tea"))
	require.Equal(t, map[string]string{"o1": "c2:tea@bob"}, storeContents(t, d, "enriched", serde.String))

	response := func(orderValue, name string) []byte {
		h := fnv.New64a()
		h.Write([]byte(orderValue))
		v := binary.BigEndian.AppendUint64(nil, h.Sum64())
		return append(append(v, 1), name...)
	}
	topic := app + "-fk-subscription-response"
	// The answer c1 gave while o1 was still "c1:tea", arriving late.
	require.NoError(t, d.Pipe(topic, []byte("o1"), response("c1:tea", "ann"), time.Unix(1, 0)))
	require.Equal(t, map[string]string{"o1": "c2:tea@bob"}, storeContents(t, d, "enriched", serde.String))
	// An answer for the current value is applied.
	require.NoError(t, d.Pipe(topic, []byte("o1"), response("c2:tea", "bobby"), time.Unix(2, 0)))
	require.Equal(t, map[string]string{"o1": "c2:tea@bobby"}, storeContents(t, d, "enriched", serde.String))
}

// A foreign-key join's result is stamped, as Kafka Streams stamps it, with
// the later of the left update's time and the right value's when the left
// side changes, and with the right update's time when the right side does.
func TestForeignKeyJoinResultTimestamps(t *testing.T) {
	b := topology.NewBuilder()
	orders := topology.Table(b, "orders", serde.String, serde.String, "orders-store")
	customers := topology.Table(b, "customers", serde.String, serde.String, "customers-store")
	topology.LeftJoinByForeignKey(orders, customers, customerOf, func(o, c string, found bool) string {
		if !found {
			c = "?"
		}
		return o + "@" + c
	}, "enriched", serde.String).ToStream().To("out", serde.String, serde.String)
	d, _ := start(t, b)
	oin, cin := strIn(d, "orders"), strIn(d, "customers")
	require.NoError(t, cin.PipeAt("c1", "ann", time.UnixMilli(10)))
	require.NoError(t, oin.PipeAt("o1", "c1:pen", time.UnixMilli(4)))  // the customer is later
	require.NoError(t, oin.PipeAt("o2", "c1:ink", time.UnixMilli(12))) // the order is
	require.NoError(t, oin.PipeAt("o3", "c2:cap", time.UnixMilli(3)))  // no customer
	require.NoError(t, cin.PipeAt("c1", "bob", time.UnixMilli(7)))     // answered at its own time
	var got []string
	for _, r := range d.ReadOutput("out") {
		got = append(got, string(r.Key)+" "+string(r.Value)+" @"+strconv.FormatInt(r.Timestamp.UnixMilli(), 10))
	}
	require.Equal(t, []string{
		"o1 c1:pen@ann @10", "o2 c1:ink@ann @12", "o3 c2:cap@? @3",
		"o1 c1:pen@bob @7", "o2 c1:ink@bob @7",
	}, got)
}

// TestForeignKeyJoinNullForeignKey: an order without a customer has a null
// foreign key (a nil one, which serde.Bytes encodes to nil). As in Kafka
// Streams, the inner join skips it, deleting the result of an order that
// had a customer before, and the left join joins it with no customer at
// once; either way it leaves its old customer's subscribers.
func TestForeignKeyJoinNullForeignKey(t *testing.T) {
	customerOrNil := func(_ string, order string) []byte {
		c, _, _ := strings.Cut(order, ":")
		if c == "" {
			return nil
		}
		return []byte(c)
	}
	for _, left := range []bool{false, true} {
		t.Run(map[bool]string{false: "inner", true: "left"}[left], func(t *testing.T) {
			b := topology.NewBuilder()
			orders := topology.Table(b, "orders", serde.String, serde.String, "orders-store")
			customers := topology.Table(b, "customers", serde.Bytes, serde.String, "customers-store")
			if left {
				topology.LeftJoinByForeignKey(orders, customers, customerOrNil, func(o, c string, found bool) string {
					if !found {
						c = "?"
					}
					return o + "@" + c
				}, "enriched", serde.String).ToStream().To("out", serde.String, serde.String)
			} else {
				topology.JoinByForeignKey(orders, customers, customerOrNil, func(o, c string) string { return o + "@" + c },
					"enriched", serde.String).ToStream().To("out", serde.String, serde.String)
			}
			d, _ := start(t, b)
			oin, cin := strIn(d, "orders"), strIn(d, "customers")
			require.NoError(t, cin.PipeAt("c1", "ann", time.UnixMilli(1)))
			require.NoError(t, oin.PipeAt("o1", ":pen", time.UnixMilli(2)))   // no customer
			require.NoError(t, oin.PipeAt("o2", "c1:ink", time.UnixMilli(3))) // joined
			require.NoError(t, oin.PipeAt("o2", ":ink", time.UnixMilli(4)))   // customer dropped
			require.NoError(t, cin.PipeAt("c1", "bob", time.UnixMilli(5)))    // o2 no longer subscribed
			var got []string
			for _, r := range d.ReadOutput("out") {
				v := "null"
				if r.Value != nil {
					v = string(r.Value)
				}
				got = append(got, string(r.Key)+" "+v+" @"+strconv.FormatInt(r.Timestamp.UnixMilli(), 10))
			}
			want := []string{"o2 c1:ink@ann @3", "o2 null @4"}
			if left {
				want = []string{"o1 :pen@? @2", "o2 c1:ink@ann @3", "o2 :ink@? @4"}
			}
			require.Equal(t, want, got)
		})
	}
}
