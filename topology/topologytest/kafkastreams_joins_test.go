package topologytest_test

// Kafka Streams' stream-stream join tests, and its joins of null keys.

import (
	"testing"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// outerJoin builds left.outerJoin(right, joiner, w) into "out", the
// joiner printing "<left>+<right>".
func outerJoin(w topology.JoinWindows) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		l := topology.Stream(b, "left", serde.String, serde.String)
		r := topology.Stream(b, "right", serde.String, serde.String)
		topology.OuterJoinStreams(l, r, func(lv string, lok bool, rv string, rok bool) string { return orNull(lv, lok) + "+" + orNull(rv, rok) },
			w, "join", serde.String, serde.String, serde.String).To("out", serde.String, serde.String)
	}
}

// leftJoin builds left.leftJoin(right, joiner, w) into "out".
func leftJoin(w topology.JoinWindows) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		l := topology.Stream(b, "left", serde.String, serde.String)
		r := topology.Stream(b, "right", serde.String, serde.String)
		topology.LeftJoinStreams(l, r, func(lv, rv string, rok bool) string { return lv + "+" + orNull(rv, rok) },
			w, "join", serde.String, serde.String, serde.String).To("out", serde.String, serde.String)
	}
}

// innerJoin builds left.join(right, joiner, w) into "out".
func innerJoin(w topology.JoinWindows) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		l := topology.Stream(b, "left", serde.String, serde.String)
		r := topology.Stream(b, "right", serde.String, serde.String)
		topology.JoinStreams(l, r, func(lv, rv string) string { return lv + "+" + rv },
			w, "join", serde.String, serde.String, serde.String).To("out", serde.String, serde.String)
	}
}

// joinWindows is JoinWindows.ofTimeDifferenceAndGrace(d, grace) in ms.
func joinWindows(d, grace int64) topology.JoinWindows {
	return topology.JoinTimeDifference(time.Duration(d) * time.Millisecond).Grace(time.Duration(grace) * time.Millisecond)
}

var ksStreamStreamJoins = []ksScenario{
	{
		name:  "KStreamKStreamOuterJoinTest.testOuterJoinDuplicates",
		build: outerJoin(joinWindows(100, 10)),
		steps: []ksStep{
			step(out(
				"1 null+11 @0",
				"1 null+12 @0",
				"0 A0+null @0",
				"0 A0-0+null @0",
			), left("0", "A0", 0), left("0", "A0-0", 0), right("1", "11", 0), right("1", "12", 0), right("1", "10", 111), right("3", "100", 211)),
			step(out(
				"2 A2+13 @201",
				"2 A2-0+13 @201",
				"2 A2+14 @201",
				"2 A2-0+14 @201",
			), left("2", "A2", 200), left("2", "A2-0", 200), right("2", "13", 201), right("2", "14", 201)),
			step(out(
				"1 null+10 @111",
				"3 null+100 @211",
			), right("3", "100", 1500)),
		},
	},
	{
		name:  "KStreamKStreamOuterJoinTest.testLeftExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor",
		build: outerJoin(joinWindows(100, 0)),
		steps: []ksStep{
			step(nil, left("0", "A0", 1), left("1", "A1", 2), left("0", "A0-0", 3)),
			step(out("1 A1+11 @3"), right("1", "11", 3)),
			step(out("0 A0+null @1", "0 A0-0+null @3"), left("2", "dummy", 401)),
			step(out("2 dummy+100 @401"), right("2", "100", 401)),
		},
	},
	{
		name:  "KStreamKStreamOuterJoinTest.testLeftExpiredNonJoinedRecordsAreEmittedByTheRightProcessor",
		build: outerJoin(joinWindows(100, 0)),
		steps: []ksStep{
			step(nil, left("0", "A0", 1), left("1", "A1", 2), left("0", "A0-0", 3)),
			step(out("1 A1+11 @3"), right("1", "11", 3)),
			step(out("0 A0+null @1", "0 A0-0+null @3"), right("2", "100", 401)),
			step(out("2 dummy+100 @402"), left("2", "dummy", 402)),
		},
	},
	{
		name:  "KStreamKStreamOuterJoinTest.testRightExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor",
		build: outerJoin(joinWindows(100, 0)),
		steps: []ksStep{
			step(nil, right("0", "10", 1), right("1", "11", 2), right("0", "12", 3)),
			step(out("1 A1+11 @3"), left("1", "A1", 3)),
			step(out("0 null+10 @1", "0 null+12 @3"), left("2", "dummy", 401)),
			step(out("2 dummy+100 @402"), right("2", "100", 402)),
		},
	},
	{
		name:  "KStreamKStreamOuterJoinTest.testRightExpiredNonJoinedRecordsAreEmittedByTheRightProcessor",
		build: outerJoin(joinWindows(100, 0)),
		steps: []ksStep{
			step(nil, right("0", "10", 1), right("1", "11", 2), right("0", "12", 3)),
			step(out("1 A1+11 @3"), left("1", "A1", 3)),
			step(out("0 null+10 @1", "0 null+12 @3"), right("2", "100", 401)),
			step(out("2 dummy+100 @402"), left("2", "dummy", 402)),
		},
	},
	{
		name:  "KStreamKStreamOuterJoinTest.testOrdering",
		build: outerJoin(joinWindows(100, 0)),
		steps: []ksStep{
			step(nil, left("0", "A0", 0), left("1", "A1", 100)),
			step(out("0 A0+null @0", "1 A1+11 @110"), right("1", "11", 110)),
		},
	},
	{
		name:  "KStreamKStreamOuterJoinTest.testGracePeriod",
		build: outerJoin(joinWindows(100, 10)),
		steps: []ksStep{
			step(nil, left("0", "A0", 0), right("1", "11", 0)),
			step(nil, left("1", "A1", 101), right("0", "10", 101)),
			step(out("1 null+11 @0", "0 A0+null @0"), right("0", "100", 112)),
		},
	},
	{
		name:  "KStreamKStreamOuterJoinTest.testEmitAllNonJoinedResultsForAsymmetricWindow",
		build: outerJoin(joinWindows(5, 0).After(ms(20))),
		steps: []ksStep{
			step(nil, left("0", "A0", 29)),
			step(nil, left("1", "A1", 30)),
			step(nil, right("2", "12", 31)),
			step(nil, right("3", "13", 36)),
			step(out("2 null+12 @31"), right("4", "14", 37)),
			step(out("0 A0+null @29", "3 null+13 @36", "4 null+14 @37"), right("5", "15", 50)),
		},
	},
}

// each is one input per key of keys on topic at ts, valued prefix+key,
// as Kafka Streams' tests loop over their expected keys.
func each(topic, prefix string, ts int64, keys ...string) []ksIn {
	var ins []ksIn
	for _, k := range keys {
		ins = append(ins, ksIn{topic, k, prefix + k, ts})
	}
	return ins
}

// staggered is one input per key of keys on topic, valued prefix+key,
// the i-th at ts+i.
func staggered(topic, prefix string, ts int64, keys ...string) []ksIn {
	var ins []ksIn
	for i, k := range keys {
		ins = append(ins, ksIn{topic, k, prefix + k, ts + int64(i)})
	}
	return ins
}

var (
	keys0to3 = []string{"0", "1", "2", "3"}
	keys0to1 = []string{"0", "1"}
)

// joinTestSteps are the steps of Kafka Streams' KStreamKStreamJoinTest
// testJoin and testOuterJoin, every record at time 0.
var joinTestSteps = []ksStep{
	step(nil, each("left", "A", 0, keys0to1...)...),
	step(out("0 A0+a0 @0", "1 A1+a1 @0"), each("right", "a", 0, keys0to1...)...),
	step(out("0 B0+a0 @0", "1 B1+a1 @0"), each("left", "B", 0, keys0to3...)...),
	step(out("0 A0+b0 @0", "0 B0+b0 @0", "1 A1+b1 @0", "1 B1+b1 @0", "2 B2+b2 @0", "3 B3+b3 @0"), each("right", "b", 0, keys0to3...)...),
	step(out("0 C0+a0 @0", "0 C0+b0 @0", "1 C1+a1 @0", "1 C1+b1 @0", "2 C2+b2 @0", "3 C3+b3 @0"), each("left", "C", 0, keys0to3...)...),
	step(out("0 A0+c0 @0", "0 B0+c0 @0", "0 C0+c0 @0", "1 A1+c1 @0", "1 B1+c1 @0", "1 C1+c1 @0"), each("right", "c", 0, keys0to1...)...),
}

func init() {
	ksStreamStreamJoins = append(ksStreamStreamJoins,
		ksScenario{
			name:  "KStreamKStreamLeftJoinTest.testLeftJoinDuplicates",
			build: leftJoin(joinWindows(100, 10)),
			steps: []ksStep{
				step(out("0 A0+null @0", "0 A0-0+null @0"), left("0", "A0", 0), left("0", "A0-0", 0), right("1", "a0", 111), right("2", "dummy", 500)),
				step(out("2 A2+a2 @1001", "2 A2-0+a2 @1001"), left("2", "A2", 1000), left("2", "A2-0", 1000), right("2", "a2", 1001)),
				step(nil, right("3", "a3", 315)),
			},
		},
		ksScenario{
			name:  "KStreamKStreamLeftJoinTest.testLeftJoinedRecordsWithZeroAfterAreEmitted",
			build: leftJoin(joinWindows(100, 0).After(0)),
			steps: []ksStep{
				step(out("0 A0+null @1000", "1 A1+null @1001", "2 A2+null @1002"), staggered("left", "A", 1000, keys0to3...)...),
				step(out("0 A0+a0 @1000", "1 A1+a1 @1001", "2 A2+a2 @1002", "3 A3+a3 @1003"), each("right", "a", 999, keys0to3...)...),
				step(out("0 A0+b0 @1000", "1 A1+b1 @1001", "2 A2+b2 @1002", "3 A3+b3 @1003"), each("right", "b", 1000, keys0to3...)...),
				step(out("1 A1+c1 @1001", "2 A2+c2 @1002", "3 A3+c3 @1003"), each("right", "c", 1001, keys0to3...)...),
				step(out("2 A2+d2 @1002", "3 A3+d3 @1003"), each("right", "d", 1002, keys0to3...)...),
				step(out("3 A3+e3 @1003"), each("right", "e", 1003, keys0to3...)...),
				step(nil, each("right", "f", 1100, keys0to3...)...),
			},
		},
		ksScenario{
			name:  "KStreamKStreamOuterJoinTest.testWindowing",
			build: outerJoin(joinWindows(100, 0)),
			steps: []ksStep{
				step(nil, each("left", "A", 0, keys0to1...)...),
				step(out("0 A0+10 @0", "1 A1+11 @0"), right("0", "10", 0), right("1", "11", 0), right("2", "12", 0), right("3", "13", 0)),
			},
		},
		ksScenario{
			name:  "KStreamKStreamOuterJoinTest.testShouldNotEmitLeftJoinResultForAsymmetricBeforeWindow",
			build: outerJoin(joinWindows(100, 0).Before(0)),
			steps: []ksStep{
				step(nil, staggered("left", "A", 0, keys0to1...)...),
				step(out("0 A0+10 @100"), right("0", "10", 100)),
				step(out("1 A1+null @1"), right("1", "11", 102)),
				step(out("1 null+11 @102"), right("2", "12", 103)),
				step(out("2 A2+12 @103"), left("2", "A2", 103)),
			},
		},
		ksScenario{
			name:  "KStreamKStreamOuterJoinTest.testShouldNotEmitLeftJoinResultForAsymmetricAfterWindow",
			build: outerJoin(joinWindows(100, 0).After(0)),
			steps: []ksStep{
				step(out("0 A0+null @0"), staggered("left", "A", 0, keys0to1...)...),
				step(out("1 A1+11 @1"), right("1", "11", 1)),
				step(nil, right("2", "12", 101)),
				step(nil, right("3", "13", 101)),
				step(out("2 A2+12 @201"), left("2", "A2", 201)),
			},
		},
		ksScenario{
			name:  "KStreamKStreamLeftJoinTest.testOrdering",
			build: leftJoin(joinWindows(100, 0)),
			steps: []ksStep{
				step(nil, left("0", "A0", 0), left("1", "A1", 100)),
				step(out("0 A0+null @0", "1 A1+a1 @110"), right("1", "a1", 110)),
			},
		},
		ksScenario{
			name:  "KStreamKStreamLeftJoinTest.testGracePeriod",
			build: leftJoin(joinWindows(100, 10)),
			steps: []ksStep{
				step(nil, each("left", "A", 0, keys0to1...)...),
				step(nil, each("right", "a", 101, keys0to3...)...),
				step(out("0 A0+null @0", "1 A1+null @0"), right("0", "dummy", 1201)),
			},
		},
		ksScenario{
			name:  "KStreamKStreamLeftJoinTest.testWindowing",
			build: leftJoin(joinWindows(100, 0)),
			steps: []ksStep{
				step(nil, each("left", "A", 0, keys0to1...)...),
				step(out("0 A0+a0 @0", "1 A1+a1 @0"), each("right", "a", 0, keys0to3...)...),
				// testUpperWindowBound
				step(nil, staggered("right", "b", 1000, keys0to3...)...),
				step(out("0 B0+b0 @1100", "1 B1+b1 @1100", "2 B2+b2 @1100", "3 B3+b3 @1100"), each("left", "B", 1100, keys0to3...)...),
				step(out("1 C1+b1 @1101", "2 C2+b2 @1101", "3 C3+b3 @1101"), each("left", "C", 1101, keys0to3...)...),
				step(out("2 D2+b2 @1102", "3 D3+b3 @1102"), each("left", "D", 1102, keys0to3...)...),
				step(out("3 E3+b3 @1103"), each("left", "E", 1103, keys0to3...)...),
				step(nil, each("left", "F", 1104, keys0to3...)...),
				step(out(
					"0 C0+null @1101",
					"0 D0+null @1102", "1 D1+null @1102",
					"0 E0+null @1103", "1 E1+null @1103", "2 E2+null @1103",
					"0 F0+null @1104", "1 F1+null @1104", "2 F2+null @1104", "3 F3+null @1104",
				), left("0", "dummy", 1405)),
				// testLowerWindowBound
				step(out("0 G0+null @899", "1 G1+null @899", "2 G2+null @899", "3 G3+null @899"), each("left", "G", 899, keys0to3...)...),
				step(out("0 H0+b0 @1000", "1 H1+null @900", "2 H2+null @900", "3 H3+null @900"), each("left", "H", 900, keys0to3...)...),
				step(out("0 I0+b0 @1000", "1 I1+b1 @1001", "2 I2+null @901", "3 I3+null @901"), each("left", "I", 901, keys0to3...)...),
				step(out("0 J0+b0 @1000", "1 J1+b1 @1001", "2 J2+b2 @1002", "3 J3+null @902"), each("left", "J", 902, keys0to3...)...),
				step(out("0 K0+b0 @1000", "1 K1+b1 @1001", "2 K2+b2 @1002", "3 K3+b3 @1003"), each("left", "K", 903, keys0to3...)...),
				step(out("0 dummy+null @1203"), left("0", "dummy", 1203)),
			},
		},
		ksScenario{
			name:  "KStreamKStreamLeftJoinTest.shouldNotEmitLeftJoinResultForAsymmetricWindow",
			build: leftJoin(joinWindows(100, 0).Before(0)),
			steps: []ksStep{
				step(nil, staggered("left", "A", 0, keys0to1...)...),
				step(out("0 A0+a0 @100"), right("0", "a0", 100)),
				step(out("1 A1+null @1"), right("1", "a1", 102)),
			},
		},
		ksScenario{
			name:  "KStreamKStreamJoinTest.testJoin",
			build: innerJoin(joinWindows(100, 0)),
			steps: joinTestSteps,
		},
		ksScenario{
			name:  "KStreamKStreamJoinTest.testOuterJoin",
			build: outerJoin(joinWindows(100, 24*3600*1000)),
			steps: joinTestSteps,
		},
		ksScenario{
			name:  "KStreamKStreamJoinTest.testWindowing",
			build: innerJoin(joinWindows(100, 0)),
			steps: []ksStep{
				step(nil, each("left", "A", 0, keys0to1...)...),
				step(out("0 A0+a0 @0", "1 A1+a1 @0"), each("right", "a", 0, keys0to1...)...),
				step(nil, staggered("left", "B", 1000, keys0to3...)...),
				step(out("0 B0+b0 @1100", "1 B1+b1 @1100", "2 B2+b2 @1100", "3 B3+b3 @1100"), each("right", "b", 1100, keys0to3...)...),
				step(out("1 B1+c1 @1101", "2 B2+c2 @1101", "3 B3+c3 @1101"), each("right", "c", 1101, keys0to3...)...),
				step(out("2 B2+d2 @1102", "3 B3+d3 @1102"), each("right", "d", 1102, keys0to3...)...),
				step(out("3 B3+e3 @1103"), each("right", "e", 1103, keys0to3...)...),
				step(nil, each("right", "f", 1104, keys0to3...)...),
				step(nil, each("right", "g", 899, keys0to3...)...),
				step(out("0 B0+h0 @1000"), each("right", "h", 900, keys0to3...)...),
				step(out("0 B0+i0 @1000", "1 B1+i1 @1001"), each("right", "i", 901, keys0to3...)...),
				step(out("0 B0+j0 @1000", "1 B1+j1 @1001", "2 B2+j2 @1002"), each("right", "j", 902, keys0to3...)...),
				step(out("0 B0+k0 @1000", "1 B1+k1 @1001", "2 B2+k2 @1002", "3 B3+k3 @1003"), each("right", "k", 903, keys0to3...)...),
				step(nil, staggered("right", "l", 2000, keys0to3...)...),
				step(out("0 C0+l0 @2100", "1 C1+l1 @2100", "2 C2+l2 @2100", "3 C3+l3 @2100"), each("left", "C", 2100, keys0to3...)...),
				step(out("1 D1+l1 @2101", "2 D2+l2 @2101", "3 D3+l3 @2101"), each("left", "D", 2101, keys0to3...)...),
				step(out("2 E2+l2 @2102", "3 E3+l3 @2102"), each("left", "E", 2102, keys0to3...)...),
				step(out("3 F3+l3 @2103"), each("left", "F", 2103, keys0to3...)...),
				step(nil, each("left", "G", 2104, keys0to3...)...),
				step(nil, each("left", "H", 1899, keys0to3...)...),
				step(out("0 I0+l0 @2000"), each("left", "I", 1900, keys0to3...)...),
				step(out("0 J0+l0 @2000", "1 J1+l1 @2001"), each("left", "J", 1901, keys0to3...)...),
				step(out("0 K0+l0 @2000", "1 K1+l1 @2001", "2 K2+l2 @2002"), each("left", "K", 1902, keys0to3...)...),
				step(out("0 L0+l0 @2000", "1 L1+l1 @2001", "2 L2+l2 @2002", "3 L3+l3 @2003"), each("left", "L", 1903, keys0to3...)...),
			},
		},
		ksScenario{
			name:  "KStreamKStreamJoinTest.testAsymmetricWindowingAfter",
			build: innerJoin(joinWindows(0, 0).After(ms(100))),
			steps: []ksStep{
				step(nil, staggered("left", "A", 1000, keys0to3...)...),
				step(nil, each("right", "a", 999, keys0to3...)...),
				step(out("0 A0+b0 @1000"), each("right", "b", 1000, keys0to3...)...),
				step(out("0 A0+c0 @1001", "1 A1+c1 @1001"), each("right", "c", 1001, keys0to3...)...),
				step(out("0 A0+d0 @1002", "1 A1+d1 @1002", "2 A2+d2 @1002"), each("right", "d", 1002, keys0to3...)...),
				step(out("0 A0+e0 @1003", "1 A1+e1 @1003", "2 A2+e2 @1003", "3 A3+e3 @1003"), each("right", "e", 1003, keys0to3...)...),
				step(out("0 A0+f0 @1100", "1 A1+f1 @1100", "2 A2+f2 @1100", "3 A3+f3 @1100"), each("right", "f", 1100, keys0to3...)...),
				step(out("1 A1+g1 @1101", "2 A2+g2 @1101", "3 A3+g3 @1101"), each("right", "g", 1101, keys0to3...)...),
				step(out("2 A2+h2 @1102", "3 A3+h3 @1102"), each("right", "h", 1102, keys0to3...)...),
				step(out("3 A3+i3 @1103"), each("right", "i", 1103, keys0to3...)...),
				step(nil, each("right", "j", 1104, keys0to3...)...),
			},
		},
		ksScenario{
			name:  "KStreamKStreamJoinTest.testAsymmetricWindowingBefore",
			build: innerJoin(joinWindows(0, 0).Before(ms(100))),
			steps: []ksStep{
				step(nil, staggered("left", "A", 1000, keys0to3...)...),
				step(nil, each("right", "a", 899, keys0to3...)...),
				step(out("0 A0+b0 @1000"), each("right", "b", 900, keys0to3...)...),
				step(out("0 A0+c0 @1000", "1 A1+c1 @1001"), each("right", "c", 901, keys0to3...)...),
				step(out("0 A0+d0 @1000", "1 A1+d1 @1001", "2 A2+d2 @1002"), each("right", "d", 902, keys0to3...)...),
				step(out("0 A0+e0 @1000", "1 A1+e1 @1001", "2 A2+e2 @1002", "3 A3+e3 @1003"), each("right", "e", 903, keys0to3...)...),
				step(out("0 A0+f0 @1000", "1 A1+f1 @1001", "2 A2+f2 @1002", "3 A3+f3 @1003"), each("right", "f", 1000, keys0to3...)...),
				step(out("1 A1+g1 @1001", "2 A2+g2 @1002", "3 A3+g3 @1003"), each("right", "g", 1001, keys0to3...)...),
				step(out("2 A2+h2 @1002", "3 A3+h3 @1003"), each("right", "h", 1002, keys0to3...)...),
				step(out("3 A3+i3 @1003"), each("right", "i", 1003, keys0to3...)...),
				step(nil, each("right", "j", 1004, keys0to3...)...),
			},
		},
	)
}

func TestKafkaStreamsStreamStreamJoins(t *testing.T) {
	for _, sc := range ksStreamStreamJoins {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

// relaxedJoin builds Kafka Streams' RelaxedNullKeyRequirementJoinTest
// topologies: "left" and "right", each through a repartition topic first,
// into "out" by op ("left", "outer", "table" for a left join with the
// table of "right", or "none" for a second repartition and no join).
func relaxedJoin(op string) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		w := joinWindows(60_000, 10_000)
		joiner := func(lv string, lok bool, rv string, rok bool) string { return orNull(lv, lok) + "|" + orNull(rv, rok) }
		l := topology.Stream(b, "left", serde.String, serde.String).Repartition(serde.String, serde.String, topology.Named("left"))
		var out topology.KStream[string, string]
		switch op {
		case "left":
			r := topology.Stream(b, "right", serde.String, serde.String).Repartition(serde.String, serde.String, topology.Named("right"))
			out = topology.LeftJoinStreams(l, r, func(lv, rv string, ok bool) string { return joiner(lv, true, rv, ok) }, w, "join", serde.String, serde.String, serde.String)
		case "outer":
			r := topology.Stream(b, "right", serde.String, serde.String).Repartition(serde.String, serde.String, topology.Named("right"))
			out = topology.OuterJoinStreams(l, r, joiner, w, "join", serde.String, serde.String, serde.String)
		case "table":
			t := topology.Table(b, "right", serde.String, serde.String, "right-table")
			out = topology.LeftJoin(l, t, func(lv, tv string, ok bool) string { return joiner(lv, true, tv, ok) })
		default:
			out = l.Repartition(serde.String, serde.String, topology.Named("again"))
		}
		out.To("out", serde.String, serde.String)
	}
}

// The Kafka Streams tests leave some inputs' timestamps to the driver's
// clock and compare keys and values only; those inputs are piped at 1 here.
var ksNullKeyJoins = []ksScenario{
	{
		name:  "RelaxedNullKeyRequirementJoinTest.testRelaxedLeftStreamStreamJoin",
		build: relaxedJoin("left"),
		steps: []ksStep{step(out("null leftValue|null @1"), left(ksNull, "leftValue", 1))},
	},
	{
		name:  "RelaxedNullKeyRequirementJoinTest.testRelaxedLeftStreamTableJoin",
		build: relaxedJoin("table"),
		steps: []ksStep{step(out("null leftValue|null @1"), left(ksNull, "leftValue", 1))},
	},
	{
		name:  "RelaxedNullKeyRequirementJoinTest.testRelaxedOuterStreamStreamJoin",
		build: relaxedJoin("outer"),
		steps: []ksStep{step(out("null null|rightValue @1", "null leftValue|null @1"), right(ksNull, "rightValue", 1), left(ksNull, "leftValue", 1))},
	},
	{
		name:  "RelaxedNullKeyRequirementJoinTest.testDropNullKeyRecordsForRepartitionNodesWithNoRelaxedJoinDownstream",
		build: relaxedJoin("none"),
		steps: []ksStep{step(nil, left(ksNull, "leftValue", 1))},
	},
}

func TestKafkaStreamsNullKeyJoins(t *testing.T) {
	for _, sc := range ksNullKeyJoins {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}
