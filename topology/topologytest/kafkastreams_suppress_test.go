package topologytest_test

import (
	"math"
	"testing"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// suppressedCounts builds SuppressScenarioTest's value counts: the table
// of "in" grouped by value and counted, suppressed as s into "out".
func suppressedCounts(s topology.Suppressed) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		counts := topology.GroupTableBy(topology.Table(b, "in", serde.String, serde.String, "in-store"),
			func(k, v string) (string, string) { return v, k }, "", serde.String, serde.String).Count("counts")
		counts.Suppress(s, "suppressed").ToStream().To("out", serde.String, serde.Int64)
	}
}

// suppressedWindowCounts builds SuppressScenarioTest's windowed counts of
// "in", their final results into "out".
func suppressedWindowCounts(sessions bool, size, grace int64) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
		var counts topology.KTable[topology.Windowed[string], int64]
		ks := topology.TimeWindowedSerde(serde.String, size)
		if sessions {
			counts = topology.SessionWindowedBy(g, topology.NewSessionWindows(ms(size)).Grace(ms(grace))).Count("counts")
			ks = topology.SessionWindowedSerde(serde.String)
		} else {
			counts = topology.WindowedBy(g, topology.TumblingWindows(ms(size)).Grace(ms(grace))).Count("counts")
		}
		counts.Suppress(topology.UntilWindowCloses(topology.Unbounded()), "suppressed").ToStream().To("out", ks, serde.Int64)
	}
}

var ksSuppression = []ksScenario{
	{
		name:  "SuppressScenarioTest.shouldImmediatelyEmitEventsWithZeroEmitAfter",
		build: suppressedCounts(topology.UntilTimeLimit(0, topology.Unbounded())),
		value: longValue,
		steps: []ksStep{
			step(out("v1 1 @0", "v1 0 @1", "v2 1 @1", "v1 1 @2"), in("k1", "v1", 0), in("k1", "v2", 1), in("k2", "v1", 2)),
			step(out("x 1 @3"), in("x", "x", 3)),
			step(out("x 0 @4", "y 1 @4"), in("x", "y", 4)),
		},
	},
	{
		name:  "SuppressScenarioTest.shouldSuppressIntermediateEventsWithTimeLimit",
		build: suppressedCounts(topology.UntilTimeLimit(2*time.Millisecond, topology.Unbounded())),
		value: longValue,
		steps: []ksStep{
			step(out("v1 1 @2"), in("k1", "v1", 0), in("k1", "v2", 1), in("k2", "v1", 2)),
			step(out("v2 1 @1"), in("tick", "tick", 3)),
			step(nil, in("tick", "tock", 4)),
		},
	},
	{
		name:  "SuppressScenarioTest.shouldSuppressIntermediateEventsWithRecordLimit",
		build: suppressedCounts(topology.UntilTimeLimit(time.Duration(math.MaxInt64), topology.MaxRecords(1).EmitEarlyWhenFull())),
		value: longValue,
		steps: []ksStep{
			step(out("v1 0 @1", "v2 1 @1"), in("k1", "v1", 0), in("k1", "v2", 1), in("k2", "v1", 2)),
			step(out("v1 1 @2"), in("x", "x", 3)),
		},
	},
	{
		name:  "SuppressScenarioTest.shouldSupportFinalResultsForTimeWindows",
		build: suppressedWindowCounts(false, 2, 1), key: windowKey(2), value: longValue,
		late: 1,
		steps: []ksStep{step(out("k1@[0,2] 4 @1", "k1@[2,4] 1 @2"),
			in("k1", "v1", 0), in("k1", "v1", 1), in("k1", "v1", 2), in("k1", "v1", 1), in("k1", "v1", 0), in("k1", "v1", 5),
			in("k1", "v1", 0))},
	},
	{
		name:  "SuppressScenarioTest.shouldSupportFinalResultsForTimeWindowsWithLargeJump",
		build: suppressedWindowCounts(false, 2, 2), key: windowKey(2), value: longValue,
		late: 1,
		steps: []ksStep{step(out("k1@[0,2] 4 @1", "k1@[2,4] 2 @3", "k1@[4,6] 1 @4"),
			in("k1", "v1", 0), in("k1", "v1", 1), in("k1", "v1", 2), in("k1", "v1", 0), in("k1", "v1", 3), in("k1", "v1", 0),
			in("k1", "v1", 4), in("k1", "v1", 0), in("k1", "v1", 30))},
	},
	{
		name:  "SuppressScenarioTest.shouldSupportFinalResultsForSessionWindows",
		build: suppressedWindowCounts(true, 5, 0), key: sessionKey, value: longValue,
		late: 1,
		steps: []ksStep{step(out("k1@[0,5] 3 @5", "k2@[11,11] 1 @11"),
			in("k1", "v1", 0), in("k1", "v1", 5), in("k1", "v1", 1), in("k2", "v1", 11), in("k1", "v1", 5), in("k1", "v1", 30))},
	},
	{
		name: "SuppressScenarioTest.shouldSupportFinalResultsForSlidingWindows",
		build: func(b *topology.Builder) {
			slidingWindowed(b, 5, 15, false).Count("counts").
				Suppress(topology.UntilWindowCloses(topology.Unbounded()), "suppressed").
				ToStream().To("out", topology.TimeWindowedSerde(serde.String, 5), serde.Int64)
		},
		key: windowKey(5), value: longValue,
		late: 2, // 5 and 7 find their left windows closed
		steps: []ksStep{step(out(
			"k1@[5,10] 5 @10", "k1@[6,11] 5 @11", "k1@[8,13] 5 @13", "k1@[11,16] 2 @13", "k1@[12,17] 1 @13", "k1@[19,24] 1 @24",
		), in("k1", "v1", 10), in("k1", "v1", 11), in("k1", "v1", 10), in("k1", "v1", 13), in("k1", "v1", 10), in("k1", "v1", 24),
			in("k1", "v1", 5), in("k1", "v1", 7), in("k1", "v1", 90))},
	},
	{
		name: "SuppressScenarioTest.shouldWorkBeforeGroupBy",
		build: func(b *topology.Builder) {
			held := topology.Table(b, "in", serde.String, serde.String, "in-store").
				Suppress(topology.UntilTimeLimit(10*time.Millisecond, topology.Unbounded()), "suppressed")
			topology.GroupTableBy(held, func(k, v string) (string, string) { return k, v }, "", serde.String, serde.String).
				Count("counts").ToStream().To("out", serde.String, serde.Int64)
		},
		value: longValue,
		steps: []ksStep{step(out("A 1 @0"), in("A", "a", 0), in("tick", "tick", 10))},
	},
	{
		name:  "SuppressScenarioTest.shouldWorkBeforeJoinRight",
		build: suppressedJoin(false),
		steps: []ksStep{
			step(nil, right("B", "1", 0), right("A", "1", 0)),
			step(out("A (null,1) @0", "B (null,1) @0"), right("tick", "tick", 10)),
			step(nil, right("A", "2", 11)),
			step(out("A (a,1) @12"), left("A", "a", 12)),
			step(out("B (b,1) @12"), left("B", "b", 12)),
			step(out("A (b,1) @13"), left("A", "b", 13)),
			step(out("tick (null,tick1) @21", "A (b,2) @13"), right("tick", "tick1", 21)),
		},
	},
	{
		name:  "SuppressScenarioTest.shouldWorkBeforeJoinLeft",
		build: suppressedJoin(true),
		steps: []ksStep{
			step(nil, left("B", "1", 0), left("A", "1", 0)),
			step(out("A (1,null) @0", "B (1,null) @0"), left("tick", "tick", 10)),
			step(nil, left("A", "2", 11)),
			step(out("A (1,a) @12"), right("A", "a", 12)),
			step(out("B (1,b) @12"), right("B", "b", 12)),
			step(out("A (1,b) @13"), right("A", "b", 13)),
			step(out("tick (tick1,null) @21", "A (2,b) @13"), left("tick", "tick1", 21)),
		},
	},
}

// suppressedJoin builds SuppressScenarioTest.shouldWorkBeforeJoin*: the
// tables of "left" and "right", one of them suppressed until 10 ms have
// passed, outer-joined into "out".
func suppressedJoin(suppressLeft bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		l := topology.Table(b, "left", serde.String, serde.String, "left-store")
		r := topology.Table(b, "right", serde.String, serde.String, "right-store")
		held := topology.UntilTimeLimit(10*time.Millisecond, topology.Unbounded())
		if suppressLeft {
			l = l.Suppress(held, "suppressed")
		} else {
			r = r.Suppress(held, "suppressed")
		}
		topology.OuterJoinTables(l, r, func(lv string, lok bool, rv string, rok bool) string {
			return "(" + orNull(lv, lok) + "," + orNull(rv, rok) + ")"
		}, "joined", serde.String).ToStream().To("out", serde.String, serde.String)
	}
}

func TestKafkaStreamsSuppression(t *testing.T) {
	for _, sc := range ksSuppression {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}
