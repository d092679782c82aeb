package topologytest_test

// Kafka Streams' session window and time window aggregation tests.

import (
	"testing"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// sessionAgg builds a session-windowed aggregation of "in" (gap and
// grace in ms) into "out": op is "count", "reduce" (Kafka Streams' string
// adder) or "aggregate" (its string initializer, adder and merger).
func sessionAgg(op string, gap, grace int64, final bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
		sw := topology.SessionWindowedBy(g, topology.NewSessionWindows(ms(gap)).Grace(ms(grace)))
		if final {
			sw = sw.EmitFinal()
		}
		ks := topology.SessionWindowedSerde(serde.String)
		switch op {
		case "count":
			sw.Count("agg").ToStream().To("out", ks, serde.Int64)
		case "reduce":
			sw.Reduce(func(a, v string) string { return a + "+" + v }, "agg").ToStream().To("out", ks, serde.String)
		default:
			topology.SessionAggregate(sw, toStringInit, toStringAdder, sessionMerger, "agg", serde.String).ToStream().To("out", ks, serde.String)
		}
	}
}

// sessionImplData is the input of Kafka Streams' SessionWindowedKStreamImplTest.
var sessionImplData = []ksIn{in("1", "1", 10), in("1", "2", 15), in("1", "3", 600), in("2", "1", 600), in("2", "2", 599)}

var ksSessionWindows = []ksScenario{
	{
		name:  "SessionWindowedKStreamImplTest.shouldCountSessionWindowedWithCachingDisabled(ON_WINDOW_UPDATE)",
		build: sessionAgg("count", 500, 0, false), key: sessionKey, value: longValue,
		steps: []ksStep{step(out(
			"1@[10,10] 1 @10", "1@[10,10] null @10", "1@[10,15] 2 @15", "1@[600,600] 1 @600",
			"2@[600,600] 1 @600", "2@[600,600] null @600", "2@[599,600] 2 @600",
		), sessionImplData...)},
	},
	{
		name:  "SessionWindowedKStreamImplTest.shouldCountSessionWindowedWithCachingDisabled(ON_WINDOW_CLOSE)",
		build: sessionAgg("count", 500, 0, true), key: sessionKey, value: longValue,
		steps: []ksStep{step(out("1@[10,15] 2 @15"), sessionImplData...)},
	},
	{
		name:  "SessionWindowedKStreamImplTest.shouldReduceWindowed(ON_WINDOW_UPDATE)",
		build: sessionAgg("reduce", 500, 0, false), key: sessionKey,
		steps: []ksStep{step(out(
			"1@[10,10] 1 @10", "1@[10,10] null @10", "1@[10,15] 1+2 @15", "1@[600,600] 3 @600",
			"2@[600,600] 1 @600", "2@[600,600] null @600", "2@[599,600] 1+2 @600",
		), sessionImplData...)},
	},
	{
		name:  "SessionWindowedKStreamImplTest.shouldReduceWindowed(ON_WINDOW_CLOSE)",
		build: sessionAgg("reduce", 500, 0, true), key: sessionKey,
		steps: []ksStep{step(out("1@[10,15] 1+2 @15"), sessionImplData...)},
	},
	{
		name:  "SessionWindowedKStreamImplTest.shouldAggregateSessionWindowed(ON_WINDOW_UPDATE)",
		build: sessionAgg("aggregate", 500, 0, false), key: sessionKey,
		steps: []ksStep{step(out(
			"1@[10,10] 0+1 @10", "1@[10,10] null @10", "1@[10,15] 0+0+1+2 @15", "1@[600,600] 0+3 @600",
			"2@[600,600] 0+1 @600", "2@[600,600] null @600", "2@[599,600] 0+0+1+2 @600",
		), sessionImplData...)},
	},
	{
		name:  "SessionWindowedKStreamImplTest.shouldAggregateSessionWindowed(ON_WINDOW_CLOSE)",
		build: sessionAgg("aggregate", 500, 0, true), key: sessionKey,
		steps: []ksStep{step(out("1@[10,15] 0+0+1+2 @15"), sessionImplData...)},
	},
	{
		name:  "KStreamSessionWindowAggregateProcessorTest.shouldImmediatelyForwardNewSessionWhenNonCachedStore",
		build: sessionAgg("count", 5*60*1000, 0, false), key: sessionKey, value: longValue,
		steps: []ksStep{step(out("a@[0,0] 1 @0", "b@[0,0] 1 @0", "c@[0,0] 1 @0"), in("a", "1", 0), in("b", "1", 0), in("c", "1", 0))},
	},
	{
		name:  "KStreamSessionWindowAggregateProcessorTest.shouldImmediatelyForwardRemovedSessionsWhenMerging",
		build: sessionAgg("count", 5*60*1000, 0, false), key: sessionKey, value: longValue,
		steps: []ksStep{step(out("a@[0,0] 1 @0", "a@[0,0] null @0", "a@[0,5] 2 @5"), in("a", "1", 0), in("a", "1", 5))},
	},
	{
		// As in the next scenario, the outputs are what the aggregation
		// forwards while the test checks that only Late1 is skipped.
		name:  "KStreamSessionWindowAggregateProcessorTest.shouldLogAndMeterWhenSkippingLateRecordWithZeroGrace",
		build: sessionAgg("count", 10, 0, false), key: sessionKey, value: longValue,
		late: 1,
		steps: []ksStep{
			step(out("dummy@[0,0] 1 @0"), in("dummy", "dummy", 0)),
			step(out("OnTime1@[0,0] 1 @0"), in("OnTime1", "1", 0)),
			step(out("dummy@[11,11] 1 @11"), in("dummy", "dummy", 11)),
			step(nil, in("Late1", "1", 0)),
		},
	},
	{
		// The Kafka Streams test checks which records are skipped as late
		// (only Late1: its session [0,0] expired at stream time 1); the
		// outputs are what its aggregation forwards meanwhile.
		name:  "KStreamSessionWindowAggregateProcessorTest.shouldLogAndMeterWhenSkippingLateRecordWithNonzeroGrace",
		build: sessionAgg("count", 10, 1, false), key: sessionKey, value: longValue,
		late: 1,
		steps: []ksStep{
			step(out("dummy@[0,0] 1 @0"), in("dummy", "dummy", 0)),
			step(out("OnTime1@[0,0] 1 @0"), in("OnTime1", "1", 0)),
			step(out("dummy@[11,11] 1 @11"), in("dummy", "dummy", 11)),
			step(out("OnTime2@[0,0] 1 @0"), in("OnTime2", "1", 0)),
			step(out("dummy@[11,11] null @11", "dummy@[11,12] 2 @12"), in("dummy", "dummy", 12)),
			step(nil, in("Late1", "1", 0)),
		},
	},
}

func TestKafkaStreamsSessionWindows(t *testing.T) {
	for _, sc := range ksSessionWindows {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

// timeAgg builds a time-windowed aggregation of "in" (size, advance and
// grace in ms) into "out" with Kafka Streams' string initializer and
// adder.
func timeAgg(size, advance, grace int64, final bool) func(b *topology.Builder) {
	return timeAggFrom(toStringInit, size, advance, grace, final)
}

// timeAggFrom is timeAgg starting each window's aggregate from init.
func timeAggFrom(init func() string, size, advance, grace int64, final bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
		tw := topology.WindowedBy(g, topology.HoppingWindows(ms(size), ms(advance)).Grace(ms(grace)))
		if final {
			tw = tw.EmitFinal()
		}
		topology.WindowedAggregate(tw, init, toStringAdder, "agg", serde.String).
			ToStream().To("out", topology.TimeWindowedSerde(serde.String, size), serde.String)
	}
}

func emptyInit() string { return "" }

// expiredWindowInput is the input of Kafka Streams'
// KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindow.
var expiredWindowInput = []ksIn{
	in("k", "100", 100), in("k", "0", 0), in("k", "1", 1), in("k", "2", 2), in("k", "3", 3),
	in("k", "4", 4), in("k", "5", 5), in("k", "6", 6), in("k", "105", 105), in("k", "106", 106),
}

// windowAggBasicData is the input of Kafka Streams'
// KStreamWindowAggregateTest.testAggBasic.
var windowAggBasicData = []ksIn{
	in("A", "1", 0), in("B", "2", 1), in("C", "3", 2), in("D", "4", 3), in("A", "1", 4), in("A", "1", 5),
	in("B", "2", 6), in("D", "4", 7), in("B", "2", 8), in("C", "3", 9), in("A", "1", 10), in("B", "2", 11),
	in("D", "4", 12), in("B", "2", 13), in("C", "3", 14), in("B", "1", 3), in("B", "2", 2), in("B", "3", 9),
}

// timeWindowedIntegrationInput is the input of Kafka Streams'
// TimeWindowedKStreamIntegrationTest.
var timeWindowedIntegrationInput = []ksIn{in("A", "1", 0), in("A", "2", 5), in("A", "3", 10), in("B", "4", 6), in("B", "5", 11), in("B", "6", 15), in("C", "7", 25)}

var ksTimeWindows = []ksScenario{
	{
		name:  "TimeWindowedKStreamIntegrationTest.shouldAggregateWindowedWithNoGrace(ON_WINDOW_UPDATE)",
		build: timeAgg(10, 5, 0, false), key: windowKey(10),
		late: 1, // 4 at 6 is left out of [0,10)
		steps: []ksStep{step(out(
			"A@[0,10] 0+1 @0", "A@[0,10] 0+1+2 @5", "A@[5,15] 0+2 @5", "A@[5,15] 0+2+3 @10", "A@[10,20] 0+3 @10",
			"B@[5,15] 0+4 @6", "B@[5,15] 0+4+5 @11", "B@[10,20] 0+5 @11", "B@[10,20] 0+5+6 @15", "B@[15,25] 0+6 @15",
			"C@[20,30] 0+7 @25", "C@[25,35] 0+7 @25",
		), timeWindowedIntegrationInput...)},
	},
	{
		name:  "TimeWindowedKStreamIntegrationTest.shouldAggregateWindowedWithGrace(ON_WINDOW_UPDATE)",
		build: timeAgg(10, 5, 5, false), key: windowKey(10),
		steps: []ksStep{step(out(
			"A@[0,10] 0+1 @0", "A@[0,10] 0+1+2 @5", "A@[5,15] 0+2 @5", "A@[5,15] 0+2+3 @10", "A@[10,20] 0+3 @10",
			"B@[0,10] 0+4 @6", "B@[5,15] 0+4 @6", "B@[5,15] 0+4+5 @11", "B@[10,20] 0+5 @11", "B@[10,20] 0+5+6 @15", "B@[15,25] 0+6 @15",
			"C@[20,30] 0+7 @25", "C@[25,35] 0+7 @25",
		), timeWindowedIntegrationInput...)},
	},
	{
		name:  "KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindow(ON_WINDOW_UPDATE)",
		build: timeAggFrom(emptyInit, 10, 5, 90, false), key: windowKey(10),
		late: 7, // 0 to 4 entirely, 5 and 6 from [0,10)
		steps: []ksStep{step(out(
			"k@[95,105] +100 @100", "k@[100,110] +100 @100",
			"k@[5,15] +5 @5", "k@[5,15] +5+6 @6",
			"k@[100,110] +100+105 @105", "k@[105,115] +105 @105",
			"k@[100,110] +100+105+106 @106", "k@[105,115] +105+106 @106",
		), expiredWindowInput...)},
	},
	{
		name:  "KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindow(ON_WINDOW_CLOSE)",
		build: timeAggFrom(emptyInit, 10, 5, 90, true), key: windowKey(10),
		late:  7,
		steps: []ksStep{step(out("k@[5,15] +5+6 @6"), expiredWindowInput...)},
	},
	{
		name:  "KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindowByGrace(ON_WINDOW_UPDATE)",
		build: timeAggFrom(emptyInit, 10, 10, 90, false), key: windowKey(10),
		late: 7,
		steps: []ksStep{step(out("k@[200,210] +100 @200"),
			in("k", "100", 200), in("k", "0", 100), in("k", "1", 101), in("k", "2", 102), in("k", "3", 103),
			in("k", "4", 104), in("k", "5", 105), in("k", "6", 6))},
	},
	{
		name:  "KStreamWindowAggregateTest.testAggBasic(ON_WINDOW_UPDATE)",
		build: timeAgg(10, 5, 100, false), key: windowKey(10),
		steps: []ksStep{step(out(
			"A@[0,10] 0+1 @0", "B@[0,10] 0+2 @1", "C@[0,10] 0+3 @2", "D@[0,10] 0+4 @3",
			"A@[0,10] 0+1+1 @4", "A@[0,10] 0+1+1+1 @5", "A@[5,15] 0+1 @5",
			"B@[0,10] 0+2+2 @6", "B@[5,15] 0+2 @6", "D@[0,10] 0+4+4 @7", "D@[5,15] 0+4 @7",
			"B@[0,10] 0+2+2+2 @8", "B@[5,15] 0+2+2 @8", "C@[0,10] 0+3+3 @9", "C@[5,15] 0+3 @9",
			"A@[5,15] 0+1+1 @10", "A@[10,20] 0+1 @10", "B@[5,15] 0+2+2+2 @11", "B@[10,20] 0+2 @11",
			"D@[5,15] 0+4+4 @12", "D@[10,20] 0+4 @12", "B@[5,15] 0+2+2+2+2 @13", "B@[10,20] 0+2+2 @13",
			"C@[5,15] 0+3+3 @14", "C@[10,20] 0+3 @14",
			"B@[0,10] 0+2+2+2+1 @8", "B@[0,10] 0+2+2+2+1+2 @8", "B@[0,10] 0+2+2+2+1+2+3 @9", "B@[5,15] 0+2+2+2+2+3 @13",
		), windowAggBasicData...)},
	},
	{
		name:  "KStreamWindowAggregateTest.testAggBasic(ON_WINDOW_CLOSE)",
		build: timeAgg(10, 5, 100, true), key: windowKey(10),
		steps: []ksStep{step(nil, windowAggBasicData...)},
	},
}

func TestKafkaStreamsTimeWindows(t *testing.T) {
	for _, sc := range ksTimeWindows {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}
