package topologytest_test

import (
	"testing"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// windowedRegroup is a hopping windowed aggregation (size 10, advance 5,
// grace 100, Kafka Streams' toString adder) regrouped by the plain key into
// a table aggregation that writes "+v" for each added and "-v" for each
// retracted window aggregate: the retractions are the old values Kafka
// Streams' KStreamWindowAggregate sends (Change(new, old), old the
// window's aggregate before the record) once the grouping asks for them.
func windowedRegroup(b *topology.Builder) {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	tw := topology.WindowedBy(g, topology.HoppingWindows(ms(10), ms(5)).Grace(ms(100)))
	windowed := topology.WindowedAggregate(tw, toStringInit, toStringAdder, "agg", serde.String)
	grouped := topology.GroupTableBy(windowed, func(k topology.Windowed[string], v string) (string, string) { return k.Key, v },
		"regroup", serde.String, serde.String)
	topology.TableAggregate(grouped, emptyInit,
		func(_, v, agg string) string { return agg + "+" + v },
		func(_, v, agg string) string { return agg + "-" + v },
		"regrouped", serde.String).
		ToStream().To("out", serde.String, serde.String)
}

var ksWindowedOldValues = []ksScenario{
	{
		name:  "KStreamWindowAggregate(sendOldValues) regrouped",
		build: windowedRegroup,
		steps: []ksStep{
			// A new window has no old value: only its aggregate is added.
			step(out("A +0+1 @0"), in("A", "1", 0)),
			// [0,10) replaces 0+1; [5,15) is new.
			step(out("A +0+1-0+1+0+1+2 @5", "A +0+1-0+1+0+1+2+0+2 @5"), in("A", "2", 5)),
			// An out-of-order record updates [0,10) only.
			step(out("A +0+1-0+1+0+1+2+0+2-0+1+2+0+1+2+3 @5"), in("A", "3", 3)),
		},
	},
	{
		name:    "KStreamWindowAggregate(sendOldValues) regrouped, caching",
		build:   windowedRegroup,
		commits: true,
		steps: []ksStep{
			step(out("A +0+1 @0"), in("A", "1", 0)),
			// Within one commit interval [0,10) is updated twice: its
			// flushed update retracts the aggregate of the last flush,
			// and the regrouped table's cache forwards only its last.
			step(out("A +0+1-0+1+0+1+2+3+0+2 @5"), in("A", "2", 5), in("A", "3", 3)),
		},
	},
}

func TestKafkaStreamsWindowedOldValues(t *testing.T) {
	for _, sc := range ksWindowedOldValues {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}
