package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

const (
	joinApp       = "joins"
	joinOrders    = "orders"
	joinCustomers = "customers"
	joinEnriched  = "orders-enriched"
	joinStore     = "customers-store"
	joinNode      = "enrich"
)

// ordersEnriched keys orders (keyed by order id, valued "<customer>:<item>")
// by customer and joins them with the customers table into
// "<order>:<item>:<customer name>", or "...:?" for an unknown customer.
func ordersEnriched(t *testing.T) *topology.Topology {
	b := topology.NewBuilder()
	customers := topology.Table(b, joinCustomers, serde.String, serde.String, joinStore)
	orders := topology.Stream(b, joinOrders, serde.String, serde.String)
	byCustomer := topology.Map(orders, func(id, v string) (string, string) {
		cust, item, _ := strings.Cut(v, ":")
		return cust, id + ":" + item
	})
	topology.LeftJoin(byCustomer, customers, func(o, name string, found bool) string {
		if !found {
			name = "?"
		}
		return o + ":" + name
	}, topology.Named(joinNode), topology.JoinValueSerde(serde.String)).To(joinEnriched, serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

func startJoins(t *testing.T, c *cluster, name, dir string) (*runtime.App, error) {
	t.Helper()
	return c.startEOSPeer(t, ordersEnriched(t), joinApp, name, dir)
}

// keyed returns a record for topic placed as Kafka's default partitioner
// places key, so that orders and customers of one key meet in one task.
func (c *cluster) keyed(topic, key string, value []byte) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: value, Partition: topology.Partition([]byte(key), c.partitions)}
}

// waitJoinsCaughtUp waits until the application committed all its input.
func (c *cluster) waitJoinsCaughtUp(t *testing.T) {
	t.Helper()
	c.waitCommitted(t, 2*settleTimeout, joinApp, joinOrders, joinCustomers, joinApp+"-"+joinNode+"-repartition")
}

// readCommittedStrings reads topic read-committed to its end, found with a
// sentinel per partition, and returns every key and value.
func readCommittedStrings(t *testing.T, c *cluster, topic string) []topology.KeyValue[string, string] {
	t.Helper()
	sentinel := fmt.Sprintf("\x00end-%d", rand.Uint64())
	rctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	for p := range c.partitions {
		require.NoError(t, c.cl.ProduceSync(rctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(sentinel)}).FirstErr())
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.b.Addrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	require.NoError(t, err)
	defer cl.Close()
	var out []topology.KeyValue[string, string]
	seen := make(map[int32]bool)
	for len(seen) < int(c.partitions) {
		fs := cl.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "reading %s read-committed", topic)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if strings.HasPrefix(string(r.Key), "\x00end-") { // this read's or an earlier one's
				if string(r.Key) == sentinel {
					seen[r.Partition] = true
				}
				return
			}
			if !seen[r.Partition] {
				out = append(out, topology.KV(string(r.Key), string(r.Value)))
			}
		})
	}
	return out
}

// TestOrdersEnrichedWithCustomers runs the join on two instances under
// exactly-once, kills one mid-stream, and requires every order enriched
// exactly once with the customer table as it was loaded.
func TestOrdersEnrichedWithCustomers(t *testing.T) {
	const partitions = 4
	c := newCluster(t, partitions)
	resp, err := c.adm.CreateTopics(ctx(t), partitions, -1, nil, joinOrders, joinCustomers, joinEnriched)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	rng := rand.New(rand.NewPCG(15, 1))
	const nCustomers, nOrders, batches = 50, 3000, 6
	names := make(map[string]string)
	var custRecs []*kgo.Record
	for i := range nCustomers {
		id := "cust" + strconv.Itoa(i)
		for v := range 1 + rng.IntN(3) { // later updates win
			names[id] = id + "-v" + strconv.Itoa(v)
			custRecs = append(custRecs, c.keyed(joinCustomers, id, []byte(names[id])))
		}
		if i%10 == 0 { // deleted customers join as unknown
			delete(names, id)
			custRecs = append(custRecs, c.keyed(joinCustomers, id, nil))
		}
	}
	dir := t.TempDir()
	a, err := startJoins(t, c, "a", dir+"/a")
	require.NoError(t, err)
	_, err = startJoins(t, c, "b", dir+"/b")
	require.NoError(t, err)
	// The table is complete before any order is processed, so every
	// order's enrichment is known in advance.
	c.produce(t, custRecs...)
	c.waitJoinsCaughtUp(t)

	want := make(map[string]string) // order id -> enriched value
	wantKey := make(map[string]string)
	var orders [batches][]*kgo.Record
	for i := range nOrders {
		id := "order" + strconv.Itoa(i)
		cust := "cust" + strconv.Itoa(rng.IntN(nCustomers+5)) // some never existed
		item := "item" + strconv.Itoa(rng.IntN(100))
		name, ok := names[cust]
		if !ok {
			name = "?"
		}
		want[id] = id + ":" + item + ":" + name
		wantKey[id] = cust
		orders[i*batches/nOrders] = append(orders[i*batches/nOrders], c.keyed(joinOrders, id, []byte(cust+":"+item)))
	}
	for i, batch := range orders {
		if i == batches/2 {
			// Kill a while the batches so far are being processed.
			waitFor(t, settleTimeout, "output before the kill", func() (bool, string) {
				n := len(readCommittedStrings(t, c, joinEnriched))
				return n > 0, fmt.Sprintf("%d records", n)
			})
			a.Kill()
		}
		c.produce(t, batch...)
	}
	c.waitJoinsCaughtUp(t)

	got := make(map[string]string)
	for _, kv := range readCommittedStrings(t, c, joinEnriched) {
		id, _, _ := strings.Cut(kv.Value, ":")
		_, dup := got[id]
		require.False(t, dup, "order %s enriched twice", id)
		require.Equal(t, wantKey[id], kv.Key, "key of order %s", id)
		got[id] = kv.Value
	}
	require.Equal(t, want, got)
}

// TestJoinCoPartitioningError: a join of topics with different partition
// counts does not start, and says which topics and counts differ.
func TestJoinCoPartitioningError(t *testing.T) {
	c := newCluster(t, 4)
	resp, err := c.adm.CreateTopics(ctx(t), 4, -1, nil, "orders-by-customer", joinEnriched)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	resp, err = c.adm.CreateTopics(ctx(t), 3, -1, nil, joinCustomers)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	b := topology.NewBuilder()
	customers := topology.Table(b, joinCustomers, serde.String, serde.String, joinStore)
	orders := topology.Stream(b, "orders-by-customer", serde.String, serde.String)
	topology.Join(orders, customers, func(o, n string) string { return o + n }).To(joinEnriched, serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	app, err := runtime.New(topo, runtime.Config{
		ApplicationID: "joins-copart",
		Brokers:       c.b.Addrs(),
		StateDir:      t.TempDir(),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		app.Close(cctx)
	})
	err = app.Start(ctx(t))
	require.Error(t, err)
	require.ErrorContains(t, err, "orders-by-customer (4)")
	require.ErrorContains(t, err, "customers (3)")
}

// TestJoinRepartitionTakesTableCount: the repartition topic of a re-keyed
// stream gets the partition count of the table it is joined with, not
// that of the stream's own topic, so the join starts.
func TestJoinRepartitionTakesTableCount(t *testing.T) {
	c := newCluster(t, 4)
	resp, err := c.adm.CreateTopics(ctx(t), 2, -1, nil, joinOrders)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	resp, err = c.adm.CreateTopics(ctx(t), 4, -1, nil, joinCustomers, joinEnriched)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	_, err = startJoins(t, c, "a", t.TempDir())
	require.NoError(t, err)
	repart := joinApp + "-" + joinNode + "-repartition"
	td, err := c.adm.ListTopics(ctx(t), repart)
	require.NoError(t, err)
	require.NoError(t, td.Error())
	require.Len(t, td[repart].Partitions, 4)
}
