package topologytest_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// decimalInt is Kafka Streams' Integer serde as this suite writes Integer
// inputs and outputs: in decimal.
var decimalInt serde.Serde[int] = serde.Funcs[int]{
	EncodeFn: func(n int) ([]byte, error) { return []byte(strconv.Itoa(n)), nil },
	DecodeFn: func(b []byte) (int, error) { return strconv.Atoi(string(b)) },
}

func one(key, value string, ts int64) ksIn   { return ksIn{"one", key, value, ts} }
func two(key, value string, ts int64) ksIn   { return ksIn{"two", key, value, ts} }
func three(key, value string, ts int64) ksIn { return ksIn{"three", key, value, ts} }

// Kafka Streams' CogroupedKStreamImplTest aggregators.
func stringAgg(_ string, v, agg string) string { return agg + v }
func stringSumAgg(_ string, v string, agg int) int {
	n, _ := strconv.Atoi(v)
	return agg + n
}
func sumAgg(_ string, v, agg int) int { return agg + v }
func zeroInit() int                   { return 0 }

// cogroupStrings builds the CogroupedKStreamImplTest topologies that
// concatenate strings: the topics named by topics grouped by key and
// co-grouped, each with its adder, from "" into "out".
func cogroupStrings(topics ...string) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		var c topology.CogroupedKStream[string, string]
		for i, topic := range topics {
			g := topology.Stream(b, topic, serde.String, serde.String).GroupByKey(serde.String, serde.String)
			if i == 0 {
				c = topology.Cogroup(g, stringAgg)
			} else {
				c = topology.CogroupWith(c, g, stringAgg)
			}
		}
		c.Aggregate(emptyInit, "store", serde.String).ToStream().To("out", serde.String, serde.String)
	}
}

// cogroupSums builds shouldAllowDifferentOutputTypeInCoGroup's topology
// or, with intTwo, shouldCoGroupStreamsWithDifferentInputTypes': "one"
// and "two" summed as Integers into "out".
func cogroupSums(intTwo bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		g1 := topology.Stream(b, "one", serde.String, serde.String).GroupByKey(serde.String, serde.String)
		c := topology.Cogroup(g1, stringSumAgg)
		if intTwo {
			g2 := topology.Stream(b, "two", serde.String, decimalInt).GroupByKey(serde.String, decimalInt)
			c = topology.CogroupWith(c, g2, sumAgg)
		} else {
			g2 := topology.Stream(b, "two", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			c = topology.CogroupWith(c, g2, stringSumAgg)
		}
		c.Aggregate(zeroInit, "store1", decimalInt).ToStream().To("out", serde.String, decimalInt)
	}
}

// sharedKeysInput is the input of the CogroupedKStreamImplTest tests on
// two streams with shared keys.
var sharedKeysInput = []ksIn{
	one("k1", "A", 0), one("k2", "A", 1), one("k1", "A", 10), one("k2", "A", 100),
	two("k2", "B", 100), two("k2", "B", 200), two("k1", "B", 1), two("k2", "B", 500),
	two("k1", "B", 500), two("k2", "B", 500), two("k3", "B", 500), two("k2", "B", 100),
}

// sumsInput is the input of the CogroupedKStreamImplTest tests summing
// Integers.
var sumsInput = []ksIn{
	one("k1", "1", 0), one("k2", "1", 1), one("k1", "1", 10), one("k2", "1", 100),
	two("k2", "2", 100), two("k2", "2", 200), two("k1", "2", 1), two("k2", "2", 500),
	two("k1", "2", 500), two("k2", "3", 500), two("k3", "2", 500), two("k2", "2", 100),
}

var sumsOutput = out("k1 1 @0", "k2 1 @1", "k1 2 @10", "k2 2 @100", "k2 4 @100", "k2 6 @200",
	"k1 4 @10", "k2 8 @500", "k1 6 @500", "k2 11 @500", "k3 2 @500", "k2 13 @500")

var ksCogroups = []ksScenario{
	{
		name:  "CogroupedKStreamImplTest.shouldCogroupAndAggregateSingleKStreams",
		build: cogroupStrings("one"),
		steps: []ksStep{step(out("k1 A @0", "k2 B @0", "k2 BB @0", "k1 AA @0"),
			one("k1", "A", 0), one("k2", "B", 0), one("k2", "B", 0), one("k1", "A", 0))},
	},
	{
		name:  "CogroupedKStreamImplTest.testCogroupHandleNullValues",
		build: cogroupStrings("one"),
		steps: []ksStep{step(out("k1 A @0", "k2 B @0", "k2 BB @0", "k1 AA @0"),
			one("k1", "A", 0), one("k2", "B", 0), one("k2", ksNull, 0), one("k2", "B", 0), one("k1", "A", 0))},
	},
	{
		name:  "CogroupedKStreamImplTest.shouldCogroupAndAggregateTwoKStreamsWithDistinctKeys",
		build: cogroupStrings("one", "two"),
		steps: []ksStep{step(out(
			"k1 A @0", "k1 AA @1", "k1 AAA @10", "k1 AAAA @100",
			"k2 B @100", "k2 BB @200", "k2 BBB @200", "k2 BBBB @500", "k2 BBBBB @500", "k2 BBBBBB @500",
		), one("k1", "A", 0), one("k1", "A", 1), one("k1", "A", 10), one("k1", "A", 100),
			two("k2", "B", 100), two("k2", "B", 200), two("k2", "B", 1), two("k2", "B", 500), two("k2", "B", 500), two("k2", "B", 100))},
	},
	{
		// The test reads ten of the twelve outputs; the last two follow
		// from the same rules.
		name:  "CogroupedKStreamImplTest.shouldCogroupAndAggregateTwoKStreamsWithSharedKeys",
		build: cogroupStrings("one", "two"),
		steps: []ksStep{step(out(
			"k1 A @0", "k2 A @1", "k1 AA @10", "k2 AA @100", "k2 AAB @100", "k2 AABB @200",
			"k1 AAB @10", "k2 AABBB @500", "k1 AABB @500", "k2 AABBBB @500", "k3 B @500", "k2 AABBBBB @500",
		), sharedKeysInput...)},
	},
	{
		// The test reads ten of the twelve outputs; the last two follow
		// from the same rules.
		name:  "CogroupedKStreamImplTest.shouldAllowDifferentOutputTypeInCoGroup",
		build: cogroupSums(false),
		steps: []ksStep{step(sumsOutput, sumsInput...)},
	},
	{
		// The test reads eleven of the twelve outputs; the last follows
		// from the same rules.
		name:  "CogroupedKStreamImplTest.shouldCoGroupStreamsWithDifferentInputTypes",
		build: cogroupSums(true),
		steps: []ksStep{step(sumsOutput, sumsInput...)},
	},
	{
		name: "CogroupedKStreamImplTest.testCogroupKeyMixedAggregators",
		build: func(b *topology.Builder) {
			g1 := topology.Stream(b, "one", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			g2 := topology.Stream(b, "two", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			remover := func(_ string, v, agg string) string { return agg + "-" + v }
			c := topology.CogroupWith(topology.Cogroup(g1, remover), g2, toStringAdder)
			c.Aggregate(toStringInit, "store1", serde.String).ToStream().To("out", serde.String, serde.String)
		},
		steps: []ksStep{step(out(
			"k1 0-1 @0", "k2 0-1 @1", "k1 0-1-1 @10", "k2 0-1-1 @100",
			"k1 0-1-1+2 @500", "k2 0-1-1+2 @500", "k1 0-1-1+2+2 @500", "k2 0-1-1+2+2 @500",
		), one("k1", "1", 0), one("k2", "1", 1), one("k1", "1", 10), one("k2", "1", 100),
			two("k1", "2", 500), two("k2", "2", 500), two("k1", "2", 500), two("k2", "2", 100))},
	},
	{
		// The test reads eleven of the twelve outputs; the last follows
		// from the same rules.
		name:  "CogroupedKStreamImplTest.testCogroupWithThreeGroupedStreams",
		build: cogroupStrings("one", "two", "three"),
		steps: []ksStep{step(out(
			"k1 A @0", "k2 A @1", "k1 AA @10", "k2 AA @100", "k2 AAB @100", "k2 AABB @200",
			"k1 AAB @10", "k2 AABBB @500", "k1 AABB @500", "k2 AABBBB @500", "k3 B @500", "k2 AABBBBB @500",
		), one("k1", "A", 0), one("k2", "A", 1), one("k1", "A", 10), one("k2", "A", 100),
			two("k2", "B", 100), two("k2", "B", 200), two("k1", "B", 1), two("k2", "B", 500),
			three("k1", "B", 500), three("k2", "B", 500), three("k3", "B", 500), three("k2", "B", 100))},
	},
	{
		name: "CogroupedKStreamImplTest.testCogroupWithKTableKTableInnerJoin",
		build: func(b *topology.Builder) {
			g1 := topology.Stream(b, "one", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			g2 := topology.Stream(b, "two", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			t1 := topology.CogroupWith(topology.Cogroup(g1, stringAgg), g2, stringAgg).
				Aggregate(emptyInit, "store", serde.String, topology.Named("name"))
			t2 := topology.Table(b, "three", serde.String, serde.String, "three-store")
			topology.JoinTables(t1, t2, func(l, r string) string { return l + "+" + r }, "joined", serde.String).
				ToStream().To("out", serde.String, serde.String)
		},
		steps: []ksStep{
			step(nil, one("k1", "A", 5), two("k2", "B", 6)),
			step(out("k1 A+C @5", "k2 B+D @10"), three("k1", "C", 0), three("k2", "D", 10)),
		},
	},
}

// ksDefaultGrace is the grace of Kafka Streams' TimeWindows.of(size):
// a day less the window's size.
func ksDefaultGrace(size int64) int64 { return 24*60*60*1000 - size }

// cogroupTimeWindows builds TimeWindowedCogroupedKStreamImplTest's
// topologies: "one" with Kafka Streams' string adder and, with two, "two"
// with its string remover, co-grouped into time windows of size and
// advance from "0" into "out".
func cogroupTimeWindows(two bool, size, advance int64) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		g1 := topology.Stream(b, "one", serde.String, serde.String).GroupByKey(serde.String, serde.String)
		c := topology.Cogroup(g1, toStringAdder)
		if two {
			g2 := topology.Stream(b, "two", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			c = topology.CogroupWith(c, g2, toStringRemover)
		}
		w := topology.HoppingWindows(ms(size), ms(advance)).Grace(ms(ksDefaultGrace(size)))
		c.WindowedBy(w).Aggregate(toStringInit, "store", serde.String).
			ToStream().To("out", topology.TimeWindowedSerde(serde.String, size), serde.String)
	}
}

// toStringRemover is Kafka Streams' test aggregator TOSTRING_REMOVER.
func toStringRemover(_ string, v, agg string) string { return agg + "-" + v }

// The time-windowed scenarios' outputs name their window; Kafka Streams'
// tests read only the key.
var ksTimeWindowedCogroups = []ksScenario{
	{
		name:  "TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateTestStreamsTest",
		build: cogroupTimeWindows(true, 500, 500), key: windowKey(500),
		steps: []ksStep{step(out(
			"k1@[0,500] 0+A @0", "k2@[0,500] 0+A @0", "k2@[0,500] 0+A+A @1", "k1@[0,500] 0+A+A @2",
			"k1@[0,500] 0+A+A+B @3", "k2@[0,500] 0+A+A+B @3", "k2@[0,500] 0+A+A+B+B @4", "k1@[0,500] 0+A+A+B+B @4",
		), one("k1", "A", 0), one("k2", "A", 0), one("k2", "A", 1), one("k1", "A", 2),
			one("k1", "B", 3), one("k2", "B", 3), one("k2", "B", 4), one("k1", "B", 4))},
	},
	{
		name:  "TimeWindowedCogroupedKStreamImplTest.timeWindowMixAggregatorsTest",
		build: cogroupTimeWindows(true, 500, 500), key: windowKey(500),
		steps: []ksStep{step(out(
			"k1@[0,500] 0+A @0", "k2@[0,500] 0+A @0", "k2@[0,500] 0+A+A @1", "k1@[0,500] 0+A+A @2",
			"k1@[0,500] 0+A+A-B @3", "k2@[0,500] 0+A+A-B @3", "k2@[0,500] 0+A+A-B-B @4", "k1@[0,500] 0+A+A-B-B @4",
		), one("k1", "A", 0), one("k2", "A", 0), one("k2", "A", 1), one("k1", "A", 2),
			two("k1", "B", 3), two("k2", "B", 3), two("k2", "B", 4), two("k1", "B", 4))},
	},
	{
		name:  "TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateManyWindowsTest",
		build: cogroupTimeWindows(false, 500, 500), key: windowKey(500),
		steps: []ksStep{step(out(
			"k1@[0,500] 0+A @0", "k2@[0,500] 0+A @499", "k2@[500,1000] 0+A @500", "k1@[500,1000] 0+A @500",
		), one("k1", "A", 0), one("k2", "A", 499), one("k2", "A", 500), one("k1", "A", 500))},
	},
	{
		name:  "TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateOverlappingWindowsTest",
		build: cogroupTimeWindows(false, 500, 200), key: windowKey(500),
		steps: []ksStep{step(out(
			"k1@[0,500] 0+A @0", "k2@[0,500] 0+A @0",
			"k1@[0,500] 0+A+B @250", "k1@[200,700] 0+B @250", "k2@[0,500] 0+A+B @250", "k2@[200,700] 0+B @250",
			"k2@[200,700] 0+B+A @500", "k2@[400,900] 0+A @500", "k1@[200,700] 0+B+A @500", "k1@[400,900] 0+A @500",
		), one("k1", "A", 0), one("k2", "A", 0), one("k1", "B", 250), one("k2", "B", 250), one("k2", "A", 500), one("k1", "A", 500))},
	},
	{
		name:  "TimeWindowedCogroupedKStreamImplTest.timeWindowMixAggregatorsManyWindowsTest",
		build: cogroupTimeWindows(true, 500, 500), key: windowKey(500),
		steps: []ksStep{step(out(
			"k1@[0,500] 0+A @0", "k2@[0,500] 0+A @0", "k2@[0,500] 0+A+A @1", "k1@[0,500] 0+A+A @2",
			"k1@[0,500] 0+A+A-B @3", "k2@[0,500] 0+A+A-B @3", "k2@[500,1000] 0-B @501", "k1@[500,1000] 0-B @501",
		), one("k1", "A", 0), one("k2", "A", 0), one("k2", "A", 1), one("k1", "A", 2),
			two("k1", "B", 3), two("k2", "B", 3), two("k2", "B", 501), two("k1", "B", 501))},
	},
}

// cogroupSliding builds SlidingWindowedCogroupedKStreamImplTest's
// topologies: "one" with Kafka Streams' string adder and, with two, "two"
// with its string remover, co-grouped into sliding windows of 500 ms with
// 2000 ms of grace, from "0" into "out".
func cogroupSliding(two bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		g1 := topology.Stream(b, "one", serde.String, serde.String).GroupByKey(serde.String, serde.String)
		c := topology.Cogroup(g1, toStringAdder)
		if two {
			g2 := topology.Stream(b, "two", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			c = topology.CogroupWith(c, g2, toStringRemover)
		}
		c.SlidingWindowedBy(topology.NewSlidingWindows(ms(500)).Grace(ms(2000))).Aggregate(toStringInit, "store", serde.String).
			ToStream().To("out", topology.TimeWindowedSerde(serde.String, 500), serde.String)
	}
}

var ksSlidingWindowedCogroups = []ksScenario{
	{
		name:  "SlidingWindowedCogroupedKStreamImplTest.slidingWindowAggregateStreamsTest",
		build: cogroupSliding(true), key: windowKey(500),
		steps: []ksStep{step(out(
			"k1@[0,500] 0+A @500",
			"k2@[0,500] 0+A @500",
			"k2@[501,1001] 0+A @501", "k2@[1,501] 0+A+A @501",
			"k1@[501,1001] 0+A @502", "k1@[2,502] 0+A+A @502",
			"k1@[501,1001] 0+A+B @503", "k1@[503,1003] 0+B @503", "k1@[3,503] 0+A+A+B @503",
			"k2@[501,1001] 0+A+B @503", "k2@[502,1002] 0+B @503", "k2@[3,503] 0+A+A+B @503",
			"k2@[502,1002] 0+B+B @504", "k2@[501,1001] 0+A+B+B @504", "k2@[504,1004] 0+B @504", "k2@[4,504] 0+A+A+B+B @504",
			"k1@[503,1003] 0+B+B @504", "k1@[501,1001] 0+A+B+B @504", "k1@[504,1004] 0+B @504", "k1@[4,504] 0+A+A+B+B @504",
		), one("k1", "A", 500), one("k2", "A", 500), one("k2", "A", 501), one("k1", "A", 502),
			one("k1", "B", 503), one("k2", "B", 503), one("k2", "B", 504), one("k1", "B", 504))},
	},
	{
		// The test reads keys, values and timestamps; the windows follow
		// from the comments it gives each ("right window k1@500", ...).
		name:  "SlidingWindowedCogroupedKStreamImplTest.slidingWindowAggregateOverlappingWindowsTest",
		build: cogroupSliding(false), key: windowKey(500),
		steps: []ksStep{step(out(
			"k1@[0,500] 0+A @500", "k2@[0,500] 0+A @500",
			"k1@[501,1001] 0+B @750", "k1@[250,750] 0+A+B @750",
			"k2@[501,1001] 0+B @750", "k2@[250,750] 0+A+B @750",
			"k2@[501,1001] 0+B+A @1000", "k2@[751,1251] 0+A @1000", "k2@[500,1000] 0+A+B+A @1000",
			"k1@[501,1001] 0+B+A @1000", "k1@[751,1251] 0+A @1000", "k1@[500,1000] 0+A+B+A @1000",
		), one("k1", "A", 500), one("k2", "A", 500), one("k1", "B", 750), one("k2", "B", 750), one("k2", "A", 1000), one("k1", "A", 1000))},
	},
}

// cogroupSessions builds SessionWindowedCogroupedKStreamImplTest's
// topologies: "one" with Kafka Streams' string adder and, with two, "two"
// with its string remover, co-grouped into sessions of gap (with the grace
// of Kafka Streams' SessionWindows.with, a day less the gap), from "0",
// merged by joining with "+", into "out".
func cogroupSessions(two bool, gap int64) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		g1 := topology.Stream(b, "one", serde.String, serde.String).GroupByKey(serde.String, serde.String)
		c := topology.Cogroup(g1, toStringAdder)
		if two {
			g2 := topology.Stream(b, "two", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			c = topology.CogroupWith(c, g2, toStringRemover)
		}
		c.SessionWindowedBy(topology.NewSessionWindows(ms(gap)).Grace(ms(ksDefaultGrace(gap)))).
			Aggregate(toStringInit, sessionMerger, "store", serde.String).
			ToStream().To("out", topology.SessionWindowedSerde(serde.String), serde.String)
	}
}

// The session scenarios' tests read the last value of some windowed keys.
var ksSessionWindowedCogroups = []ksScenario{
	{
		name:  "SessionWindowedCogroupedKStreamImplTest.sessionWindowAggregateTest",
		build: cogroupSessions(false, 500), key: sessionKey, lastPerKey: true,
		steps: []ksStep{step(out("k1@[0,0] 0+A @0", "k11@[599,599] 0+B @599"),
			one("k1", "A", 0), one("k11", "A", 0), one("k11", "B", 599), one("k1", "B", 607))},
	},
	{
		name:  "SessionWindowedCogroupedKStreamImplTest.sessionWindowAggregate2Test",
		build: cogroupSessions(false, 500), key: sessionKey, lastPerKey: true,
		steps: []ksStep{step(out("k1@[0,0] 0+0+A+A @0", "k11@[599,599] 0+B @599"),
			one("k1", "A", 0), one("k1", "A", 0), one("k11", "B", 599), one("k1", "B", 607))},
	},
	{
		name:  "SessionWindowedCogroupedKStreamImplTest.sessionWindowAggregateTest2StreamsTest",
		build: cogroupSessions(true, 100), key: sessionKey, lastPerKey: true,
		steps: []ksStep{step(out("k1@[0,199] 0+0+0+0+A+A+A+A @199", "k1@[300,400] 0+0+B+B @400", "k11@[301,400] 0+0+B+B @400"),
			one("k1", "A", 0), one("k1", "A", 84), one("k1", "A", 113), one("k1", "A", 199),
			one("k1", "B", 300), one("k11", "B", 301), one("k11", "B", 400), one("k1", "B", 400))},
	},
	{
		name:  "SessionWindowedCogroupedKStreamImplTest.sessionWindowMixAggregatorsTest",
		build: cogroupSessions(true, 100), key: sessionKey, lastPerKey: true,
		steps: []ksStep{step(out("k1@[0,3] 0+0+0+A+A-B @3", "k11@[444,444] 0-B @444"),
			one("k1", "A", 0), one("k11", "A", 0), one("k11", "A", 1), one("k1", "A", 2),
			two("k1", "B", 3), two("k11", "B", 3), two("k11", "B", 444), two("k1", "B", 444))},
	},
	{
		name:  "SessionWindowedCogroupedKStreamImplTest.sessionWindowMixAggregatorsManyWindowsTest",
		build: cogroupSessions(true, 100), key: sessionKey, lastPerKey: true,
		steps: []ksStep{step(out("k1@[0,3] 0+0+0+A+A-B @3", "k11@[500,501] 0+0-B-B @501", "k1@[501,501] 0-B @501"),
			one("k1", "A", 0), one("k11", "A", 0), one("k11", "A", 1), one("k1", "A", 2),
			two("k1", "B", 3), two("k11", "B", 500), two("k11", "B", 501), two("k1", "B", 501))},
	},
}

func TestKafkaStreamsCogroups(t *testing.T) {
	all := slices.Concat(ksCogroups, ksTimeWindowedCogroups, ksSlidingWindowedCogroups, ksSessionWindowedCogroups)
	for _, sc := range all {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}
