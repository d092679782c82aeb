package topologytest_test

import (
	"strconv"
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
	regroupTraced(windowed, func(v string) string { return v })
}

// cogroupedWindowedRegroup is windowedRegroup over a co-grouped tumbling
// window aggregation (size 10, grace 100) of "left" and "right", which
// Kafka Streams runs through KStreamWindowAggregate as well.
func cogroupedWindowedRegroup(b *topology.Builder) {
	l := topology.Stream(b, "left", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	r := topology.Stream(b, "right", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	c := topology.CogroupWith(topology.Cogroup(l, toStringAdder), r, func(_, v, agg string) string { return agg + "*" + v })
	windowed := c.WindowedBy(topology.TumblingWindows(ms(10)).Grace(ms(100))).Aggregate(toStringInit, "agg", serde.String)
	regroupTraced(windowed, func(v string) string { return v })
}

// windowedCountRegroup is windowedRegroup over a tumbling windowed
// count (size 10, grace 100), whose new windows start from 0.
func windowedCountRegroup(b *topology.Builder) {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	counts := topology.WindowedBy(g, topology.TumblingWindows(ms(10)).Grace(ms(100))).Count("counts")
	regroupTraced(counts, func(n int64) string { return strconv.FormatInt(n, 10) })
}

var ksWindowedOldValues = []ksScenario{
	{
		name:  "KStreamWindowAggregate(sendOldValues) regrouped",
		build: windowedRegroup,
		steps: []ksStep{
			// A new window's old value is the initializer's, which the
			// regrouped table does not subtract before it has an aggregate.
			step(out("A +0+1 @0"), in("A", "1", 0)),
			// [0,10) replaces 0+1; [5,15) is new, and its initial 0 is
			// subtracted.
			step(out("A +0+1-0+1+0+1+2 @5", "A +0+1-0+1+0+1+2-0+0+2 @5"), in("A", "2", 5)),
			// An out-of-order record updates [0,10) only.
			step(out("A +0+1-0+1+0+1+2-0+0+2-0+1+2+0+1+2+3 @5"), in("A", "3", 3)),
		},
	},
	{
		name:    "KStreamWindowAggregate(sendOldValues) regrouped, caching",
		build:   windowedRegroup,
		commits: true,
		steps: []ksStep{
			// Under the cache a new window's old value is the store's:
			// none, as Kafka Streams' caching window store reads it.
			step(out("A +0+1 @0"), in("A", "1", 0)),
			// Within one commit interval [0,10) is updated twice: its
			// flushed update retracts the aggregate of the last flush,
			// and the regrouped table's cache forwards only its last.
			step(out("A +0+1-0+1+0+1+2+3+0+2 @5"), in("A", "2", 5), in("A", "3", 3)),
		},
	},
	{
		name:  "KStreamWindowAggregate(sendOldValues) count, regrouped",
		build: windowedCountRegroup,
		steps: []ksStep{
			step(out("A +1 @0"), in("A", "x", 0)),
			step(out("A +1-1+2 @4"), in("A", "y", 4)),
			// A new window's old value is the count's initial 0.
			step(out("A +1-1+2-0+1 @12"), in("A", "z", 12)),
		},
	},
	{
		name:  "KStreamWindowAggregate(sendOldValues) co-grouped, regrouped",
		build: cogroupedWindowedRegroup,
		steps: []ksStep{
			step(out("A +0+1 @0"), left("A", "1", 0)),
			step(out("A +0+1-0+1+0+1*2 @4"), right("A", "2", 4)),
			// A new window of the key retracts the initializer's value.
			step(out("A +0+1-0+1+0+1*2-0+0*3 @12"), right("A", "3", 12)),
		},
	},
}

func TestKafkaStreamsWindowedOldValues(t *testing.T) {
	for _, sc := range ksWindowedOldValues {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

// sessionRegroup is windowedRegroup over a session aggregation (gap 10,
// grace 100, Kafka Streams' toString adder and merger): a merged-away
// session is retracted by its tombstone's old value, as Kafka Streams'
// KStreamSessionWindowAggregate forwards Change(null, old), and the merged
// session is added with no old value, Change(new, null).
func sessionRegroup(b *topology.Builder) {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	sw := topology.SessionWindowedBy(g, topology.NewSessionWindows(ms(10)).Grace(ms(100)))
	sessions := topology.SessionAggregate(sw, toStringInit, toStringAdder, sessionMerger, "sessions", serde.String)
	regroupTraced(sessions, func(v string) string { return v })
}

var ksSessionOldValues = []ksScenario{
	{
		name:  "KStreamSessionWindowAggregate(sendOldValues) regrouped",
		build: sessionRegroup,
		steps: []ksStep{
			step(out("A +0+1 @0"), in("A", "1", 0)),
			step(out("A +0+1-0+1 @0", "A +0+1-0+1+0+0+1+2 @5"), in("A", "2", 5)),
			// A record within a session retracts it and adds it again.
			step(out("A +0+1-0+1+0+0+1+2-0+0+1+2 @5", "A +0+1-0+1+0+0+1+2-0+0+1+2+0+0+0+1+2+3 @5"), in("A", "3", 3)),
			step(out("A +0+1-0+1+0+0+1+2-0+0+1+2+0+0+0+1+2+3+0+4 @30"), in("A", "4", 30)),
			step(out("A +0+1-0+1+0+0+1+2-0+0+1+2+0+0+0+1+2+3+0+4-0+4 @30", "A +0+1-0+1+0+0+1+2-0+0+1+2+0+0+0+1+2+3+0+4-0+4+0+0+4+5 @30"), in("A", "5", 20)),
			step(out("B +0+1 @50"), in("B", "1", 50)),
			// A record at the time of a one-point session retracts
			// nothing: Kafka Streams sends Change(new, null) alone.
			step(out("B +0+1+0+0+1+2 @50"), in("B", "2", 50)),
		},
	},
	{
		name:    "KStreamSessionWindowAggregate(sendOldValues) regrouped, caching",
		build:   sessionRegroup,
		commits: true,
		steps: []ksStep{
			step(out("A +0+1 @0"), in("A", "1", 0)),
			step(out("A +0+1-0+1+0+0+0+1+2+3 @5"), in("A", "2", 5), in("A", "3", 3)),
			// A session made and merged away within one commit interval is
			// neither added nor retracted.
			step(out("A +0+1-0+1+0+0+0+1+2+3+0+0+4+5 @30"), in("A", "4", 30), in("A", "5", 20)),
			step(out("A +0+1-0+1+0+0+0+1+2+3+0+0+4+5-0+0+4+5+0+0+0+4+5+6 @30"), in("A", "6", 20)),
			step(out("B +0+1 @50"), in("B", "1", 50)),
			// A record at the time of a one-point session retracts
			// nothing, but the cache's flush sends the stored session
			// as the old value.
			step(out("B +0+1-0+1+0+0+1+2 @50"), in("B", "2", 50)),
		},
	},
}

func TestKafkaStreamsSessionOldValues(t *testing.T) {
	for _, sc := range ksSessionOldValues {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

// regroupTraced regroups a windowed table by its plain key, its values as
// text gives them, into a table aggregation that writes "+v" for each
// window aggregate added and "-v" for each retracted: the retractions are
// the old values the windowed table sends once the grouping asks for them.
func regroupTraced[V any](windowed topology.KTable[topology.Windowed[string], V], text func(V) string) {
	grouped := topology.GroupTableBy(windowed, func(k topology.Windowed[string], v V) (string, string) { return k.Key, text(v) },
		"regroup", serde.String, serde.String)
	topology.TableAggregate(grouped, emptyInit,
		func(_, v, agg string) string { return agg + "+" + v },
		func(_, v, agg string) string { return agg + "-" + v },
		"regrouped", serde.String).
		ToStream().To("out", serde.String, serde.String)
}

// regroupAllTraced regroups a table under the one key "all", its values as
// text gives them, into a table aggregation that writes "+v" for each
// value added and "-v" for each retracted, so that the old value of every
// update after the first key's shows as a retraction.
func regroupAllTraced[K, V any](t topology.KTable[K, V], text func(V) string) {
	grouped := topology.GroupTableBy(t, func(_ K, v V) (string, string) { return "all", text(v) },
		"regroup", serde.String, serde.String)
	topology.TableAggregate(grouped, emptyInit,
		func(_, v, agg string) string { return agg + "+" + v },
		func(_, v, agg string) string { return agg + "-" + v },
		"regrouped", serde.String).
		ToStream().To("out", serde.String, serde.String)
}

func countText(n int64) string { return strconv.FormatInt(n, 10) }

func identity(v string) string { return v }

// countRegroup counts "in" by key and regroups the counts.
func countRegroup(b *topology.Builder) {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	regroupAllTraced(g.Count("counts"), countText)
}

// rekeyedCountRegroup is countRegroup after a GroupBy.
func rekeyedCountRegroup(b *topology.Builder) {
	s := topology.Stream(b, "in", serde.String, serde.String)
	g := topology.GroupBy(s, func(k, _ string) string { return k }, "rekeyed", serde.String, serde.String)
	regroupAllTraced(g.Count("counts"), countText)
}

// rekeyedCombinedCountRegroup is rekeyedCountRegroup combining before the
// repartition.
func rekeyedCombinedCountRegroup(b *topology.Builder) {
	s := topology.Stream(b, "in", serde.String, serde.String)
	g := topology.GroupBy(s, func(k, _ string) string { return k }, "rekeyed", serde.String, serde.String)
	regroupAllTraced(g.Count("counts", topology.WithCombining()), countText)
}

// aggregateRegroup aggregates "in" by key with Kafka Streams' toString
// initializer and adder, and regroups the aggregates.
func aggregateRegroup(b *topology.Builder) {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	regroupAllTraced(topology.Aggregate(g, toStringInit, toStringAdder, "agg", serde.String), identity)
}

// reduceRegroup reduces "in" by key and regroups the reductions.
func reduceRegroup(b *topology.Builder) {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	regroupAllTraced(g.Reduce(func(a, v string) string { return a + "+" + v }, "reduced"), identity)
}

// cogroupedRegroup co-groups "left" and "right" into one aggregate by key
// and regroups the aggregates.
func cogroupedRegroup(b *topology.Builder) {
	l := topology.Stream(b, "left", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	r := topology.Stream(b, "right", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	c := topology.CogroupWith(topology.Cogroup(l, toStringAdder), r, func(_, v, agg string) string { return agg + "*" + v })
	regroupAllTraced(c.Aggregate(toStringInit, "agg", serde.String), identity)
}

// tableAggregateRegroup sums a table's values by their key's first letter
// (Kafka Streams' KTableAggregate) and regroups the sums.
func tableAggregateRegroup(b *topology.Builder) {
	t := topology.Table(b, "in", serde.String, serde.String, "table")
	g := topology.GroupTableBy(t, func(k, v string) (string, string) { return k[:1], v }, "bylead", serde.String, serde.String)
	sums := topology.TableAggregate(g, toStringInit, toStringAdder,
		func(_, v, agg string) string { return agg + "-" + v }, "sums", serde.String)
	regroupAllTraced(sums, identity)
}

// tableReduceRegroup is tableAggregateRegroup reducing (Kafka Streams'
// KTableReduce) instead.
func tableReduceRegroup(b *topology.Builder) {
	t := topology.Table(b, "in", serde.String, serde.String, "table")
	g := topology.GroupTableBy(t, func(k, v string) (string, string) { return k[:1], v }, "bylead", serde.String, serde.String)
	reduced := g.Reduce(func(agg, v string) string { return agg + "+" + v }, func(agg, v string) string { return agg + "-" + v }, "reduced")
	regroupAllTraced(reduced, identity)
}

var ksKeyValueOldValues = []ksScenario{
	{
		// KStreamAggregate forwards Change(new, old) with old the
		// initializer's value (0 for a count) when the key is new.
		name:  "KStreamAggregate(sendOldValues) count, regrouped",
		build: countRegroup,
		steps: []ksStep{
			// The regrouped table has no aggregate yet: nothing to retract from.
			step(out("all +1 @0"), in("A", "x", 0)),
			step(out("all +1-0+1 @1"), in("B", "y", 1)),
			step(out("all +1-0+1-1+2 @2"), in("A", "z", 2)),
		},
	},
	{
		name:    "KStreamAggregate(sendOldValues) count, regrouped, caching",
		build:   countRegroup,
		commits: true,
		steps: []ksStep{
			// Kafka Streams' caching store reads the old value from its
			// underlying store, which holds nothing for a new key.
			step(out("all +1 @0"), in("A", "x", 0)),
			step(out("all +1+1 @1"), in("B", "y", 1)),
			step(out("all +1+1-1+2 @2"), in("A", "z", 2)),
		},
	},
	{
		name:  "KStreamAggregate(sendOldValues) count after a re-key, regrouped",
		build: rekeyedCountRegroup,
		steps: []ksStep{
			step(out("all +1 @0"), in("A", "x", 0)),
			step(out("all +1-0+1 @1"), in("B", "y", 1)),
			step(out("all +1-0+1-1+2 @2"), in("A", "z", 2)),
		},
	},
	{
		// Combining, without the cache each record is a partial of one,
		// and the result is KStreamAggregate's too.
		name:  "KStreamAggregate(sendOldValues) count after a re-key, combined, regrouped",
		build: rekeyedCombinedCountRegroup,
		steps: []ksStep{
			step(out("all +1 @0"), in("A", "x", 0)),
			step(out("all +1-0+1 @1"), in("B", "y", 1)),
			step(out("all +1-0+1-1+2 @2"), in("A", "z", 2)),
		},
	},
	{
		name:  "KStreamAggregate(sendOldValues) aggregate, regrouped",
		build: aggregateRegroup,
		steps: []ksStep{
			step(out("all +0+x @0"), in("A", "x", 0)),
			step(out("all +0+x-0+0+y @1"), in("B", "y", 1)),
			step(out("all +0+x-0+0+y-0+x+0+x+z @2"), in("A", "z", 2)),
		},
	},
	{
		// KStreamReduce starts a key from its first value: the first
		// update's old value is null.
		name:  "KStreamReduce(sendOldValues), regrouped",
		build: reduceRegroup,
		steps: []ksStep{
			step(out("all +x @0"), in("A", "x", 0)),
			step(out("all +x+y @1"), in("B", "y", 1)),
			step(out("all +x+y-x+x+z @2"), in("A", "z", 2)),
		},
	},
	{
		// Kafka Streams co-groups through one KStreamAggregate per
		// grouped stream over the shared store.
		name:  "KStreamAggregate(sendOldValues) co-grouped, regrouped",
		build: cogroupedRegroup,
		steps: []ksStep{
			step(out("all +0+1 @0"), left("A", "1", 0)),
			step(out("all +0+1-0+0*2 @1"), right("B", "2", 1)),
			step(out("all +0+1-0+0*2-0+1+0+1*3 @2"), right("A", "3", 2)),
		},
	},
	{
		// KTableAggregate reads its old value from its store: null for
		// a new group, not the initializer's.
		name:  "KTableAggregate(sendOldValues), regrouped",
		build: tableAggregateRegroup,
		steps: []ksStep{
			step(out("all +0+1 @0"), in("a1", "1", 0)),
			step(out("all +0+1+0+2 @1"), in("b1", "2", 1)),
			step(out("all +0+1+0+2-0+1+0+1+3 @2"), in("a2", "3", 2)),
		},
	},
	{
		// KTableReduce reads its old value from its store too.
		name:  "KTableReduce(sendOldValues), regrouped",
		build: tableReduceRegroup,
		steps: []ksStep{
			step(out("all +1 @0"), in("a1", "1", 0)),
			step(out("all +1+2 @1"), in("b1", "2", 1)),
			step(out("all +1+2-1+1+3 @2"), in("a2", "3", 2)),
		},
	},
}

func TestKafkaStreamsKeyValueOldValues(t *testing.T) {
	for _, sc := range ksKeyValueOldValues {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

// windowedFinalRegroup is windowedRegroup over a tumbling windowed
// aggregation (size 10, no grace) emitting final results.
func windowedFinalRegroup(b *topology.Builder) {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	tw := topology.WindowedBy(g, topology.TumblingWindows(ms(10))).EmitFinal()
	regroupTraced(topology.WindowedAggregate(tw, toStringInit, toStringAdder, "agg", serde.String), identity)
}

// sessionFinalRegroup is sessionRegroup (gap 10, no grace) emitting final
// results.
func sessionFinalRegroup(b *topology.Builder) {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	sw := topology.SessionWindowedBy(g, topology.NewSessionWindows(ms(10))).EmitFinal()
	regroupTraced(topology.SessionAggregate(sw, toStringInit, toStringAdder, sessionMerger, "sessions", serde.String), identity)
}

// A final result goes out as Change(aggregate, null), the old value null
// (AbstractKStreamTimeWindowAggregateProcessor and
// KStreamSessionWindowAggregate emitting on window close): the regrouped
// table only adds it.
var ksFinalOldValues = []ksScenario{
	{
		name:  "KStreamWindowAggregate(ON_WINDOW_CLOSE, sendOldValues) regrouped",
		build: windowedFinalRegroup,
		steps: []ksStep{
			step(out(), in("A", "1", 0), in("A", "2", 5)),
			step(out("A +0+1+2 @5"), in("A", "3", 10)),
			step(out("A +0+1+2+0+3 @10"), in("A", "4", 20)),
		},
	},
	{
		name:  "KStreamSessionWindowAggregate(ON_WINDOW_CLOSE, sendOldValues) regrouped",
		build: sessionFinalRegroup,
		steps: []ksStep{
			step(out(), in("A", "1", 0), in("A", "2", 5)),
			step(out("A +0+0+1+2 @5"), in("A", "3", 30)),
			step(out("A +0+0+1+2+0+3 @30"), in("B", "1", 50)),
		},
	},
}

func TestKafkaStreamsFinalOldValues(t *testing.T) {
	for _, sc := range ksFinalOldValues {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

// slidingRegroup is windowedRegroup over a sliding-window aggregation
// (time difference 10, grace 100, Kafka Streams' toString initializer and
// adder); fold chooses FoldKeptRecords, final EmitFinal with no grace.
func slidingRegroup(fold, final bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
		w := topology.NewSlidingWindows(ms(10)).Grace(ms(100))
		if final {
			w = topology.NewSlidingWindows(ms(10))
		}
		sw := topology.SlidingWindowedBy(g, w)
		if fold {
			sw = sw.FoldKeptRecords()
		}
		if final {
			sw = sw.EmitFinal()
		}
		regroupTraced(topology.SlidingAggregate(sw, toStringInit, toStringAdder, "agg", serde.String), identity)
	}
}

// slidingCountRegroup is slidingRegroup over a sliding-window count.
func slidingCountRegroup(b *topology.Builder) {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	counts := topology.SlidingWindowedBy(g, topology.NewSlidingWindows(ms(10)).Grace(ms(100))).Count("counts")
	regroupTraced(counts, countText)
}

// slidingReduceRegroup is slidingRegroup over a sliding-window reduction,
// whose windows Kafka Streams starts from a null aggregate.
func slidingReduceRegroup(b *topology.Builder) {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	reduced := topology.SlidingWindowedBy(g, topology.NewSlidingWindows(ms(10)).Grace(ms(100))).
		Reduce(func(a, v string) string { return a + "+" + v }, "reduced")
	regroupTraced(reduced, identity)
}

// cogroupedSlidingRegroup is slidingRegroup over a co-grouped sliding
// aggregation of "left" and "right".
func cogroupedSlidingRegroup(b *topology.Builder) {
	l := topology.Stream(b, "left", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	r := topology.Stream(b, "right", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	c := topology.CogroupWith(topology.Cogroup(l, toStringAdder), r, func(_, v, agg string) string { return agg + "*" + v })
	windowed := c.SlidingWindowedBy(topology.NewSlidingWindows(ms(10)).Grace(ms(100))).Aggregate(toStringInit, "agg", serde.String)
	regroupTraced(windowed, identity)
}

// slidingTrace is the regrouped output of KStreamSlidingWindowAggregate
// with sendOldValues over A:1@10, A:2@15, A:3@12.
const (
	slidingTrace1 = "+0+1"
	// 2@15 creates 10's right window [11,21] from the initializer and its
	// own left window [5,15] from its left neighbour [0,10].
	slidingTrace2 = slidingTrace1 + "-0+0+2" + "-0+1+0+1+2"
	// 3@12 updates [11,21] and [5,15], creates its left window [2,12]
	// from [0,10] and its right window [13,23] as a copy of [11,21]
	// before the update, with a null old value.
	slidingTrace3 = slidingTrace2 + "-0+2+0+2+3" + "-0+1+2+0+1+2+3" + "-0+1+0+1+3" + "+0+2"
)

var ksSlidingOldValues = []ksScenario{
	{
		// Each update's old value is the aggregate it started from: a
		// window's stored one, the left neighbour's for a new left window,
		// the initializer's for a window derived from none, and null for
		// the record's right window (createCurrentRecordRightWindow).
		name:  "KStreamSlidingWindowAggregate(sendOldValues) regrouped",
		build: slidingRegroup(false, false),
		steps: []ksStep{
			step(out("A "+slidingTrace1+" @10"), in("A", "1", 10)),
			step(out("A +0+1-0+0+2 @15", "A "+slidingTrace2+" @15"), in("A", "2", 15)),
			step(out(
				"A "+slidingTrace2+"-0+2+0+2+3 @15",
				"A "+slidingTrace2+"-0+2+0+2+3-0+1+2+0+1+2+3 @15",
				"A "+slidingTrace2+"-0+2+0+2+3-0+1+2+0+1+2+3-0+1+0+1+3 @15",
				"A "+slidingTrace3+" @15",
			), in("A", "3", 12)),
		},
	},
	{
		// Under the cache a new window's old value is the store's, null,
		// as Kafka Streams' caching window store reads it from its
		// underlying store; an updated window's is the one last flushed.
		name:    "KStreamSlidingWindowAggregate(sendOldValues) regrouped, caching",
		build:   slidingRegroup(false, false),
		commits: true,
		steps: []ksStep{
			step(out("A +0+1 @10"), in("A", "1", 10)),
			step(out("A +0+1+0+2+0+1+2 @15"), in("A", "2", 15)),
			step(out("A +0+1+0+2+0+1+2-0+2+0+2+3-0+1+2+0+1+2+3+0+1+3+0+2 @15"), in("A", "3", 12)),
		},
	},
	{
		// Records before the time difference share the window [0,10],
		// which starts from the initializer (processEarly).
		name:  "KStreamSlidingWindowAggregate(sendOldValues) early records, regrouped",
		build: slidingRegroup(false, false),
		steps: []ksStep{
			step(out("A +0+1 @3"), in("A", "1", 3)),
			step(out("A +0+1-0+0+2 @5", "A +0+1-0+0+2-0+1+0+1+2 @5"), in("A", "2", 5)),
		},
	},
	{
		name:  "KStreamSlidingWindowAggregate(sendOldValues) count, regrouped",
		build: slidingCountRegroup,
		steps: []ksStep{
			step(out("A +1 @10"), in("A", "x", 10)),
			step(out("A +1-0+1 @15", "A +1-0+1-1+2 @15"), in("A", "y", 15)),
		},
	},
	{
		// A reduction's windows start from null: a window derived from
		// none is only added.
		name:  "KStreamSlidingWindowAggregate(sendOldValues) reduce, regrouped",
		build: slidingReduceRegroup,
		steps: []ksStep{
			step(out("A +1 @10"), in("A", "1", 10)),
			step(out("A +1+2 @15", "A +1+2-1+1+2 @15"), in("A", "2", 15)),
		},
	},
	{
		name:  "KStreamSlidingWindowAggregate(sendOldValues) co-grouped, regrouped",
		build: cogroupedSlidingRegroup,
		steps: []ksStep{
			step(out("A +0+1 @10"), left("A", "1", 10)),
			step(out("A +0+1-0+0*2 @15", "A +0+1-0+0*2-0+1+0+1*2 @15"), right("A", "2", 15)),
		},
	},
	{
		// A final result goes out with a null old value
		// (AbstractKStreamTimeWindowAggregateProcessor emitting on window
		// close).
		name:  "KStreamSlidingWindowAggregate(ON_WINDOW_CLOSE, sendOldValues) regrouped",
		build: slidingRegroup(false, true),
		steps: []ksStep{
			step(out(), in("A", "1", 10)),
			step(out("A +0+1 @10"), in("A", "2", 15)),
			step(out("A +0+1+0+1+2 @15", "A +0+1+0+1+2+0+2 @15"), in("A", "3", 30)),
		},
	},
	{
		// Eddy's FoldKeptRecords: a new window's old value is its
		// aggregate without the record (the initializer's when it holds
		// no other), as Kafka Streams derives it from the aggregate
		// before the record, and null for the record's right window.
		// Windows go out in start order.
		name:  "FoldKeptRecords (sendOldValues) regrouped",
		build: slidingRegroup(true, false),
		steps: []ksStep{
			step(out("A +0+1 @10"), in("A", "1", 10)),
			step(out("A +0+1-0+1+0+1+2 @15", "A +0+1-0+1+0+1+2-0+0+2 @15"), in("A", "2", 15)),
			step(out(
				"A +0+1-0+1+0+1+2-0+0+2-0+1+2+0+1+2+3 @15",
				"A +0+1-0+1+0+1+2-0+0+2-0+1+2+0+1+2+3-0+2+0+2+3 @15",
				"A +0+1-0+1+0+1+2-0+0+2-0+1+2+0+1+2+3-0+2+0+2+3-0+1+0+1+3 @15",
				"A +0+1-0+1+0+1+2-0+0+2-0+1+2+0+1+2+3-0+2+0+2+3-0+1+0+1+3+0+2 @15",
			), in("A", "3", 12)),
		},
	},
	{
		name:    "FoldKeptRecords (sendOldValues) regrouped, caching",
		build:   slidingRegroup(true, false),
		commits: true,
		steps: []ksStep{
			step(out("A +0+1 @10"), in("A", "1", 10)),
			step(out("A +0+1+0+1+2+0+2 @15"), in("A", "2", 15)),
			step(out("A +0+1+0+1+2+0+2-0+1+2+0+1+2+3-0+2+0+2+3+0+1+3+0+2 @15"), in("A", "3", 12)),
		},
	},
}

func TestKafkaStreamsSlidingOldValues(t *testing.T) {
	for _, sc := range ksSlidingOldValues {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}
