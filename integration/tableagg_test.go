package integration

import (
	"fmt"
	"maps"
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

const tableAggApp = "tableagg"

// revenueTopology enriches transactions ("tx": account -> "<id>:<amount>")
// with the account's region ("accounts": account -> region) by a
// stream-table LeftJoin into "tx-enriched", and keeps, through a
// table-table join and table aggregations with retraction, the revenue of
// each region ("revenue-per-region") and its number of accounts
// ("accounts-per-region"): an account moving region moves its revenue. A
// foreign-key join gives each account its region's manager
// ("account-managers"), and a windowed stream-stream join pairs clicks and
// views ("click-views").
func revenueTopology(t *testing.T) *topology.Topology {
	b := topology.NewBuilder()
	accounts := topology.Table(b, "accounts", serde.String, serde.String, "accounts-store")
	tx := topology.Stream(b, "tx", serde.String, serde.String)
	topology.LeftJoin(tx, accounts, func(v, region string, found bool) string {
		if !found {
			region = "?"
		}
		return v + ":" + region
	}, topology.Named("enrich")).To("tx-enriched", serde.String, serde.String)

	amounts := topology.MapValues(tx, func(_, v string) int64 {
		_, a, _ := strings.Cut(v, ":")
		n, _ := strconv.ParseInt(a, 10, 64)
		return n
	})
	perAccount := amounts.GroupByKey(serde.String, serde.Int64).
		Reduce(func(sum, n int64) int64 { return sum + n }, "per-account")
	withRegion := topology.JoinTables(perAccount, accounts, func(rev int64, region string) string {
		return region + ":" + strconv.FormatInt(rev, 10)
	}, "account-revenue", serde.String, topology.Named("account-revenue"))
	topology.GroupTableBy(withRegion, func(_, v string) (string, int64) {
		region, rev, _ := strings.Cut(v, ":")
		n, _ := strconv.ParseInt(rev, 10, 64)
		return region, n
	}, "by-region", serde.String, serde.Int64).
		Reduce(func(sum, n int64) int64 { return sum + n }, func(sum, n int64) int64 { return sum - n }, "revenue-per-region").
		ToStream().To("revenue-per-region", serde.String, serde.Int64)
	// Each region's manager ("managers": region -> name), found through
	// the account's region by a foreign-key join.
	managers := topology.Table(b, "managers", serde.String, serde.String, "managers-store")
	topology.JoinByForeignKey(accounts, managers, func(_, region string) string { return region },
		func(region, manager string) string { return region + ":" + manager },
		"account-managers", serde.String, topology.Named("account-manager")).
		ToStream().To("account-managers", serde.String, serde.String)
	topology.GroupTableBy(accounts, func(acct, region string) (string, string) { return region, acct },
		"accounts-by-region", serde.String, serde.String).
		Count("accounts-per-region").ToStream().To("accounts-per-region", serde.String, serde.Int64)
	// Clicks and views of one user within 50 ms of each other, paired by
	// a windowed stream-stream join ("click-views").
	topology.JoinStreams(topology.Stream(b, "clicks", serde.String, serde.String), topology.Stream(b, "views", serde.String, serde.String),
		func(c, v string) string { return c + "|" + v }, topology.JoinTimeDifference(50*time.Millisecond).Grace(time.Hour),
		"click-view", serde.String, serde.String, serde.String, topology.Named("click-view")).
		To("click-views", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

func startTableAgg(t *testing.T, c *cluster, name, dir string) *runtime.App {
	t.Helper()
	app, err := c.startEOSPeer(t, revenueTopology(t), tableAggApp, name, dir)
	require.NoError(t, err)
	return app
}

// latestCommittedInt64 reads topic read-committed and returns the latest
// int64 value of each key, leaving out zeros (a group every member left).
func latestCommittedInt64(t *testing.T, c *cluster, topic string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, kv := range readCommittedStrings(t, c, topic) {
		n, err := serde.Int64.Decode([]byte(kv.Value))
		require.NoError(t, err)
		out[kv.Key] = n
	}
	maps.DeleteFunc(out, func(_ string, n int64) bool { return n == 0 })
	return out
}

// TestTableAggregationExactlyOnceFailover runs the revenue topology on two
// instances under exactly-once while accounts move between regions and
// are deleted and transactions flow, kills one instance mid-stream, and
// requires every transaction enriched exactly once, every click-view pair
// emitted exactly once, and the committed per-region revenue, account
// counts and account managers equal to references computed from the
// inputs: a transaction counted twice, or a move not retracted from the
// old region, would show.
func TestTableAggregationExactlyOnceFailover(t *testing.T) {
	t.Parallel() // correctness only, no timing bound: runs beside another such test
	const partitions = 4
	c := newCluster(t, partitions)
	outputs := []string{"tx-enriched", "revenue-per-region", "accounts-per-region", "account-managers", "click-views"}
	resp, err := c.adm.CreateTopics(ctx(t), partitions, -1, nil, append([]string{"tx", "accounts", "clicks", "views"}, outputs...)...)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	// Managers have fewer partitions than accounts: a foreign-key join
	// needs no co-partitioning.
	resp, err = c.adm.CreateTopics(ctx(t), partitions-1, -1, nil, "managers")
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	inputs := []string{"tx", "accounts", "managers", "clicks", "views", tableAggApp + "-by-region-repartition", tableAggApp + "-accounts-by-region-repartition",
		tableAggApp + "-account-manager-subscription-registration", tableAggApp + "-account-manager-subscription-response"}

	dir := t.TempDir()
	a := startTableAgg(t, c, "a", dir+"/a")
	startTableAgg(t, c, "b", dir+"/b")

	rng := rand.New(rand.NewPCG(15, 2))
	const nAccounts, nTx, batches = 40, 4000, 8
	region := map[string]string{}
	revenue := map[string]int64{}
	manager := map[string]string{}
	type event struct {
		click    bool
		user, id string
		ts       int64
	}
	var events []event
	base := time.Now().Add(-time.Minute).UnixMilli()
	var batch [batches][]*kgo.Record
	for i := range nTx {
		bi := i * batches / nTx
		acct := "acct" + strconv.Itoa(rng.IntN(nAccounts))
		if rng.IntN(8) == 0 {
			// Move or delete an account between transactions.
			if rng.IntN(5) == 0 {
				delete(region, acct)
				batch[bi] = append(batch[bi], c.keyed("accounts", acct, nil))
			} else {
				region[acct] = "r" + strconv.Itoa(rng.IntN(5))
				batch[bi] = append(batch[bi], c.keyed("accounts", acct, []byte(region[acct])))
			}
		}
		if rng.IntN(20) == 0 {
			// Change or remove a region's manager.
			r := "r" + strconv.Itoa(rng.IntN(5))
			if rng.IntN(4) == 0 {
				delete(manager, r)
				batch[bi] = append(batch[bi], &kgo.Record{Topic: "managers", Key: []byte(r), Partition: topology.Partition([]byte(r), partitions-1)})
			} else {
				manager[r] = "m" + strconv.Itoa(i)
				batch[bi] = append(batch[bi], &kgo.Record{Topic: "managers", Key: []byte(r), Value: []byte(manager[r]), Partition: topology.Partition([]byte(r), partitions-1)})
			}
		}
		if rng.IntN(4) == 0 {
			e := event{click: rng.IntN(2) == 0, user: "user" + strconv.Itoa(rng.IntN(10)), ts: base + int64(i*5+rng.IntN(40)), id: "e" + strconv.Itoa(i)}
			events = append(events, e)
			topic := "views"
			if e.click {
				topic = "clicks"
			}
			rec := c.keyed(topic, e.user, []byte(e.id))
			rec.Timestamp = time.UnixMilli(e.ts)
			batch[bi] = append(batch[bi], rec)
		}
		amount := int64(1 + rng.IntN(100))
		revenue[acct] += amount
		batch[bi] = append(batch[bi], c.keyed("tx", acct, []byte("tx"+strconv.Itoa(i)+":"+strconv.FormatInt(amount, 10))))
	}
	for i, recs := range batch {
		if i == batches/2 {
			waitFor(t, settleTimeout, "output before the kill", func() (bool, string) {
				n := len(readCommittedStrings(t, c, "revenue-per-region"))
				return n > 0, fmt.Sprintf("%d records", n)
			})
			a.Kill()
		}
		c.produce(t, recs...)
	}
	c.waitCommitted(t, 2*settleTimeout, tableAggApp, inputs...)

	seen := map[string]bool{}
	for _, kv := range readCommittedStrings(t, c, "tx-enriched") {
		id, _, _ := strings.Cut(kv.Value, ":")
		require.False(t, seen[id], "transaction %s enriched twice", id)
		seen[id] = true
	}
	require.Len(t, seen, nTx, "every transaction enriched once")

	wantRevenue, wantAccounts := map[string]int64{}, map[string]int64{}
	for acct, r := range region {
		wantAccounts[r]++
		wantRevenue[r] += revenue[acct]
	}
	maps.DeleteFunc(wantRevenue, func(_ string, n int64) bool { return n == 0 })
	require.Equal(t, wantRevenue, latestCommittedInt64(t, c, "revenue-per-region"), "revenue per region")
	require.Equal(t, wantAccounts, latestCommittedInt64(t, c, "accounts-per-region"), "accounts per region")

	wantManagers := map[string]string{}
	for acct, r := range region {
		if m, ok := manager[r]; ok {
			wantManagers[acct] = r + ":" + m
		}
	}
	gotManagers := map[string]string{}
	for _, kv := range readCommittedStrings(t, c, "account-managers") {
		if kv.Value == "" {
			delete(gotManagers, kv.Key) // a tombstone
		} else {
			gotManagers[kv.Key] = kv.Value
		}
	}
	require.Equal(t, wantManagers, gotManagers, "account managers")

	wantPairs, gotPairs := map[string]int{}, map[string]int{}
	for _, c := range events {
		for _, v := range events {
			if c.click && !v.click && c.user == v.user && c.ts-v.ts <= 50 && v.ts-c.ts <= 50 {
				wantPairs[c.user+"="+c.id+"|"+v.id]++
			}
		}
	}
	for _, kv := range readCommittedStrings(t, c, "click-views") {
		gotPairs[kv.Key+"="+kv.Value]++
	}
	require.NotEmpty(t, wantPairs)
	require.Equal(t, wantPairs, gotPairs, "click-view pairs, each once")
}
