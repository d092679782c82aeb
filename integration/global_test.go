package integration

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

const (
	globalApp       = "globaljoin"
	globalCustomers = "gl-customers"
	globalOrders    = "gl-orders"
	globalEnriched  = "gl-enriched"
	globalStore     = "customers-global"
	// globalTopicParts differs from the orders' partition count: a global
	// table needs no co-partitioning.
	globalTopicParts = 5
)

// globalEnrich joins orders (keyed by order id, valued "<customer>:<item>")
// with the global table of customers on the customer the value names, into
// "<item>:<customer name>" or "<item>:?".
func globalEnrich(t *testing.T) *topology.Topology {
	b := topology.NewBuilder()
	customers := topology.GlobalTable(b, globalCustomers, serde.String, serde.String, globalStore)
	orders := topology.Stream(b, globalOrders, serde.String, serde.String)
	topology.LeftJoinGlobal(orders, customers, func(_ string, v string) string {
		c, _, _ := strings.Cut(v, ":")
		return c
	}, func(v, name string, found bool) string {
		_, item, _ := strings.Cut(v, ":")
		if !found {
			name = "?"
		}
		return item + ":" + name
	}).To(globalEnriched, serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// globalNode is an instance of globalEnrich serving queries over HTTP.
type globalNode struct {
	app  *runtime.App
	addr string
	srv  *http.Server
	q    *iq.Querier
}

// startGlobalNode starts an instance under exactly-once on dir and serves
// the global store over HTTP; Start returns once the global store is
// restored.
func (c *cluster) startGlobalNode(t *testing.T, name, dir string) *globalNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	logs := new(logBuffer)
	app, err := runtime.New(globalEnrich(t), runtime.Config{
		ApplicationID:       globalApp,
		Brokers:             c.b.Addrs(),
		StateDir:            dir,
		Endpoint:            ln.Addr().String(),
		ProcessingGuarantee: runtime.ExactlyOnce,
		NumStreamThreads:    streamThreads(t),
		SessionTimeout:      3 * time.Second,
		CommitInterval:      200 * time.Millisecond,
		Logger:              slog.New(slog.NewTextHandler(logs, nil)).With("instance", name),
	})
	require.NoError(t, err)
	n := &globalNode{app: app, addr: ln.Addr().String(), q: iq.NewQuerier(app.Queries())}
	api := iq.NewServer(app.Queries(), iq.ServerConfig{}, iq.CodecFor(globalStore, serde.String, serde.String, nil))
	n.srv = &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
	go n.srv.Serve(ln)
	t.Cleanup(func() {
		n.srv.Close()
		api.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		app.Close(cctx)
		if t.Failed() {
			t.Logf("logs of instance %s:\n%s", name, logs.String())
		}
	})
	require.NoError(t, app.Start(ctx(t)))
	return n
}

// customerRecords writes value(i) for n updates spread over keys customers.
func (c *cluster) produceCustomers(t *testing.T, from, n, keys int, table map[string]string) {
	t.Helper()
	recs := make([]*kgo.Record, 0, n)
	for i := from; i < from+n; i++ {
		k := fmt.Sprintf("c%05d", i%keys)
		v := fmt.Sprintf("name-%d", i)
		table[k] = v
		kb := []byte(k)
		recs = append(recs, &kgo.Record{Topic: globalCustomers, Key: kb, Value: []byte(v), Partition: topology.Partition(kb, globalTopicParts)})
	}
	c.produce(t, recs...)
}

// TestGlobalTableRestoredKilledAndServedLocally is the global-table test of
// issue 15 on three instances under exactly-once: every instance restores
// the whole global table before it processes anything (the first orders
// are all joined against the full table), queries of the global store
// answer locally on every instance with provenance global (in-process, and
// through a routing Client given one instance), and an instance killed and
// restarted on its state directory reads only the topic's tail back
// before serving the table, current, from local state.
func TestGlobalTableRestoredKilledAndServedLocally(t *testing.T) {
	c := newCluster(t, 3)
	_, err := c.adm.CreateTopics(ctx(t), globalTopicParts, -1, nil, globalCustomers)
	require.NoError(t, err)
	_, err = c.adm.CreateTopics(ctx(t), 3, -1, nil, globalOrders, globalEnriched)
	require.NoError(t, err)

	const keys, total = 4000, 20000
	table := make(map[string]string)
	c.produceCustomers(t, 0, total, keys, table)

	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := make([]*globalNode, 3)
	for i := range nodes {
		nodes[i] = c.startGlobalNode(t, fmt.Sprintf("g%d", i), dirs[i])
		require.Equal(t, int64(total), nodes[i].app.Stats().GlobalRestoredRecords, "instance %d restored the whole topic in Start", i)
	}

	// Orders produced at once: whichever instance processes one, it
	// meets the whole table.
	want := make(map[string]string)
	var orders []*kgo.Record
	for i := range 600 {
		cust := fmt.Sprintf("c%05d", (i*7)%(keys+50)) // some customers never existed
		o := fmt.Sprintf("o%04d", i)
		name, ok := table[cust]
		if !ok {
			name = "?"
		}
		want[o] = fmt.Sprintf("item%d:%s", i, name)
		kb := []byte(o)
		orders = append(orders, &kgo.Record{Topic: globalOrders, Key: kb, Value: fmt.Appendf(nil, "%s:item%d", cust, i), Partition: topology.Partition(kb, 3)})
	}
	c.produce(t, orders...)
	require.Equal(t, want, c.readStrings(t, globalEnriched, len(want)))

	// Local answers on every instance, in-process and over HTTP through
	// a Client that knows only that instance.
	check := func(n *globalNode, key string) {
		t.Helper()
		res, err := iq.Get(context.Background(), n.q, globalStore, key, serde.String, serde.String)
		require.NoError(t, err)
		require.True(t, res.Found)
		require.Equal(t, table[key], res.Value)
		require.Equal(t, iq.RoleGlobal, res.Provenance.Role)
		require.Equal(t, n.addr, res.Provenance.Host)
		cl, err := iq.NewClient([]string{n.addr}, iq.ClientOptions{})
		require.NoError(t, err)
		defer cl.Close()
		cres, err := iq.ClientGet[string, string](context.Background(), cl, globalStore, key, serde.String)
		require.NoError(t, err)
		require.Equal(t, table[key], cres.Value)
		require.Equal(t, iq.RoleGlobal, cres.Provenance.Role)
		require.Equal(t, n.addr, cres.Provenance.Host, "the Client asks the instance it was given")
	}
	for _, n := range nodes {
		check(n, "c00042")
	}

	// Kill one instance, update the table meanwhile, restart it on its
	// state directory: it reads back only the tail.
	nodes[1].app.Kill()
	nodes[1].srv.Close()
	const tail = 300
	c.produceCustomers(t, total, tail, keys, table)
	nodes[1] = c.startGlobalNode(t, "g1-restarted", dirs[1])
	restored := nodes[1].app.Stats().GlobalRestoredRecords
	require.LessOrEqual(t, restored, int64(tail), "a restart reads only what the topic gained since the kill")
	require.Positive(t, restored)
	// In-process queries need nothing more; the Client needs the routing
	// table, which the restarted instance has after its first assignment.
	waitFor(t, 20*time.Second, "the restarted instance's routing table", func() (bool, string) {
		_, err := nodes[1].app.Queries().Metadata()
		return err == nil, fmt.Sprint(err)
	})
	for _, n := range nodes {
		waitFor(t, 20*time.Second, "the tail on every instance", func() (bool, string) {
			v, found, _, err := activeGet(n.app, globalStore, []byte(fmt.Sprintf("c%05d", (total+tail-1)%keys)))
			return err == nil && found && string(v) == fmt.Sprintf("name-%d", total+tail-1), fmt.Sprintf("%q %v %v", v, found, err)
		})
		check(n, fmt.Sprintf("c%05d", (total+1)%keys))
	}
}

// readStrings reads topic from the start until it holds n distinct keys,
// and returns the latest value of each.
func (c *cluster) readStrings(t *testing.T, topic string, n int) map[string]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.b.Addrs()...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	got := make(map[string]string)
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < n {
		require.True(t, time.Now().Before(deadline), "read %d of %d keys of %s", len(got), n, topic)
		pctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got[string(r.Key)] = string(r.Value) })
		cancel()
	}
	return got
}
