package runtime

import (
	"context"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// TestTableJoinGroupAndRepartitionUnderRuntime runs, on the embedded
// broker with the record cache on (so table updates of one commit
// interval collapse into one, carrying the value before the first), an
// outer table-table join, a table re-grouped and counted with retraction,
// and a split stream whose branch is repartitioned by value and counted.
// Random updates and deletes go to every input; the queried stores must
// end equal to references computed from the final inputs, and the
// internal topics must carry the names given.
func TestTableJoinGroupAndRepartitionUnderRuntime(t *testing.T) {
	b, adm := startBroker(t, "left", "right", "members", "events", "events-rest")
	tb := topology.NewBuilder()
	l := topology.Table(tb, "left", serde.String, serde.String, "left-store")
	r := topology.Table(tb, "right", serde.String, serde.String, "right-store")
	topology.OuterJoinTables(l, r, func(lv string, lok bool, rv string, rok bool) string {
		return lv + "+" + rv
	}, "joined", serde.String, topology.Named("lr"))

	members := topology.Table(tb, "members", serde.String, serde.String, "members-store")
	topology.GroupTableBy(members, func(_, g string) (string, string) { return g, "" }, "by-group", serde.String, serde.String).
		Count("group-counts")

	events := topology.Stream(tb, "events", serde.String, serde.String)
	br := events.Split(topology.Named("ev")).
		Branch("a", func(_, v string) bool { return strings.HasPrefix(v, "a") }).
		DefaultBranch("rest")
	br["rest"].To("events-rest", serde.String, serde.String)
	topology.SelectKey(br["a"], func(_, v string) string { return v }).
		Repartition(nil, nil, topology.Named("a-by-value")).
		GroupByKey(serde.String, serde.String).Count("a-counts")
	topo, err := tb.Build()
	require.NoError(t, err)

	app, err := New(topo, Config{ApplicationID: "dslops", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()

	rng := rand.New(rand.NewPCG(7, 7))
	left, right, groups := map[string]string{}, map[string]string{}, map[string]string{}
	aCounts := map[string]int64{}
	var recs []*kgo.Record
	put := func(topic, k string, v *string, state map[string]string) {
		rec := &kgo.Record{Topic: topic, Key: []byte(k)}
		if v != nil {
			rec.Value = []byte(*v)
			state[k] = *v
		} else {
			delete(state, k)
		}
		recs = append(recs, rec)
	}
	for i := range 600 {
		k := "k" + strconv.Itoa(rng.IntN(6))
		var v *string
		if rng.IntN(5) > 0 {
			s := strconv.Itoa(i)
			v = &s
		}
		switch rng.IntN(4) {
		case 0:
			put("left", k, v, left)
		case 1:
			put("right", k, v, right)
		case 2:
			if v != nil {
				g := "g" + strconv.Itoa(rng.IntN(3))
				v = &g
			}
			put("members", "u"+strconv.Itoa(rng.IntN(10)), v, groups)
		default:
			ev := []string{"apple", "avocado", "banana", "apricot"}[rng.IntN(4)]
			recs = append(recs, &kgo.Record{Topic: "events", Key: []byte(k), Value: []byte(ev)})
			if strings.HasPrefix(ev, "a") {
				aCounts[ev]++
			}
		}
		// Produce in small batches so that updates of one key fall into
		// different commit intervals as well as the same one.
		if len(recs) == 20 {
			require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
			recs = nil
		}
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	wantJoined := map[string]string{}
	for i := range 6 {
		k := "k" + strconv.Itoa(i)
		lv, lok := left[k]
		rv, rok := right[k]
		if lok || rok {
			wantJoined[k] = lv + "+" + rv
		}
	}
	wantGroups := map[string]int64{}
	for _, g := range groups {
		wantGroups[g]++
	}

	q := iq.NewQuerier(app.Queries())
	query := func(keys []string, get func(string) (bool, error)) bool {
		for _, k := range keys {
			if _, err := get(k); err != nil {
				return false
			}
		}
		return true
	}
	gotJoined, gotGroups, gotA := map[string]string{}, map[string]int64{}, map[string]int64{}
	matches := func() bool {
		clear(gotJoined)
		clear(gotGroups)
		clear(gotA)
		ok := query([]string{"k0", "k1", "k2", "k3", "k4", "k5"}, func(k string) (bool, error) {
			res, err := iq.Get[string, string](ctx, q, "joined", k, serde.String, serde.String)
			if err == nil && res.Found {
				gotJoined[k] = res.Value
			}
			return res.Found, err
		}) && query([]string{"g0", "g1", "g2"}, func(k string) (bool, error) {
			res, err := iq.Get[string, int64](ctx, q, "group-counts", k, serde.String, serde.Int64)
			// A group every member left keeps a count of 0.
			if err == nil && res.Found && res.Value != 0 {
				gotGroups[k] = res.Value
			}
			return res.Found, err
		}) && query([]string{"apple", "avocado", "apricot"}, func(k string) (bool, error) {
			res, err := iq.Get[string, int64](ctx, q, "a-counts", k, serde.String, serde.Int64)
			if err == nil && res.Found {
				gotA[k] = res.Value
			}
			return res.Found, err
		})
		return ok && maps.Equal(gotJoined, wantJoined) && maps.Equal(gotGroups, wantGroups) && maps.Equal(gotA, aCounts)
	}
	for deadline := time.Now().Add(60 * time.Second); !matches(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: joined %v, want %v; group counts %v, want %v; a-counts %v, want %v",
				gotJoined, wantJoined, gotGroups, wantGroups, gotA, aCounts)
		}
	}

	topics, err := adm.ListTopics(ctx)
	require.NoError(t, err)
	for _, name := range []string{"dslops-joined-changelog", "dslops-by-group-repartition", "dslops-group-counts-changelog", "dslops-a-by-value-repartition"} {
		require.True(t, topics.Has(name), name)
	}
}

// TestForeignKeyJoinUnderRuntime runs a foreign-key join of orders (2
// partitions) with customers (3 partitions: no co-partitioning needed)
// while orders move between customers and customers are renamed and
// deleted, and requires the queried result to end equal to the join of the
// final tables. Registrations for an order's successive customers are
// answered by different tasks in any order, so an answer to an older
// value of the order can arrive last and must be recognized as stale.
func TestForeignKeyJoinUnderRuntime(t *testing.T) {
	t.Parallel()
	b, adm := startBroker(t, "orders")
	_, err := adm.CreateTopics(context.Background(), 3, -1, nil, "customers")
	require.NoError(t, err)
	tb := topology.NewBuilder()
	orders := topology.Table(tb, "orders", serde.String, serde.String, "orders-store")
	customers := topology.Table(tb, "customers", serde.String, serde.String, "customers-store")
	topology.JoinByForeignKey(orders, customers, func(_, o string) string { c, _, _ := strings.Cut(o, ":"); return c },
		func(o, name string) string { return o + "@" + name }, "enriched", serde.String, topology.Named("by-customer"))
	topo, err := tb.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "fkjoin", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 9))
	ords, custs := map[string]string{}, map[string]string{}
	var recs []*kgo.Record
	for i := range 2000 {
		switch r := rng.IntN(10); {
		case r < 6:
			o := "o" + strconv.Itoa(rng.IntN(10))
			v := "c" + strconv.Itoa(rng.IntN(5)) + ":" + strconv.Itoa(i)
			ords[o] = v
			recs = append(recs, &kgo.Record{Topic: "orders", Key: []byte(o), Value: []byte(v)})
		case r < 7:
			o := "o" + strconv.Itoa(rng.IntN(10))
			delete(ords, o)
			recs = append(recs, &kgo.Record{Topic: "orders", Key: []byte(o)})
		case r < 9:
			c := "c" + strconv.Itoa(rng.IntN(5))
			custs[c] = "n" + strconv.Itoa(i)
			recs = append(recs, &kgo.Record{Topic: "customers", Key: []byte(c), Value: []byte(custs[c])})
		default:
			c := "c" + strconv.Itoa(rng.IntN(5))
			delete(custs, c)
			recs = append(recs, &kgo.Record{Topic: "customers", Key: []byte(c)})
		}
		if len(recs) == 100 {
			require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
			recs = nil
		}
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	want := map[string]string{}
	for o, v := range ords {
		c, _, _ := strings.Cut(v, ":")
		if name, ok := custs[c]; ok {
			want[o] = v + "@" + name
		}
	}

	q := iq.NewQuerier(app.Queries())
	got := map[string]string{}
	matches := func() bool {
		clear(got)
		for i := range 10 {
			o := "o" + strconv.Itoa(i)
			res, err := iq.Get[string, string](ctx, q, "enriched", o, serde.String, serde.String)
			if err != nil {
				return false
			}
			if res.Found {
				got[o] = res.Value
			}
		}
		return maps.Equal(got, want)
	}
	for deadline := time.Now().Add(60 * time.Second); !matches(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: enriched %v, want %v", got, want)
		}
	}
	topics, err := adm.ListTopics(ctx)
	require.NoError(t, err)
	require.Equal(t, int32(3), int32(len(topics["fkjoin-by-customer-subscription-registration"].Partitions)), "registrations are partitioned like customers")
	require.Equal(t, int32(2), int32(len(topics["fkjoin-by-customer-subscription-response"].Partitions)), "responses are partitioned like orders")
	require.True(t, topics.Has("fkjoin-by-customer-subscriptions-changelog"))
}

// TestStreamOuterJoinUnderRuntime runs a windowed outer stream-stream
// join on the embedded broker: every pair of records of one key within
// 100 ms is joined once, whichever side the runtime processes first (the
// grace is long enough that nothing is late), and once every task's
// stream time is moved far ahead, every record nothing joined is emitted
// once, alone.
func TestStreamOuterJoinUnderRuntime(t *testing.T) {
	b, adm := startBroker(t, "clicks", "views", "joined")
	tb := topology.NewBuilder()
	w := topology.JoinTimeDifference(100 * time.Millisecond).Grace(time.Hour)
	show := func(v string, ok bool) string {
		if !ok {
			return "-"
		}
		return v
	}
	topology.OuterJoinStreams(topology.Stream(tb, "clicks", serde.String, serde.String), topology.Stream(tb, "views", serde.String, serde.String),
		func(c string, cok bool, v string, vok bool) string { return show(c, cok) + "|" + show(v, vok) },
		w, "click-view", serde.String, serde.String, serde.String, topology.Named("click-view")).
		To("joined", serde.String, serde.String)
	topo, err := tb.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "ssjoin", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("joined"), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()
	type rec struct {
		click bool
		key   string
		ts    int64
		value string
	}
	rng := rand.New(rand.NewPCG(3, 3))
	var recs []rec
	var krecs []*kgo.Record
	base := time.Now().Add(-time.Minute).UnixMilli()
	for i := range 300 {
		r := rec{click: rng.IntN(2) == 0, key: "u" + strconv.Itoa(rng.IntN(6)), ts: base + int64(i*20+rng.IntN(60)), value: "e" + strconv.Itoa(i)}
		recs = append(recs, r)
		topic := "views"
		if r.click {
			topic = "clicks"
		}
		krecs = append(krecs, &kgo.Record{Topic: topic, Key: []byte(r.key), Value: []byte(r.value), Timestamp: time.UnixMilli(r.ts)})
	}
	require.NoError(t, cl.ProduceSync(ctx, krecs...).FirstErr())
	want := map[string]int{}
	matched := map[int]bool{}
	for i, c := range recs {
		for j, v := range recs {
			if c.click && !v.click && c.key == v.key && c.ts-v.ts <= 100 && v.ts-c.ts <= 100 {
				want[c.key+"="+c.value+"|"+v.value]++
				matched[i], matched[j] = true, true
			}
		}
	}
	waitFor(t, 60*time.Second, "the input processed", func() bool { return committedToEnd(t, adm, "ssjoin", "clicks", "views") })
	// Move every task's stream time past the windows of all the records.
	var flush []*kgo.Record
	for p := range int32(2) {
		flush = append(flush, &kgo.Record{Topic: "clicks", Partition: p, Key: []byte("flush"), Value: []byte("f"), Timestamp: time.UnixMilli(base + int64(time.Hour/time.Millisecond)*3)})
	}
	fcl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer fcl.Close()
	require.NoError(t, fcl.ProduceSync(ctx, flush...).FirstErr())
	for i, r := range recs {
		if matched[i] {
			continue
		}
		if r.click {
			want[r.key+"="+r.value+"|-"]++
		} else {
			want[r.key+"=-|"+r.value]++
		}
	}
	got := map[string]int{}
	n, total := 0, 0
	for _, c := range want {
		total += c
	}
	deadline := time.Now().Add(60 * time.Second)
	for n < total && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			got[string(r.Key)+"="+string(r.Value)]++
			n++
		})
		cancel()
	}
	require.Equal(t, want, got)
}

// TestTableJoinCoPartitioningError: a table-table join of topics with
// different partition counts does not start, and the error names both
// topics with their counts.
func TestTableJoinCoPartitioningError(t *testing.T) {
	b, adm := startBroker(t, "left")
	_, err := adm.CreateTopics(context.Background(), 3, -1, nil, "right")
	require.NoError(t, err)
	tb := topology.NewBuilder()
	topology.JoinTables(topology.Table(tb, "left", serde.String, serde.String, "ls"), topology.Table(tb, "right", serde.String, serde.String, "rs"),
		func(l, r string) string { return l + r }, "lr", serde.String)
	topo, err := tb.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "ttcopart", Brokers: b.Addrs(), StateDir: t.TempDir()})
	require.NoError(t, err)
	err = app.Start(context.Background())
	require.ErrorContains(t, err, "sub-topology 0 reads topics with different partition counts, which must be equal: left (2), right (3)")
	app.Close(context.Background())
}
