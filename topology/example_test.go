package topology_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

func ExampleBuilder_wordCount() {
	b := topology.NewBuilder()
	lines := topology.Stream(b, "lines", serde.String, serde.String)
	words := topology.FlatMapValues(lines, func(_, line string) []string {
		return strings.Fields(strings.ToLower(line))
	})
	counts := topology.GroupBy(words, func(_, w string) string { return w },
		"words", serde.String, serde.String).Count("counts")
	counts.ToStream().To("word-counts", serde.String, serde.Int64)
	topo, err := b.Build()
	if err != nil {
		panic(err)
	}

	// Run it without Kafka.
	d, _ := topologytest.New(topo, topologytest.Config{})
	defer d.Close()
	in := topologytest.NewInputTopic(d, "lines", serde.String, serde.String)
	out := topologytest.NewOutputTopic(d, "word-counts", serde.String, serde.Int64)
	_ = in.PipeValue("A rose is a rose")
	kvs, _ := out.ReadKeyValues()
	for _, kv := range kvs {
		fmt.Println(kv.Key, kv.Value)
	}
	// Output:
	// a 1
	// rose 1
	// is 1
	// a 2
	// rose 2
}

func ExampleTopology_Describe() {
	b := topology.NewBuilder()
	lines := topology.Stream(b, "lines", serde.String, serde.String)
	words := topology.FlatMapValues(lines, func(_, line string) []string {
		return strings.Fields(line)
	}, topology.Named("split"))
	topology.GroupBy(words, func(_, w string) string { return w },
		"words", serde.String, serde.String).Count("counts").
		ToStream().To("word-counts", serde.String, serde.Int64)
	topo, err := b.Build()
	if err != nil {
		panic(err)
	}
	fmt.Print(topo.Describe())
	// Output:
	// Sub-topology 0
	//   Source: source-0 (topic: lines)
	//     --> split
	//   Processor: split
	//     --> groupby-2
	//     <-- source-0
	//   Processor: groupby-2
	//     --> words-repartition-sink
	//     <-- split
	//   Sink: words-repartition-sink (topic: words-repartition, internal)
	//     <-- groupby-2
	//
	// Sub-topology 1
	//   Source: words-repartition-source (topic: words-repartition, internal)
	//     --> count-5
	//   Processor: count-5 (stores: counts)
	//     --> sink-6
	//     <-- words-repartition-source
	//   Sink: sink-6 (topic: word-counts)
	//     <-- count-5
	//   Store: counts (persistent, logged)
}

// regional is a customer's revenue with the region the customer is in.
type regional struct {
	Region  string
	Revenue int64
}

// Example_ordersAndRevenue enriches orders with their customers (a
// stream-table join) and keeps the revenue of each region (a table
// aggregation): when a customer moves, their revenue moves with them. The
// docs/dsl.md shows this example; keep the two equal.
func Example_ordersAndRevenue() {
	b := topology.NewBuilder()
	customers := topology.Table(b, "customers", serde.String, serde.String, "customers") // id -> "name,region"
	orders := topology.Stream(b, "orders", serde.String, serde.Int64)                    // customer id -> amount

	topology.Join(orders, customers, func(amount int64, customer string) string {
		name, region, _ := strings.Cut(customer, ",")
		return fmt.Sprintf("%s (%s) ordered %d", name, region, amount)
	}, topology.Named("enrich")).To("orders-enriched", serde.String, serde.String)

	perCustomer := orders.GroupByKey(serde.String, serde.Int64).
		Reduce(func(sum, amount int64) int64 { return sum + amount }, "revenue-per-customer")
	withRegion := topology.JoinTables(perCustomer, customers, func(revenue int64, customer string) regional {
		_, region, _ := strings.Cut(customer, ",")
		return regional{Region: region, Revenue: revenue}
	}, "customer-revenue", serde.JSON[regional](), topology.Named("customer-revenue"))
	topology.GroupTableBy(withRegion, func(_ string, r regional) (string, int64) { return r.Region, r.Revenue },
		"by-region", serde.String, serde.Int64).
		Reduce(func(sum, r int64) int64 { return sum + r }, func(sum, r int64) int64 { return sum - r }, "revenue-per-region").
		ToStream().To("revenue-per-region", serde.String, serde.Int64)

	topo, err := b.Build()
	if err != nil {
		panic(err)
	}
	d, _ := topologytest.New(topo, topologytest.Config{})
	defer d.Close()
	cust := topologytest.NewInputTopic(d, "customers", serde.String, serde.String)
	ord := topologytest.NewInputTopic(d, "orders", serde.String, serde.Int64)
	_ = cust.Pipe("c1", "Ann,north")
	_ = cust.Pipe("c2", "Bob,south")
	_ = ord.Pipe("c1", 100)
	_ = ord.Pipe("c2", 50)
	_ = ord.Pipe("c1", 30)
	_ = cust.Pipe("c1", "Ann,south") // Ann moves: her 130 leave north for south
	_ = ord.Pipe("c3", 20)           // no such customer: not enriched, in no region

	enriched, _ := topologytest.NewOutputTopic(d, "orders-enriched", serde.String, serde.String).ReadKeyValues()
	for _, kv := range enriched {
		fmt.Println(kv.Key, kv.Value)
	}
	revenue, _ := topologytest.NewOutputTopic(d, "revenue-per-region", serde.String, serde.Int64).ReadKeyValues()
	for _, kv := range revenue {
		fmt.Println(kv.Key, kv.Value)
	}
	// Output:
	// c1 Ann (north) ordered 100
	// c2 Bob (south) ordered 50
	// c1 Ann (north) ordered 30
	// north 100
	// south 50
	// north 130
	// north 0
	// south 180
}

// A count per key and minute, by the times the records carry: every
// update without EmitFinal, and each window's result once, when stream
// time passes its end plus grace, with it. A record later than that is
// left out of its closed window.
func ExampleWindowedBy() {
	b := topology.NewBuilder()
	clicks := topology.Stream(b, "clicks", serde.String, serde.String) // user -> page
	w := topology.TumblingWindows(time.Minute).Grace(10 * time.Second)
	perMinute := topology.WindowedBy(clicks.GroupByKey(serde.String, serde.String), w)
	perMinute.EmitFinal().Count("clicks-per-minute").ToStream().
		To("clicks-per-minute", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)
	topo, err := b.Build()
	if err != nil {
		panic(err)
	}
	d, _ := topologytest.New(topo, topologytest.Config{})
	defer d.Close()
	in := topologytest.NewInputTopic(d, "clicks", serde.String, serde.String)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	_ = in.PipeAt("ann", "/home", t0.Add(5*time.Second))
	_ = in.PipeAt("ann", "/cart", t0.Add(40*time.Second))
	_ = in.PipeAt("bob", "/home", t0.Add(50*time.Second))
	_ = in.PipeAt("ann", "/home", t0.Add(75*time.Second)) // the next minute: 12:00 is still open (grace)
	_ = in.PipeAt("bob", "/cart", t0.Add(72*time.Second)) // closes 12:00's windows (stream time 12:01:12 > end + grace)
	_ = in.PipeAt("ann", "/late", t0.Add(30*time.Second)) // too late for 12:00: dropped
	_ = in.PipeAt("ann", "/away", t0.Add(3*time.Minute))  // closes 12:01's windows

	out := topologytest.NewOutputTopic(d, "clicks-per-minute", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)
	recs, _ := out.ReadKeyValues()
	for _, kv := range recs {
		start, end := time.UnixMilli(kv.Key.Window.Start).UTC(), time.UnixMilli(kv.Key.Window.End).UTC()
		fmt.Printf("%s %s–%s: %d\n", kv.Key.Key, start.Format("15:04"), end.Format("15:04"), kv.Value)
	}
	fmt.Println("dropped late:", d.DroppedLate())
	// Output:
	// ann 12:00–12:01: 2
	// bob 12:00–12:01: 1
	// ann 12:01–12:02: 1
	// bob 12:01–12:02: 1
	// dropped late: 1
}
