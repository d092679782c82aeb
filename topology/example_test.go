package topology_test

import (
	"fmt"
	"strings"

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
	//     --> words-repartition-combine
	//     <-- split
	//   Processor: words-repartition-combine
	//     --> words-repartition-sink
	//     <-- groupby-2
	//   Sink: words-repartition-sink (topic: words-repartition, internal)
	//     <-- words-repartition-combine
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
// README shows this example; keep the two equal.
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
