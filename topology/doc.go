// Package topology is Eddy's user API: a typed DSL and a Processor API for
// describing how records flow from input topics, through processors and
// state stores, to output topics.
//
// A word count, reading lines from "lines" and writing running counts to
// "word-counts":
//
//	b := topology.NewBuilder()
//	lines := topology.Stream(b, "lines", serde.String, serde.String)
//	words := topology.FlatMapValues(lines, func(_, line string) []string {
//		return strings.Fields(strings.ToLower(line))
//	})
//	counts := topology.GroupBy(words, func(_, w string) string { return w },
//		"words", serde.String, serde.String).Count("counts")
//	counts.ToStream().To("word-counts", serde.String, serde.Int64)
//	topo, err := b.Build()
//
// GroupBy re-keys every word and sends it through the repartition topic
// "<app>-words-repartition", so Build yields two sub-topologies: one splits
// lines, the other counts words into the store "counts". Describe prints
// that structure. Every word crosses the topic, as in Kafka Streams; given
// Count("counts", WithCombining()), the first would instead count each word
// between two commits and send the partial count once per commit, marked
// with the header CombinedHeader, and the second would add partials up
// (see WithCombining, WithMerger).
//
// # Types
//
// KStream, KGroupedStream and KTable carry their key and value types.
// Operators that keep those types are methods (Filter, Peek, Merge, To,
// GroupByKey, Count, Reduce, ToStream); operators that change them are
// functions (Map, MapValues, FlatMap, FlatMapValues, SelectKey, GroupBy,
// Aggregate, Process), because Go methods cannot have type parameters.
// Serdes are given where bytes are made: at sources, sinks, repartition
// topics and stores.
//
// # Nulls
//
// A Kafka null key or value reaches user functions as its type's zero
// value. Streams remember nullness while the key or value passes through
// unchanged, so sinks write nulls back as nulls. Aggregations (Count,
// Reduce, Aggregate) drop records whose key or value is null, silently. A
// table deletes the key of a record with a null value and forwards the
// deletion downstream as a null; it drops records with a null key.
//
// # Tables
//
// A KTable is materialized in a named store (persistent and logged by
// default) and forwards every update downstream as soon as it is applied;
// there is no emit-on-flush caching. KeyValueStore is the typed view of a
// store, for processors and for queries.
//
// # Processor API
//
// Process attaches a user Processor to a stream. Its ProcessorContext
// forwards records, opens the stores the processor declared (see
// Builder.AddStore and GetKeyValueStore), describes the input record being
// processed, and schedules stream-time and wall-clock punctuators.
//
// # Running
//
// Build checks the graph and splits it into sub-topologies, which the
// runtime runs as tasks "<subtopology>_<partition>" through the internal
// package graph, which this package fills. Package topologytest runs a
// Topology in-process without Kafka, for tests.
package topology
