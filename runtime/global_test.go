package runtime

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// globalJoinApp joins the stream "gorders" (keyed by order, valued
// "<customer>:<item>") with the global table "gcustomers" into "ginner"
// (JoinGlobal) and "gleft" (LeftJoinGlobal).
func globalJoinApp(opts ...topology.Option) *topology.Topology {
	b := topology.NewBuilder()
	customers := topology.GlobalTable(b, "gcustomers", serde.String, serde.String, "customers", opts...)
	orders := topology.Stream(b, "gorders", serde.String, serde.String)
	byCustomer := func(_ string, v string) string { c, _, _ := strings.Cut(v, ":"); return c }
	topology.JoinGlobal(orders, customers, byCustomer, func(o, c string) string { return o + "|" + c }).To("ginner", serde.String, serde.String)
	topology.LeftJoinGlobal(orders, customers, byCustomer, func(o, c string, found bool) string {
		if !found {
			return o + "|<none>"
		}
		return o + "|" + c
	}).To("gleft", serde.String, serde.String)
	topo, err := b.Build()
	if err != nil {
		panic(err)
	}
	return topo
}

// TestGlobalJoinRestoredBeforeProcessing fills a global table's topic (3
// partitions, while the stream has 2: no co-partitioning) with customers
// and tombstones before Start, then checks, under each guarantee, that
// Start restored all of it, that the very first orders are joined against
// the whole table (inner and left, tombstoned customers absent), that a
// later update of the table reaches later orders, and that queries answer
// it locally as a global store.
func TestGlobalJoinRestoredBeforeProcessing(t *testing.T) {
	t.Parallel()
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			b, adm := startBroker(t, "gorders", "ginner", "gleft")
			ctx := context.Background()
			_, err := adm.CreateTopics(ctx, 3, -1, nil, "gcustomers")
			require.NoError(t, err)
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("ginner", "gleft"), kgo.FetchMaxWait(100*time.Millisecond))
			require.NoError(t, err)
			defer cl.Close()

			table := make(map[string]string)
			var recs []*kgo.Record
			for i := range 300 {
				c := fmt.Sprintf("c%03d", i%120)
				if i%7 == 3 {
					recs = append(recs, &kgo.Record{Topic: "gcustomers", Key: []byte(c)})
					delete(table, c)
					continue
				}
				v := fmt.Sprintf("name%d", i)
				recs = append(recs, &kgo.Record{Topic: "gcustomers", Key: []byte(c), Value: []byte(v)})
				table[c] = v
			}
			require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

			app, err := New(globalJoinApp(), Config{ApplicationID: "global-" + g.String(), Brokers: b.Addrs(), StateDir: t.TempDir(),
				CommitInterval: 50 * time.Millisecond, ProcessingGuarantee: g})
			require.NoError(t, err)
			require.NoError(t, app.Start(ctx))
			defer app.Close(ctx)
			require.Equal(t, int64(len(recs)), app.Stats().GlobalRestoredRecords, "Start returns once the whole topic is restored")

			// The first orders, produced at once: every one must meet the
			// restored table.
			var orders []*kgo.Record
			var wantInner, wantLeft []string
			for i := range 150 {
				c := fmt.Sprintf("c%03d", i%130) // c120..c129 never existed
				o := fmt.Sprintf("o%d", i)
				v := c + ":" + o
				orders = append(orders, &kgo.Record{Topic: "gorders", Key: []byte(o), Value: []byte(v)})
				if name, ok := table[c]; ok {
					wantInner = append(wantInner, o+"="+v+"|"+name)
					wantLeft = append(wantLeft, o+"="+v+"|"+name)
				} else {
					wantLeft = append(wantLeft, o+"="+v+"|<none>")
				}
			}
			require.NoError(t, cl.ProduceSync(ctx, orders...).FirstErr())
			inner, left := readJoined(t, cl, len(wantInner), len(wantLeft))
			require.ElementsMatch(t, wantInner, inner)
			require.ElementsMatch(t, wantLeft, left)

			// Queries: local, partition 0, role global, with a lag.
			q := iq.NewQuerier(app.Queries())
			some := slices.Sorted(maps.Keys(table))[0]
			res, err := iq.Get(ctx, q, "customers", some, serde.String, serde.String)
			require.NoError(t, err)
			require.True(t, res.Found)
			require.Equal(t, table[some], res.Value)
			require.Equal(t, iq.RoleGlobal, res.Provenance.Role)
			require.Equal(t, int32(0), res.Provenance.Partition)
			require.False(t, res.Provenance.Rebuilding)
			require.GreaterOrEqual(t, res.Provenance.Position, int64(len(recs)))
			require.True(t, slices.ContainsFunc(app.Queries().LocalReplicas(), func(ri iq.ReplicaInfo) bool {
				return ri.Store == "customers" && ri.Role == iq.RoleGlobal
			}))
			md, err := app.Queries().Metadata()
			require.NoError(t, err)
			require.Equal(t, []string{"customers"}, md.Global)

			// An update of the table reaches later orders once the
			// global thread has applied it.
			require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "gcustomers", Key: []byte("c125"), Value: []byte("late")}).FirstErr())
			waitFor(t, 20*time.Second, "the global store to hold c125", func() bool {
				v, found, _, err := activeGet(app, "customers", []byte("c125"))
				return err == nil && found && string(v) == "late"
			})
			require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "gorders", Key: []byte("o-late"), Value: []byte("c125:o-late")}).FirstErr())
			inner, left = readJoined(t, cl, 1, 1)
			require.Equal(t, []string{"o-late=c125:o-late|late"}, inner)
			require.Equal(t, []string{"o-late=c125:o-late|late"}, left)
			waitFor(t, 10*time.Second, "the global lag to be confirmed 0", func() bool {
				for _, ri := range globalReplicas(app) {
					if ri.Store == "customers" && ri.Lag == 0 {
						return true
					}
				}
				return false
			})
			require.Equal(t, int64(1), app.Stats().GlobalFollowedRecords)
		})
	}
}

// readJoined reads until it has n records of "ginner" and m of "gleft",
// as "key=value".
func readJoined(t *testing.T, cl *kgo.Client, n, m int) (inner, left []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(inner) < n || len(left) < m {
		require.True(t, time.Now().Before(deadline), "joined output: %d of %d inner, %d of %d left", len(inner), n, len(left), m)
		pctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			kv := string(r.Key) + "=" + string(r.Value)
			if r.Topic == "ginner" {
				inner = append(inner, kv)
			} else {
				left = append(left, kv)
			}
		})
		cancel()
	}
	return inner, left
}

// TestGlobalStorePositions checks the global store's layout: each
// partition's position travels with its batch, reads and scans see only
// the data, a reopened store knows every partition's position, writes
// from outside are refused, and a reset of one partition's view asks for
// the whole store to be emptied.
func TestGlobalStorePositions(t *testing.T) {
	dir := t.TempDir()
	inner, err := statestore.OpenBadger(dir, globalBadgerOptions())
	require.NoError(t, err)
	g, err := newGlobalStore("s", "topic", inner)
	require.NoError(t, err)
	pos, err := g.Position()
	require.NoError(t, err)
	require.Equal(t, statestore.NoPosition, pos)
	v0, v1 := partitionView{g, 0}, partitionView{g, 1}
	require.NoError(t, v0.Write([]statestore.Entry{{Key: []byte("a"), Value: []byte("1")}, {Key: nil, Value: []byte("no key")}}, 10))
	require.NoError(t, v1.Write([]statestore.Entry{{Key: []byte("b"), Value: []byte("2")}, {Key: []byte("c"), Value: []byte("3")}}, 5))
	require.NoError(t, v1.Write([]statestore.Entry{{Key: []byte("c")}}, 7))
	p0, _ := v0.Position()
	p1, _ := v1.Position()
	require.Equal(t, []int64{10, 7}, []int64{p0, p1})
	pos, _ = g.Position()
	require.Equal(t, int64(17), pos)
	require.Equal(t, [][2]string{{"a", "1"}, {"b", "2"}}, scan(t, g))
	v, found, err := g.Get([]byte("b"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "2", string(v))
	require.ErrorIs(t, g.Put([]byte("x"), []byte("y")), errGlobalReadOnly)
	require.ErrorIs(t, g.Write(nil, 1), errGlobalReadOnly)
	require.NoError(t, inner.Close())

	inner, err = statestore.OpenBadger(dir, globalBadgerOptions())
	require.NoError(t, err)
	defer inner.Close()
	g, err = newGlobalStore("s", "topic", inner)
	require.NoError(t, err)
	require.Equal(t, int64(10), partitionView{g, 0}.position(0))
	require.Equal(t, int64(7), partitionView{g, 1}.position(1))
	require.Equal(t, [][2]string{{"a", "1"}, {"b", "2"}}, scan(t, g))

	require.NoError(t, partitionView{g, 1}.Reset())
	require.True(t, g.resetWanted.Load())
	require.Equal(t, statestore.NoPosition, g.position(1))
	require.NoError(t, g.empty())
	require.Empty(t, scan(t, g))
	require.Equal(t, statestore.NoPosition, g.position(0))
	require.False(t, g.resetWanted.Load())
}

// writeRecorder records the positions a store is written with.
type writeRecorder struct {
	statestore.Store
	positions []int64
}

func (w *writeRecorder) Write(entries []statestore.Entry, position int64) error {
	w.positions = append(w.positions, position)
	return w.Store.Write(entries, position)
}

// TestGlobalBatchTooBigForOneTransactionIsAtomic writes a global batch of
// 4 MiB, past one badger transaction: it must reach the backing store
// without a position, which badger stages (atomic across a crash) rather
// than tears (a crash could leave the partition's position ahead of its
// records, with no changelog replay to repair a global store).
func TestGlobalBatchTooBigForOneTransactionIsAtomic(t *testing.T) {
	inner, err := statestore.OpenBadger(t.TempDir(), globalBadgerOptions())
	require.NoError(t, err)
	defer inner.Close()
	rec := &writeRecorder{Store: inner}
	g, err := newGlobalStore("s", "topic", rec)
	require.NoError(t, err)
	value := make([]byte, 1024)
	var batch []statestore.Entry
	for i := range 4096 {
		batch = append(batch, statestore.Entry{Key: fmt.Appendf(nil, "k%05d", i), Value: value})
	}
	require.NoError(t, partitionView{g, 0}.Write(batch, 4096))
	require.Equal(t, []int64{statestore.NoPosition}, rec.positions)
	require.Equal(t, int64(4096), g.position(0))
	n, err := g.ApproximateCount()
	require.NoError(t, err)
	require.Positive(t, n)
}

func scan(t *testing.T, rw statestore.ReadWriter) [][2]string {
	t.Helper()
	it, err := rw.All()
	require.NoError(t, err)
	defer it.Close()
	var out [][2]string
	for it.Next() {
		out = append(out, [2]string{string(it.Key()), string(it.Value())})
	}
	require.NoError(t, it.Err())
	return out
}

// TestGlobalStoreRebuiltWhenTopicTruncated stops an instance, deletes the
// records of one partition of its global topic past the store's position,
// and restarts it: the partition's position no longer fits, so the whole
// store is emptied and every partition read again, leaving exactly what
// the topic still holds.
func TestGlobalStoreRebuiltWhenTopicTruncated(t *testing.T) {
	t.Parallel()
	b, adm := startBroker(t, "gorders", "ginner", "gleft")
	ctx := context.Background()
	_, err := adm.CreateTopics(ctx, 2, -1, nil, "gcustomers")
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	put := func(p int32, from, n int) {
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Topic: "gcustomers", Partition: p, Key: fmt.Appendf(nil, "p%d-%03d", p, i), Value: []byte("v")})
		}
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	}
	put(0, 0, 40)
	put(1, 0, 60)
	dir := t.TempDir()
	cfg := Config{ApplicationID: "global-truncated", Brokers: b.Addrs(), StateDir: dir, CommitInterval: 50 * time.Millisecond}
	app, err := New(globalJoinApp(), cfg)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	require.Equal(t, int64(100), app.Stats().GlobalRestoredRecords)
	require.NoError(t, app.Close(ctx))

	// Partition 0 gains records the store never saw, and loses them and
	// everything before them.
	put(0, 40, 10)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "gcustomers", Partition: 0, At: 50})
	resp, err := adm.DeleteRecords(ctx, offs)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	app, err = New(globalJoinApp(), cfg)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	defer app.Close(ctx)
	// Start waited for the rebuild: partition 1 read again in full.
	require.Equal(t, int64(60), app.Stats().GlobalRestoredRecords)
	require.Equal(t, int64(1), app.Stats().StoreResets)
	g := app.global.stores[0]
	require.Equal(t, [][2]string(nil), scanPrefix(t, g, "p0-"), "nothing of partition 0 is left")
	require.Len(t, scanPrefix(t, g, "p1-"), 60)
	// Emptied with the rest, and nothing read from partition 0 since:
	// it starts from its log start again.
	require.Equal(t, statestore.NoPosition, g.position(0))
	require.Equal(t, int64(60), g.position(1))
}

func scanPrefix(t *testing.T, rw statestore.ReadWriter, prefix string) [][2]string {
	t.Helper()
	var out [][2]string
	for _, kv := range scan(t, rw) {
		if strings.HasPrefix(kv[0], prefix) {
			out = append(out, kv)
		}
	}
	return out
}

// globalEnrich is a user processor reading a global table: it forwards
// each order as "order|name of its customer" ("?" when absent).
type globalEnrich struct {
	g    topology.GlobalKTable[string, string]
	ctx  topology.ProcessorContext[string, string]
	view *topology.ReadOnlyKeyValueStore[string, string]
}

func (p *globalEnrich) Init(ctx topology.ProcessorContext[string, string]) error {
	p.ctx = ctx
	var err error
	p.view, err = p.g.Open(ctx)
	return err
}

func (p *globalEnrich) Process(rec topology.Record[string, string]) error {
	name, found, err := p.view.Get(rec.Value)
	if err != nil {
		return err
	}
	if !found {
		name = "?"
	}
	return p.ctx.Forward(topology.Record[string, string]{Key: rec.Key, Value: rec.Value + "|" + name})
}

func (p *globalEnrich) Close() error { return nil }

// TestGlobalStoreProcessorQueriesAndMetrics checks, on one instance with a
// global table of 3 partitions read by a user processor: that the
// processor reads the restored table and its later updates; that the
// store is answerable as soon as Start returns, before any assignment
// (the routing table then names the global store alone); that range,
// all-keys and key-metadata queries answer it locally as a global store;
// and the per-partition global metrics, checked against docs/operations.md's
// metrics table both ways.
func TestGlobalStoreProcessorQueriesAndMetrics(t *testing.T) {
	t.Parallel()
	b, adm := startBroker(t, "porders", "pout")
	ctx := context.Background()
	_, err := adm.CreateTopics(ctx, 3, -1, nil, "pcustomers")
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("pout"), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for i := range 30 {
		recs = append(recs, &kgo.Record{Topic: "pcustomers", Key: fmt.Appendf(nil, "c%02d", i), Value: fmt.Appendf(nil, "name%d", i)})
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	tb := topology.NewBuilder()
	g := topology.GlobalTable(tb, "pcustomers", serde.String, serde.String, "pcust")
	orders := topology.Stream(tb, "porders", serde.String, serde.String)
	topology.Process(orders, "enrich", func() topology.Processor[string, string, string, string] { return &globalEnrich{g: g} }, g.StoreName()).
		To("pout", serde.String, serde.String)
	topo, err := tb.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "gproc", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(app.Metrics()))
	require.NoError(t, app.Start(ctx))
	defer app.Close(ctx)

	// Before the first assignment: the table of the global stores alone.
	qb := queryBackend{app}
	md, err := qb.table(nil)
	require.NoError(t, err)
	require.Equal(t, iq.Metadata{Unassigned: true, Partitions: map[string]int32{"pcust": 1}, Global: []string{"pcust"}}, md)
	q := iq.NewQuerier(app.Queries())
	res, err := iq.Get(ctx, q, "pcust", "c07", serde.String, serde.String)
	require.NoError(t, err, "restored before Start returned: answers the default bound")
	require.Equal(t, "name7", res.Value)
	require.Equal(t, iq.RoleGlobal, res.Provenance.Role)

	waitFor(t, 30*time.Second, "running", func() bool { return app.State() == StateRunning })
	all, err := iq.All(ctx, q, "pcust", serde.String, serde.String)
	require.NoError(t, err)
	require.Empty(t, all.Refused)
	require.Len(t, all.Partitions, 1)
	require.Len(t, all.Partitions[0].Entries, 30)
	require.Equal(t, iq.RoleGlobal, all.Partitions[0].Provenance.Role)
	require.Equal(t, int64(30), all.Partitions[0].Provenance.Position, "offsets summed over the topic's partitions")
	rng, err := iq.Range(ctx, q, "pcust", "c10", "c20", serde.String, serde.String)
	require.NoError(t, err)
	require.Len(t, rng.Partitions[0].Entries, 10)
	km, err := iq.KeyMetadataFor(q, "pcust", "c07", serde.String)
	require.NoError(t, err)
	require.Equal(t, iq.KeyQueryMetadata{Partition: 0, Global: true}, km)

	// The processor reads the table, then an update of it.
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "porders", Key: []byte("o1"), Value: []byte("c03")},
		&kgo.Record{Topic: "porders", Key: []byte("o2"), Value: []byte("c99")}).FirstErr())
	require.ElementsMatch(t, []string{"o1=c03|name3", "o2=c99|?"}, readTopic(t, cl, 2))
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "pcustomers", Key: []byte("c99"), Value: []byte("late")}).FirstErr())
	waitFor(t, 20*time.Second, "the global store to hold c99", func() bool {
		v, found, _, err := activeGet(app, "pcust", []byte("c99"))
		return err == nil && found && string(v) == "late"
	})
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "porders", Key: []byte("o3"), Value: []byte("c99")}).FirstErr())
	require.Equal(t, []string{"o3=c99|late"}, readTopic(t, cl, 1))

	// Metrics: one series per partition of the topic, 31 records read,
	// positions summing to the offsets, no lag once confirmed.
	var s scrape
	waitFor(t, 20*time.Second, "global metrics of 31 records, lags 0", func() bool {
		s = gather(t, reg)
		return s.sum("eddy_global_store_records_read_total", `store="pcust"`) == 31 &&
			s.sum("eddy_global_store_position", `store="pcust"`) == 31 &&
			len(s["eddy_global_store_lag_records"].series) == 3 && s.sum("eddy_global_store_lag_records") == 0
	})
	require.Equal(t, []string{"0", "1", "2"}, s.labelValues("eddy_global_store_records_read_total", "partition"))
	documented := map[string]documentedSeries{}
	for _, d := range documentedSeriesOf(t) {
		documented[d.name] = d
		if strings.HasPrefix(d.present, "per global") {
			require.Contains(t, s, d.name, "documented global series missing from App.Metrics")
		}
	}
	for name, fam := range s {
		if strings.HasPrefix(name, "eddy_global_") {
			d, ok := documented[name]
			require.True(t, ok, "%s is not in docs/operations.md's metrics table", name)
			require.Equal(t, metricTypes[d.typ], fam.typ, "%s's type", name)
		}
	}
}

// readTopic reads n records of the client's topics, as "key=value".
func readTopic(t *testing.T, cl *kgo.Client, n int) []string {
	t.Helper()
	var out []string
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n {
		require.True(t, time.Now().Before(deadline), "read %d of %d records", len(out), n)
		pctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { out = append(out, string(r.Key)+"="+string(r.Value)) })
		cancel()
	}
	return out
}

// A global store on an instance cut off from the broker claims no catch-up
// with its topic later than the cut, however recently it noticed a lag of
// 0 to the ends it last had confirmed.
func TestCutOffGlobalStoreClaimsNoCatchUpAfterTheCut(t *testing.T) {
	t.Parallel()
	b, adm := startBroker(t, "gorders", "ginner", "gleft")
	ctx := context.Background()
	_, err := adm.CreateTopics(ctx, 2, -1, nil, "gcustomers")
	require.NoError(t, err)
	hole := newBlackhole()
	app, err := New(globalJoinApp(), Config{ApplicationID: "gcut", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, address)
			if err != nil {
				return nil, err
			}
			return hole.wrap(c), nil
		}})
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() {
		hole.set(false)
		app.Close(context.Background())
	})
	customers := func() (iq.ReplicaInfo, bool) {
		for _, ri := range globalReplicas(app) {
			if ri.Store == "customers" {
				return ri, true
			}
		}
		return iq.ReplicaInfo{}, false
	}
	waitFor(t, 30*time.Second, "the global store caught up with a confirmed lag", func() bool {
		ri, ok := customers()
		return ok && ri.Lag == 0 && ri.CaughtUpAgo >= 0
	})

	hole.set(true)
	cut := time.Now()
	for time.Since(cut) < LagConfirmWindow+time.Second {
		before := time.Now()
		ri, ok := customers()
		require.True(t, ok)
		since := before.Sub(cut)
		require.GreaterOrEqual(t, ri.CaughtUpAgo, since, "caught up after the cut: %+v", ri)
		require.GreaterOrEqual(t, ri.LagConfirmedAgo, since, "topic ends confirmed after the cut: %+v", ri)
		time.Sleep(20 * time.Millisecond)
	}
}

// globalReplicas lists the global stores among the replicas queries see.
func globalReplicas(app *App) []iq.ReplicaInfo {
	var out []iq.ReplicaInfo
	for _, ri := range app.Queries().LocalReplicas() {
		if ri.Role == iq.RoleGlobal {
			out = append(out, ri)
		}
	}
	return out
}
