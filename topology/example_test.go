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
