package topologytest_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// tableJoin builds Kafka Streams' KTableKTable*JoinTest topologies: the
// tables of "left" and "right" joined (op "inner", "left" or "outer") with
// Kafka Streams' MockValueJoiner.TOSTRING_JOINER into "out".
func tableJoin(op string) func(b *topology.Builder) {
	return tableJoinOf(op, "+", "left-store", "right-store", "joined")
}

// tableJoinOf builds a join of the tables of "left" and "right" (op
// "inner", "left" or "outer", in stores ls, rs and joined) whose joiner
// writes both sides' values, or "null", separated by sep, into "out".
func tableJoinOf(op, sep, ls, rs, joined string) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		l := topology.Table(b, "left", serde.String, serde.String, ls)
		r := topology.Table(b, "right", serde.String, serde.String, rs)
		var j topology.KTable[string, string]
		switch op {
		case "inner":
			j = topology.JoinTables(l, r, func(lv, rv string) string { return lv + sep + rv }, joined, serde.String)
		case "left":
			j = topology.LeftJoinTables(l, r, func(lv, rv string, ok bool) string { return lv + sep + orNull(rv, ok) }, joined, serde.String)
		default:
			j = topology.OuterJoinTables(l, r, func(lv string, lok bool, rv string, rok bool) string {
				return orNull(lv, lok) + sep + orNull(rv, rok)
			}, joined, serde.String)
		}
		j.ToStream().To("out", serde.String, serde.String)
	}
}

// tableJoinSteps are the inputs of KTableKTable*JoinTest.testJoin, with
// the outputs each join expects after each of its seven steps.
func tableJoinSteps(want [7][]string) []ksStep {
	keys := []string{"0", "1", "2", "3"}
	all := func(f func(k string) ksIn) []ksIn {
		var ins []ksIn
		for _, k := range keys {
			ins = append(ins, f(k))
		}
		return ins
	}
	n := func(k string) int64 { v, _ := strconv.ParseInt(k, 10, 64); return v }
	return []ksStep{
		step(want[0], left("0", "X0", 5), left("1", "X1", 6), left(ksNull, "SomeVal", 42)),
		step(want[1], right("0", "Y0", 0), right("1", "Y1", 10), right(ksNull, "AnotherVal", 73)),
		step(want[2], all(func(k string) ksIn { return left(k, "XX"+k, 7) })...),
		step(want[3], all(func(k string) ksIn { return right(k, "YY"+k, n(k)*5) })...),
		step(want[4], all(func(k string) ksIn { return left(k, "XXX"+k, 6) })...),
		step(want[5], right("0", ksNull, 5), right("1", ksNull, 7)),
		step(want[6], all(func(k string) ksIn { return left(k, "XXXX"+k, 13) })...),
	}
}

// tableJoinDeletes is the last step of KTableKTable*JoinTest.testJoin:
// every left key deleted.
func tableJoinDeletes(want []string) ksStep {
	return step(want, left("0", ksNull, 0), left("1", ksNull, 42), left("2", ksNull, 5), left("3", ksNull, 20))
}

var ksTableJoins = []ksScenario{
	{
		name:  "KTableKTableInnerJoinTest.testJoin",
		build: tableJoin("inner"),
		steps: append(tableJoinSteps([7][]string{
			nil,
			out("0 X0+Y0 @5", "1 X1+Y1 @10"),
			out("0 XX0+Y0 @7", "1 XX1+Y1 @10"),
			out("0 XX0+YY0 @7", "1 XX1+YY1 @7", "2 XX2+YY2 @10", "3 XX3+YY3 @15"),
			out("0 XXX0+YY0 @6", "1 XXX1+YY1 @6", "2 XXX2+YY2 @10", "3 XXX3+YY3 @15"),
			out("0 null @6", "1 null @7"),
			out("2 XXXX2+YY2 @13", "3 XXXX3+YY3 @15"),
		}), tableJoinDeletes(out("2 null @10", "3 null @20"))),
	},
	{
		name:  "KTableKTableLeftJoinTest.testJoin",
		build: tableJoin("left"),
		steps: append(tableJoinSteps([7][]string{
			out("0 X0+null @5", "1 X1+null @6"),
			out("0 X0+Y0 @5", "1 X1+Y1 @10"),
			out("0 XX0+Y0 @7", "1 XX1+Y1 @10", "2 XX2+null @7", "3 XX3+null @7"),
			out("0 XX0+YY0 @7", "1 XX1+YY1 @7", "2 XX2+YY2 @10", "3 XX3+YY3 @15"),
			out("0 XXX0+YY0 @6", "1 XXX1+YY1 @6", "2 XXX2+YY2 @10", "3 XXX3+YY3 @15"),
			out("0 XXX0+null @6", "1 XXX1+null @7"),
			out("0 XXXX0+null @13", "1 XXXX1+null @13", "2 XXXX2+YY2 @13", "3 XXXX3+YY3 @15"),
		}), tableJoinDeletes(out("0 null @0", "1 null @42", "2 null @10", "3 null @20"))),
	},
	{
		name:  "KTableKTableOuterJoinTest.testJoin",
		build: tableJoin("outer"),
		steps: append(tableJoinSteps([7][]string{
			out("0 X0+null @5", "1 X1+null @6"),
			out("0 X0+Y0 @5", "1 X1+Y1 @10"),
			out("0 XX0+Y0 @7", "1 XX1+Y1 @10", "2 XX2+null @7", "3 XX3+null @7"),
			out("0 XX0+YY0 @7", "1 XX1+YY1 @7", "2 XX2+YY2 @10", "3 XX3+YY3 @15"),
			out("0 XXX0+YY0 @6", "1 XXX1+YY1 @6", "2 XXX2+YY2 @10", "3 XXX3+YY3 @15"),
			out("0 XXX0+null @6", "1 XXX1+null @7"),
			out("0 XXXX0+null @13", "1 XXXX1+null @13", "2 XXXX2+YY2 @13", "3 XXXX3+YY3 @15"),
		}), tableJoinDeletes(out("0 null @0", "1 null @42", "2 null+YY2 @10", "3 null+YY3 @20"))),
	},
}

func TestKafkaStreamsTableJoins(t *testing.T) {
	for _, sc := range ksTableJoins {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

// tableAgg builds Kafka Streams' KTableAggregateTest topologies: the table
// of "in" grouped by selector and aggregated with Kafka Streams' test
// adder and remover from "0" (op "aggregate") or counted ("count"), into
// "out". opts are the table's.
func tableAgg(op string, selector func(k, v string) (string, string), opts ...topology.Option) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		g := topology.GroupTableBy(topology.Table(b, "in", serde.String, serde.String, "in-store", opts...), selector, "", serde.String, serde.String)
		if op == "count" {
			g.Count("count").ToStream().To("out", serde.String, serde.Int64)
			return
		}
		topology.TableAggregate(g, toStringInit, toStringAdder, func(_ string, v, agg string) string { return agg + "-" + v },
			"topic1-Canonized", serde.String).ToStream().To("out", serde.String, serde.String)
	}
}

var ksTableAggregations = []ksScenario{
	{
		name:  "KTableAggregateTest.testAggBasic",
		build: tableAgg("aggregate", func(k, v string) (string, string) { return k, v }),
		steps: []ksStep{step(out(
			"A 0+1 @10", "B 0+2 @15", "A 0+1-1+3 @20", "B 0+2-2+4 @18", "C 0+5 @5", "D 0+6 @25",
			"B 0+2-2+4-4+7 @18", "C 0+5-5+8 @10",
		), in("A", "1", 10), in("B", "2", 15), in("A", "3", 20), in("B", "4", 18), in("C", "5", 5), in("D", "6", 25),
			in("B", "7", 15), in("C", "8", 10))},
	},
	{
		name:  "KTableAggregateTest.testCount",
		build: tableAgg("count", func(_, v string) (string, string) { return v, v }),
		value: longValue,
		steps: []ksStep{step(out(
			"green 1 @10", "green 2 @10", "green 1 @12", "blue 1 @12", "yellow 1 @15", "green 2 @12",
		), in("A", "green", 10), in("B", "green", 9), in("A", "blue", 12), in("C", "yellow", 15), in("D", "green", 11))},
	},
}

func TestKafkaStreamsTableAggregations(t *testing.T) {
	for _, sc := range ksTableAggregations {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

// tableFilter builds KTableFilterTest.shouldPassThroughWithoutMaterialization's
// topology, one of its two tables into "out": the table of "in" filtered
// (or, with not, filtered out) by "the value is even".
func tableFilter(not bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		t := topology.Table(b, "in", serde.String, serde.String, "in-store")
		if not {
			t = t.FilterNot(even)
		} else {
			t = t.Filter(even)
		}
		t.ToStream().To("out", serde.String, serde.String)
	}
}

// filterToRepartition builds KTableFilterTest's topologies with old values
// sent: the table of "in" (with sourceOpts) filtered by keep (with
// filterOpts), its updates written to "out" as Kafka Streams' test
// processor on the filtered table sees them, and grouped by its own key
// and reduced, which makes the filter send old values.
func filterToRepartition(keep func(k, v string) bool, sourceOpts, filterOpts []topology.Option) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		t := topology.Table(b, "in", serde.String, serde.String, "in-store", sourceOpts...)
		f := t.Filter(keep, filterOpts...)
		f.ToStream().To("out", serde.String, serde.String)
		topology.GroupTableBy(f, func(k, v string) (string, string) { return k, v }, "", serde.String, serde.String).
			Reduce(func(agg, v string) string { return agg + v }, func(agg, v string) string { return strings.TrimSuffix(agg, v) }, "mock-result").
			ToStream().To("reduced", serde.String, serde.String)
	}
}

// filterRejects are doTestSkipNullOnMaterialization's inputs: three keys
// whose values its filter, accepting "accept", rejects.
var filterRejects = []ksIn{in("A", "reject", 5), in("B", "reject", 10), in("C", "reject", 20)}

func acceptOnly(_, v string) bool { return strings.EqualFold(v, "accept") }

// even is KTableFilterTest's predicate.
func even(_, v string) bool { n, _ := strconv.Atoi(v); return n%2 == 0 }

// cachedTable builds the topology of Kafka Streams' caching store tests
// as a table sees them: the table of "in" written to "out"; with
// oldValues, also counted by value, which makes it send old values.
func cachedTable(oldValues bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		t := topology.Table(b, "in", serde.String, serde.String, "in-store")
		t.ToStream().To("out", serde.String, serde.String)
		if oldValues {
			topology.GroupTableBy(t, func(_, v string) (string, string) { return v, v }, "", serde.String, serde.String).
				Count("by-value").ToStream().To("counted", serde.String, serde.Int64)
		}
	}
}

var tableFilterInput = []ksIn{in("A", "1", 10), in("B", "2", 5), in("C", "3", 8), in("D", "4", 14), in("A", ksNull, 18), in("B", ksNull, 15)}

// streamTableJoin builds KStreamKTableJoinTest's topology: the stream
// "left" joined with the table of "right" into "out".
func streamTableJoin(b *topology.Builder) {
	t := topology.Table(b, "right", serde.String, serde.String, "right-store")
	topology.Join(topology.Stream(b, "left", serde.String, serde.String), t, func(lv, rv string) string { return lv + "+" + rv }).
		To("out", serde.String, serde.String)
}

// pushToStream and pushToTable are KStreamKTableJoinTest's helpers: the
// first n keys with prefix, the stream's at their index, the table's at
// a random time in Kafka Streams (which its expected outputs do not
// depend on), at 0 here.
func pushToStream(n int, prefix string) []ksIn {
	var ins []ksIn
	for i := range n {
		k := strconv.Itoa(i)
		ins = append(ins, left(k, prefix+k, int64(i)))
	}
	return ins
}

func pushToTable(n int, prefix string) []ksIn {
	var ins []ksIn
	for i := range n {
		k := strconv.Itoa(i)
		ins = append(ins, right(k, prefix+k, 0))
	}
	return ins
}

var ksTableOps = []ksScenario{
	{
		name:  "KTableFilterTest.shouldPassThroughWithoutMaterialization(filter)",
		build: tableFilter(false),
		steps: []ksStep{step(out("A null @10", "B 2 @5", "C null @8", "D 4 @14", "A null @18", "B null @15"), tableFilterInput...)},
	},
	{
		name:  "KTableFilterTest.shouldPassThroughWithoutMaterialization(filterNot)",
		build: tableFilter(true),
		steps: []ksStep{step(out("A 1 @10", "B null @5", "C 3 @8", "D null @14", "A null @18", "B null @15"), tableFilterInput...)},
	},
	{
		name:  "KTableFilterTest.shouldSkipNullToRepartitionWithoutMaterialization",
		build: filterToRepartition(acceptOnly, nil, nil),
		steps: []ksStep{step(nil, filterRejects...)},
	},
	{
		name:  "KTableFilterTest.shouldSkipNullToRepartitionOnMaterialization",
		build: filterToRepartition(acceptOnly, nil, []topology.Option{topology.Materialized("store2")}),
		steps: []ksStep{step(nil, filterRejects...)},
	},
	{
		name:  "KTableFilterTest.shouldNotSkipNullIfVersionedUpstream",
		build: filterToRepartition(acceptOnly, []topology.Option{topology.Versioned(5 * time.Minute)}, nil),
		steps: []ksStep{step(out("A null @5", "B null @10", "C null @20"), filterRejects...)},
	},
	{
		name:  "KTableFilterTest.shouldSkipNullIfVersionedDownstream",
		build: filterToRepartition(acceptOnly, nil, []topology.Option{topology.Materialized("versioned"), topology.Versioned(5 * time.Minute)}),
		steps: []ksStep{step(nil, filterRejects...)},
	},
	{
		// The filter is materialized and sends old values (here because
		// it is grouped): a tombstone for a key it never held (A at 10,
		// whose 3 it rejected) goes nowhere.
		name:  "KTableFilterTest.shouldEnableSendOldValuesWhenMaterializedAlreadyAndForcedToMaterialize",
		build: filterToRepartition(even, nil, []topology.Option{topology.Materialized("store2")}),
		steps: []ksStep{
			step(nil, in("A", "1", 5), in("B", "1", 10), in("C", "1", 15)),
			step(out("A 2 @15", "B 2 @8"), in("A", "2", 15), in("B", "2", 8)),
			step(out("A null @20"), in("A", "3", 20)),
			step(out("B null @20"), in("A", ksNull, 10), in("B", ksNull, 20)),
		},
	},
	{
		name:  "KTableFilterTest.shouldEnableSendOldValuesWhenNotMaterializedAlreadyButForcedToMaterialize",
		build: filterToRepartition(even, nil, nil),
		steps: []ksStep{
			step(nil, in("A", "1", 5), in("B", "1", 10), in("C", "1", 15)),
			step(out("A 2 @15", "B 2 @8"), in("A", "2", 15), in("B", "2", 8)),
			step(out("A null @20"), in("A", "3", 20)),
			step(out("B null @20"), in("A", ksNull, 10), in("B", ksNull, 20)),
		},
	},
	{
		// The store test's puts, each step ending in a flush, through a
		// table; the timestamps are the driver's, the test has none.
		name:    "CachingInMemoryKeyValueStoreTest.shouldForwardOldValuesWhenEnabled",
		build:   cachedTable(true),
		commits: true,
		steps: []ksStep{
			step(out("1 a @1"), in("1", "a", 1)),
			step(out("1 c @3"), in("1", "b", 2), in("1", "c", 3)),
			step(out("1 null @4"), in("1", ksNull, 4)),
			step(nil, in("1", "a", 5), in("1", "b", 6), in("1", ksNull, 7)),
		},
	},
	{
		// The same puts without old values: Kafka Streams reads its
		// underlying store for the tombstone, which holds nothing for
		// a key written and deleted since the last flush.
		name:    "CachingInMemoryKeyValueStoreTest.shouldNotForwardOldValuesWhenDisabled",
		build:   cachedTable(false),
		commits: true,
		steps: []ksStep{
			step(out("1 a @1"), in("1", "a", 1)),
			step(out("1 b @2"), in("1", "b", 2)),
			step(out("1 null @3"), in("1", ksNull, 3)),
			step(nil, in("1", "a", 4), in("1", "b", 5), in("1", ksNull, 6)),
		},
	},
	{
		name:    "CachingInMemoryKeyValueStoreTest.shouldAvoidFlushingDeletionsWithoutDirtyKeys",
		build:   cachedTable(false),
		commits: true,
		steps: []ksStep{
			step(out("a 1 @1", "b 2 @2"), in("a", "1", 1), in("b", "2", 2)),
			step(nil, in("key", "value", 3), in("key", ksNull, 4)),
		},
	},
	{
		// A materialized MapTableValues keeps its results in a caching
		// store of its own; under a versioned table, which forwards every
		// update at once, that store is what collapses a result written
		// and deleted within one interval, and drops it at its flush.
		name: "CachingKeyValueStore.putAndMaybeForward (materialized KTableMapValues of a versioned table)",
		build: func(b *topology.Builder) {
			t := topology.Table(b, "in", serde.String, serde.String, "in-store", topology.Versioned(time.Minute))
			topology.MapTableValues(t, func(_, v string) string { return v + "!" }, topology.Materialized("mapped"), topology.TableValueSerde(serde.String)).
				ToStream().To("out", serde.String, serde.String)
		},
		commits: true,
		steps: []ksStep{
			step(out("1 a! @1"), in("1", "a", 1)),
			step(nil, in("2", "b", 2), in("2", ksNull, 3)),
			step(out("1 null @4"), in("1", ksNull, 4), in("2", "c", 5), in("2", ksNull, 6)),
		},
	},
	{
		// The join's result store is a caching store too: joined and
		// deleted again within one interval (the sides, versioned,
		// forward each update at once), the key is not forwarded.
		name: "CachingKeyValueStore.putAndMaybeForward (KTableKTableJoinMerger of versioned tables)",
		build: func(b *topology.Builder) {
			l := topology.Table(b, "left", serde.String, serde.String, "left-store", topology.Versioned(time.Minute))
			r := topology.Table(b, "right", serde.String, serde.String, "right-store", topology.Versioned(time.Minute))
			topology.JoinTables(l, r, func(lv, rv string) string { return lv + "+" + rv }, "joined", serde.String).
				ToStream().To("out", serde.String, serde.String)
		},
		commits: true,
		steps: []ksStep{
			step(out("1 a+x @2"), left("1", "a", 1), right("1", "x", 2)),
			step(nil, left("2", "b", 3), right("2", "y", 4), left("2", ksNull, 5)),
			step(out("1 null @6"), left("1", ksNull, 6)),
		},
	},
	{
		// CachingKeyValueStore.putAndMaybeForward: a key absent from the
		// store at its flush and deleted again is neither written nor
		// forwarded.
		name:    "CachingKeyValueStore (table source): a tombstone for a key the table does not hold is not forwarded",
		build:   cachedTable(false),
		commits: true,
		steps: []ksStep{
			step(nil, in("1", ksNull, 1)),
			step(out("1 a @2"), in("1", "a", 2), in("2", ksNull, 3)),
			step(out("1 null @4"), in("1", ksNull, 4), in("2", ksNull, 5)),
		},
	},
	{
		name: "KTableMapValuesTest.testKTable",
		build: func(b *topology.Builder) {
			topology.MapTableValues(topology.Table(b, "in", serde.String, serde.String, "in-store"), func(_, v string) string {
				return strconv.Itoa(int(v[0]) - 48)
			}).ToStream().To("out", serde.String, serde.String)
		},
		steps: []ksStep{step(out("A 1 @5", "B 2 @25", "C 3 @20", "D 4 @10"),
			in("A", "1", 5), in("B", "2", 25), in("C", "3", 20), in("D", "4", 10))},
	},
	{
		name:  "KStreamKTableJoinTest.shouldNotJoinWithEmptyTableOnStreamUpdates",
		build: streamTableJoin,
		steps: []ksStep{step(nil, pushToStream(2, "X")...)},
	},
	{
		name:  "KStreamKTableJoinTest.shouldNotJoinOnTableUpdates",
		build: streamTableJoin,
		steps: []ksStep{
			step(nil, pushToStream(2, "X")...),
			step(nil, pushToTable(2, "Y")...),
			step(out("0 X0+Y0 @0", "1 X1+Y1 @1"), pushToStream(4, "X")...),
			step(nil, pushToTable(4, "YY")...),
			step(out("0 X0+YY0 @0", "1 X1+YY1 @1", "2 X2+YY2 @2", "3 X3+YY3 @3"), pushToStream(4, "X")...),
			step(nil, pushToTable(4, "YYY")...),
		},
	},
	{
		name:  "KStreamKTableJoinTest.shouldJoinOnlyIfMatchFoundOnStreamUpdates",
		build: streamTableJoin,
		steps: []ksStep{
			step(nil, pushToTable(2, "Y")...),
			step(out("0 X0+Y0 @0", "1 X1+Y1 @1"), pushToStream(4, "X")...),
		},
	},
	{
		name:  "KStreamKTableJoinTest.shouldClearTableEntryOnNullValueUpdates",
		build: streamTableJoin,
		steps: []ksStep{
			step(nil, pushToTable(4, "Y")...),
			step(out("0 X0+Y0 @0", "1 X1+Y1 @1", "2 X2+Y2 @2", "3 X3+Y3 @3"), pushToStream(4, "X")...),
			step(nil, right("0", ksNull, 0), right("1", ksNull, 0)),
			step(out("2 XX2+Y2 @2", "3 XX3+Y3 @3"), pushToStream(4, "XX")...),
		},
	},
}

// streamTableLeftJoin builds KStreamKTableLeftJoinTest's topology: the
// stream "left" left-joined with the table of "right" into "out".
func streamTableLeftJoin(b *topology.Builder) {
	t := topology.Table(b, "right", serde.String, serde.String, "right-store")
	topology.LeftJoin(topology.Stream(b, "left", serde.String, serde.String), t, func(lv, rv string, ok bool) string {
		return lv + "+" + orNull(rv, ok)
	}).To("out", serde.String, serde.String)
}

var ksStreamTableLeftJoins = []ksScenario{
	{
		name:  "KStreamKTableLeftJoinTest.shouldJoinWithEmptyTableOnStreamUpdates",
		build: streamTableLeftJoin,
		steps: []ksStep{step(out("0 X0+null @0", "1 X1+null @1"), pushToStream(2, "X")...)},
	},
	{
		name:  "KStreamKTableLeftJoinTest.shouldNotJoinOnTableUpdates",
		build: streamTableLeftJoin,
		steps: []ksStep{
			step(out("0 X0+null @0", "1 X1+null @1"), pushToStream(2, "X")...),
			step(nil, pushToTable(2, "Y")...),
			step(out("0 X0+Y0 @0", "1 X1+Y1 @1", "2 X2+null @2", "3 X3+null @3"), pushToStream(4, "X")...),
			step(nil, pushToTable(4, "YY")...),
			step(out("0 X0+YY0 @0", "1 X1+YY1 @1", "2 X2+YY2 @2", "3 X3+YY3 @3"), pushToStream(4, "X")...),
			step(nil, pushToTable(4, "YYY")...),
		},
	},
	{
		name:  "KStreamKTableLeftJoinTest.shouldJoinRegardlessIfMatchFoundOnStreamUpdates",
		build: streamTableLeftJoin,
		steps: []ksStep{
			step(nil, pushToTable(2, "Y")...),
			step(out("0 X0+Y0 @0", "1 X1+Y1 @1", "2 X2+null @2", "3 X3+null @3"), pushToStream(4, "X")...),
		},
	},
	{
		name:  "KStreamKTableLeftJoinTest.shouldClearTableEntryOnNullValueUpdates",
		build: streamTableLeftJoin,
		steps: []ksStep{
			step(nil, pushToTable(4, "Y")...),
			step(out("0 X0+Y0 @0", "1 X1+Y1 @1", "2 X2+Y2 @2", "3 X3+Y3 @3"), pushToStream(4, "X")...),
			step(nil, right("0", ksNull, 0), right("1", ksNull, 0)),
			step(out("0 XX0+null @0", "1 XX1+null @1", "2 XX2+Y2 @2", "3 XX3+Y3 @3"), pushToStream(4, "XX")...),
		},
	},
}

func TestKafkaStreamsStreamTableLeftJoins(t *testing.T) {
	for _, sc := range ksStreamTableLeftJoins {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

func TestKafkaStreamsTableOperations(t *testing.T) {
	for _, sc := range ksTableOps {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

// fkLeftJoin builds KTableKTableForeignKeyJoinIntegrationTest's left-join
// topology with the foreign key extractor fk: "left" joined by foreign key
// with "right" into "out", printed "(<left>,<right>)". Kafka Streams'
// null foreign key is a nil one here, which serde.Bytes encodes to nil.
func fkLeftJoin(fk func(v string) []byte) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		l := topology.Table(b, "left", serde.String, serde.String, "left-store")
		r := topology.Table(b, "right", serde.Bytes, serde.String, "right-store")
		topology.LeftJoinByForeignKey(l, r, func(_, v string) []byte { return fk(v) },
			func(v, rv string, found bool) string { return "(" + v + "," + orNull(rv, found) + ")" },
			"store", serde.String).ToStream().To("out", serde.String, serde.String)
	}
}

var ksForeignKeyJoins = []ksScenario{
	{
		name:  "KTableKTableForeignKeyJoinIntegrationTest.shouldEmitRecordOnNullForeignKeyForLeftJoins",
		build: fkLeftJoin(func(string) []byte { return nil }),
		steps: []ksStep{step(out("lhs1 (lhsValue1|rhs1,null) @0"), left("lhs1", "lhsValue1|rhs1", 0))},
	},
	{
		name: "KTableKTableForeignKeyJoinIntegrationTest.shouldEmitRecordWhenOldAndNewFkDiffer",
		build: fkLeftJoin(func(v string) []byte {
			_, fk, _ := strings.Cut(v, "|")
			if fk == "returnNull" {
				return nil
			}
			return []byte(fk)
		}),
		steps: []ksStep{
			step(out("lhs1 (lhsValue1|rhs1,null) @0"), left("lhs1", "lhsValue1|rhs1", 0)),
			step(out("lhs1 (lhsValue1|returnNull,null) @0"), left("lhs1", "lhsValue1|returnNull", 0)),
			// The test then finds lhs1's subscription to rhs1 gone from the
			// subscription store; here rhs1's arrival joins nothing.
			step(nil, right("rhs1", "rhsValue1", 1)),
		},
	},
}

func TestKafkaStreamsForeignKeyJoins(t *testing.T) {
	for _, sc := range ksForeignKeyJoins {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}
