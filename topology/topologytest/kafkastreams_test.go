package topologytest_test

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

// The scenarios of this file replay Kafka Streams 3.9's own tests through
// the driver: each names the Kafka Streams test it comes from and holds
// that test's inputs, with their timestamps, and the outputs the test
// expects after each step, as data. Eddy's topology is the one the Kafka
// Streams test builds, written with Eddy's DSL. Keys and values are
// strings; Kafka Streams' Integer and Long inputs are written in decimal.
//
// An expected output is "<key> <value> @<timestamp>": a windowed key is
// "<key>@[<start>,<end>]" (a time window's end excluded, a session's
// included, as in Kafka Streams), and a null key or value is "null", as
// Kafka Streams' test joiners and aggregators print them.

// ksNull is the key or value of an input that is null.
const ksNull = "<null>"

// ksIn is one input record.
type ksIn struct {
	topic, key, value string
	ts                int64
}

// ksStep pipes its inputs, then expects exactly want on "out".
type ksStep struct {
	in   []ksIn
	want []string
}

// ksScenario is one Kafka Streams test's data.
type ksScenario struct {
	name  string // the Kafka Streams test class and method
	build func(b *topology.Builder)
	// key renders the key bytes of "out" (default: a string).
	key func([]byte) string
	// value renders the value bytes of "out" (default: a string).
	value func([]byte) string
	// unordered compares each step's outputs as sets, as Kafka Streams'
	// tests that gather outputs into sets do.
	unordered bool
	// lastPerKey compares only the last output of each key want names,
	// a null value forgetting its key, as Kafka Streams' tests that read
	// a MockProcessor's lastValueAndTimestampPerKey do.
	lastPerKey bool
	// byKey compares each step's latest output of each key, without
	// timestamps ("key value", by key), as Kafka Streams' tests that read
	// the output into a map do.
	byKey bool
	// late is how many records the topology drops as late, in all.
	late int64
	// commits runs the driver with Config.Commits, as Kafka Streams'
	// tests with caching on, and commits after each step's inputs.
	commits bool
	// differs, when set, says why Eddy's result differs from Kafka
	// Streams': the scenario is skipped until Eddy matches it.
	differs string
	steps   []ksStep
}

func runKS(t *testing.T, sc ksScenario) {
	if sc.differs != "" {
		t.Skip("Eddy differs: " + sc.differs)
	}
	b := topology.NewBuilder()
	sc.build(b)
	topo, err := b.Build()
	require.NoError(t, err)
	d, err := topologytest.New(topo, topologytest.Config{Commits: sc.commits})
	require.NoError(t, err)
	defer d.Close()
	key, value := sc.key, sc.value
	if key == nil {
		key = func(b []byte) string { return string(b) }
	}
	if value == nil {
		value = func(b []byte) string { return string(b) }
	}
	for i, step := range sc.steps {
		for _, in := range step.in {
			var kb, vb []byte
			if in.key != ksNull {
				kb = []byte(in.key)
			}
			if in.value != ksNull {
				vb = []byte(in.value)
			}
			require.NoError(t, d.Pipe(in.topic, kb, vb, time.UnixMilli(in.ts)), "step %d", i)
		}
		if sc.commits {
			require.NoError(t, d.Commit(), "step %d", i)
		}
		got := []string{}
		for _, r := range d.ReadOutput("out") {
			k, v := "null", "null"
			if r.Key != nil {
				k = key(r.Key)
			}
			if r.Value != nil {
				v = value(r.Value)
			}
			if sc.byKey {
				got = append(got, k+" "+v)
				continue
			}
			got = append(got, fmt.Sprintf("%s %s @%d", k, v, r.Timestamp.UnixMilli()))
		}
		if sc.byKey {
			got = latestByKey(got)
		}
		want := step.want
		if want == nil {
			want = []string{}
		}
		if sc.lastPerKey {
			last := map[string]string{}
			for _, g := range got {
				k, rest, _ := strings.Cut(g, " ")
				if strings.HasPrefix(rest, "null @") {
					delete(last, k)
				} else {
					last[k] = rest
				}
			}
			for _, w := range want {
				k, rest, _ := strings.Cut(w, " ")
				require.Equal(t, rest, last[k], "step %d: the last output of %s", i, k)
			}
			continue
		}
		if sc.unordered {
			want, got = distinct(want), distinct(got)
		}
		require.Equal(t, want, got, "step %d", i)
	}
	require.Equal(t, sc.late, d.DroppedLate(), "records dropped as late")
}

// latestByKey keeps the last of the "key value" outputs of each key, in
// key order.
func latestByKey(outs []string) []string {
	last := map[string]string{}
	for _, o := range outs {
		k, _, _ := strings.Cut(o, " ")
		last[k] = o
	}
	res := []string{}
	for _, k := range slices.Sorted(maps.Keys(last)) {
		res = append(res, last[k])
	}
	return res
}

// distinct is ss sorted, without repeats.
func distinct(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}

// in, left and right are inputs of the topics "in", "left" and "right".
func in(key, value string, ts int64) ksIn    { return ksIn{"in", key, value, ts} }
func left(key, value string, ts int64) ksIn  { return ksIn{"left", key, value, ts} }
func right(key, value string, ts int64) ksIn { return ksIn{"right", key, value, ts} }

// step is a ksStep.
func step(want []string, ins ...ksIn) ksStep { return ksStep{in: ins, want: want} }

// out lists expected outputs.
func out(recs ...string) []string { return recs }

// orNull prints a joined side as Kafka Streams' test joiner does.
func orNull(v string, ok bool) string {
	if !ok {
		return "null"
	}
	return v
}

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

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// windowKey renders a time-windowed key of window size size.
func windowKey(size int64) func([]byte) string {
	ks := topology.TimeWindowedSerde(serde.String, size)
	return func(b []byte) string {
		w, err := ks.Decode(b)
		if err != nil {
			return "undecodable:" + err.Error()
		}
		return fmt.Sprintf("%s@[%d,%d]", w.Key, w.Window.Start, w.Window.End)
	}
}

// sessionKey renders a session-windowed key.
func sessionKey(b []byte) string {
	w, err := topology.SessionWindowedSerde(serde.String).Decode(b)
	if err != nil {
		return "undecodable:" + err.Error()
	}
	return fmt.Sprintf("%s@[%d,%d]", w.Key, w.Window.Start, w.Window.End)
}

// longValue renders a value serde.Int64 encoded.
func longValue(b []byte) string {
	if len(b) != 8 {
		return "undecodable:" + strings.Repeat("?", len(b))
	}
	return fmt.Sprint(int64(binary.BigEndian.Uint64(b)))
}

// toStringAdder is Kafka Streams' test aggregator: the aggregate, "+",
// the value, starting from "0".
func toStringAdder(_ string, v, agg string) string { return agg + "+" + v }

func toStringInit() string { return "0" }

// sessionMerger is Kafka Streams' test session merger: the two
// aggregates joined by "+".
func sessionMerger(_ string, a, b string) string { return a + "+" + b }

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

// slidingAgg builds a sliding-window aggregation of "in" (time
// difference and grace in ms) into "out" with Kafka Streams' string
// initializer and adder.
func slidingAgg(diff, grace int64, final bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		sw := slidingWindowed(b, diff, grace, final)
		topology.SlidingAggregate(sw, toStringInit, toStringAdder, "agg", serde.String).
			ToStream().To("out", topology.TimeWindowedSerde(serde.String, diff), serde.String)
	}
}

// slidingReduce is slidingAgg reducing with Kafka Streams' string adder.
func slidingReduce(diff, grace int64, final bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		slidingWindowed(b, diff, grace, final).Reduce(func(a, v string) string { return a + "+" + v }, "agg").
			ToStream().To("out", topology.TimeWindowedSerde(serde.String, diff), serde.String)
	}
}

func slidingWindowed(b *topology.Builder, diff, grace int64, final bool) topology.SlidingWindowedKStream[string, string] {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	sw := topology.SlidingWindowedBy(g, topology.NewSlidingWindows(ms(diff)).Grace(ms(grace)))
	if final {
		sw = sw.EmitFinal()
	}
	return sw
}

var (
	slidingAggregateSmallInput = []ksIn{in("A", "1", 10), in("A", "2", 10), in("A", "3", 14), in("A", "4", 15), in("A", "5", 20), in("A", "6", 22), in("A", "7", 30)}
	slidingReduceSmallInput    = []ksIn{in("A", "1", 10), in("A", "2", 14), in("A", "3", 15), in("A", "4", 22), in("A", "5", 26), in("A", "6", 30)}
)

var (
	slidingNoGraceInput = []ksIn{in("A", "1", 0), in("A", "2", 5), in("A", "3", 10), in("A", "4", 17), in("B", "5", 6), in("B", "6", 11), in("B", "7", 18), in("C", "8", 25)}
	slidingGraceInput   = []ksIn{in("A", "1", 0), in("A", "2", 5), in("A", "3", 10), in("A", "4", 6), in("A", "5", 11), in("A", "6", 16), in("A", "7", 27), in("A", "8", 11)}
)

var (
	slidingEarlyInput    = []ksIn{in("A", "1", 0), in("A", "2", 5), in("A", "3", 6), in("A", "4", 3), in("A", "5", 13), in("A", "6", 10), in("A", "7", 70)}
	slidingRepeatedInput = []ksIn{in("A", "1", 0), in("A", "2", 2), in("A", "3", 4), in("A", "4", 0), in("A", "5", 2), in("A", "6", 2), in("A", "7", 0), in("A", "8", 7)}
)

var ksSlidingEarlyWindows = []ksScenario{
	{
		name:  "KStreamSlidingWindowAggregateTest.testEarlyRecordsSmallInput(ON_WINDOW_UPDATE)",
		build: slidingAgg(50, 0, false), key: windowKey(50), unordered: true,
		steps: []ksStep{step(out(
			"A@[0,50] 0+1 @0", "A@[0,50] 0+1+2 @5", "A@[0,50] 0+1+2+3 @6", "A@[0,50] 0+1+2+3+4 @6", "A@[0,50] 0+1+2+3+4+5 @13", "A@[0,50] 0+1+2+3+4+5+6 @13",
			"A@[1,51] 0+2 @5", "A@[1,51] 0+2+3 @6", "A@[1,51] 0+2+3+4 @6", "A@[1,51] 0+2+3+4+5 @13", "A@[1,51] 0+2+3+4+5+6 @13",
			"A@[4,54] 0+2+3 @6", "A@[4,54] 0+2+3+5 @13", "A@[4,54] 0+2+3+5+6 @13",
			"A@[6,56] 0+3 @6", "A@[6,56] 0+3+5 @13", "A@[6,56] 0+3+5+6 @13",
			"A@[7,57] 0+5 @13", "A@[7,57] 0+5+6 @13",
			"A@[11,61] 0+5 @13",
			"A@[20,70] 0+7 @70",
		), slidingEarlyInput...)},
	},
	{
		name:  "KStreamSlidingWindowAggregateTest.testEarlyRecordsSmallInput(ON_WINDOW_CLOSE)",
		build: slidingAgg(50, 0, true), key: windowKey(50), unordered: true,
		steps: []ksStep{step(out(
			"A@[0,50] 0+1+2+3+4+5+6 @13",
			"A@[1,51] 0+2+3+4+5+6 @13",
			"A@[4,54] 0+2+3+5+6 @13",
			"A@[6,56] 0+3+5+6 @13",
			"A@[7,57] 0+5+6 @13",
			"A@[11,61] 0+5 @13",
		), slidingEarlyInput...)},
	},
	{
		name:  "KStreamSlidingWindowAggregateTest.testEarlyRecordsRepeatedInput(ON_WINDOW_UPDATE)",
		build: slidingAgg(5, 0, false), key: windowKey(5), unordered: true,
		steps: []ksStep{step(out(
			"A@[0,5] 0+1 @0", "A@[0,5] 0+1+2 @2", "A@[0,5] 0+1+2+3+4+5 @4", "A@[0,5] 0+1+2+3+4+5+6 @4",
			"A@[0,5] 0+1+2+3 @4", "A@[0,5] 0+1+2+3+4 @4", "A@[0,5] 0+1+2+3+4+5+6+7 @4",
			"A@[1,6] 0+2+3+5+6 @4", "A@[1,6] 0+2 @2", "A@[1,6] 0+2+3 @4", "A@[1,6] 0+2+3+5 @4",
			"A@[2,7] 0+2+3+5+6+8 @7",
			"A@[3,8] 0+3 @4", "A@[3,8] 0+3+8 @7",
			"A@[5,10] 0+8 @7",
		), slidingRepeatedInput...)},
	},
	{
		name:  "KStreamSlidingWindowAggregateTest.testEarlyRecordsRepeatedInput(ON_WINDOW_CLOSE)",
		build: slidingAgg(5, 0, true), key: windowKey(5), unordered: true,
		steps: []ksStep{step(out(
			"A@[0,5] 0+1+2+3+4+5+6+7 @4",
			"A@[1,6] 0+2+3+5+6 @4",
		), slidingRepeatedInput...)},
	},
}

func TestKafkaStreamsSlidingEarlyWindows(t *testing.T) {
	for _, sc := range ksSlidingEarlyWindows {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

var ksSlidingWindows = []ksScenario{
	{
		name:  "SlidingWindowedKStreamIntegrationTest.shouldAggregateWindowedWithNoGrace(ON_WINDOW_UPDATE)",
		build: slidingAgg(10, 0, false), key: windowKey(10),
		late: 2, // B's 6 and 11 come after stream time 17
		steps: []ksStep{step(out(
			"A@[0,10] 0+1 @0",
			"A@[1,11] 0+2 @5",
			"A@[0,10] 0+1+2 @5",
			"A@[1,11] 0+2+3 @10",
			"A@[0,10] 0+1+2+3 @10",
			"A@[6,16] 0+3 @10",
			"A@[11,21] 0+4 @17",
			"A@[7,17] 0+3+4 @17",
			"B@[8,18] 0+7 @18",
			"C@[15,25] 0+8 @25",
		), slidingNoGraceInput...)},
	},
	{
		name:  "SlidingWindowedKStreamIntegrationTest.shouldAggregateWindowedWithNoGrace(ON_WINDOW_CLOSE)",
		build: slidingAgg(10, 0, true), key: windowKey(10),
		late: 2,
		steps: []ksStep{step(out(
			"A@[0,10] 0+1+2+3 @10",
			"A@[1,11] 0+2+3 @10",
			"A@[6,16] 0+3 @10",
			"A@[7,17] 0+3+4 @17",
			"B@[8,18] 0+7 @18",
			"A@[11,21] 0+4 @17",
		), slidingNoGraceInput...)},
	},
	{
		name:  "SlidingWindowedKStreamIntegrationTest.shouldAggregateWindowedWithGrace(ON_WINDOW_UPDATE)",
		build: slidingAgg(10, 5, false), key: windowKey(10),
		late: 1, // 8 at 11 after stream time 27
		steps: []ksStep{step(out(
			"A@[0,10] 0+1 @0",
			"A@[1,11] 0+2 @5",
			"A@[0,10] 0+1+2 @5",
			"A@[1,11] 0+2+3 @10",
			"A@[0,10] 0+1+2+3 @10",
			"A@[6,16] 0+3 @10",
			"A@[1,11] 0+2+3+4 @10",
			"A@[6,16] 0+3+4 @10",
			"A@[7,17] 0+3 @10",
			"A@[0,10] 0+1+2+3+4 @10",
			"A@[7,17] 0+3+5 @11",
			"A@[6,16] 0+3+4+5 @11",
			"A@[1,11] 0+2+3+4+5 @11",
			"A@[11,21] 0+5 @11",
			"A@[11,21] 0+5+6 @16",
			"A@[7,17] 0+3+5+6 @16",
			"A@[6,16] 0+3+4+5+6 @16",
			"A@[12,22] 0+6 @16",
			"A@[17,27] 0+7 @27",
			"A@[17,27] 0+7 @27",
		), slidingGraceInput...)},
	},
	{
		name:  "SlidingWindowedKStreamIntegrationTest.shouldAggregateWindowedWithGrace(ON_WINDOW_CLOSE)",
		build: slidingAgg(10, 5, true), key: windowKey(10),
		late: 1,
		steps: []ksStep{step(out(
			"A@[0,10] 0+1+2+3+4 @10",
			"A@[1,11] 0+2+3+4+5 @11",
			"A@[6,16] 0+3+4+5+6 @16",
			"A@[7,17] 0+3+5+6 @16",
			"A@[11,21] 0+5+6 @16",
		), slidingGraceInput...)},
	},
	{
		name:  "KStreamSlidingWindowAggregateTest.testAggregateSmallInput(ON_WINDOW_UPDATE)",
		build: slidingAgg(10, 5, false), key: windowKey(10), unordered: true,
		steps: []ksStep{step(out(
			"A@[0,10] 0+1 @10", "A@[0,10] 0+1+2 @10",
			"A@[4,14] 0+1+2+3 @14",
			"A@[5,15] 0+1+2+3+4 @15",
			"A@[10,20] 0+1+2+3+4+5 @20",
			"A@[11,21] 0+3 @14", "A@[11,21] 0+3+4 @15", "A@[11,21] 0+3+4+5 @20",
			"A@[12,22] 0+3+4+5+6 @22",
			"A@[15,25] 0+4 @15", "A@[15,25] 0+4+5 @20", "A@[15,25] 0+4+5+6 @22",
			"A@[16,26] 0+5 @20", "A@[16,26] 0+5+6 @22",
			"A@[20,30] 0+5+6+7 @30",
			"A@[21,31] 0+6 @22", "A@[21,31] 0+6+7 @30",
			"A@[23,33] 0+7 @30",
		), slidingAggregateSmallInput...)},
	},
	{
		name:  "KStreamSlidingWindowAggregateTest.testAggregateSmallInput(ON_WINDOW_CLOSE)",
		build: slidingAgg(10, 5, true), key: windowKey(10), unordered: true,
		steps: []ksStep{step(out(
			"A@[0,10] 0+1+2 @10",
			"A@[4,14] 0+1+2+3 @14",
			"A@[5,15] 0+1+2+3+4 @15",
			"A@[10,20] 0+1+2+3+4+5 @20",
			"A@[11,21] 0+3+4+5 @20",
			"A@[12,22] 0+3+4+5+6 @22",
		), slidingAggregateSmallInput...)},
	},
	{
		name:  "KStreamSlidingWindowAggregateTest.testReduceSmallInput(ON_WINDOW_UPDATE)",
		build: slidingReduce(10, 5, false), key: windowKey(10), unordered: true,
		steps: []ksStep{step(out(
			"A@[0,10] 1 @10",
			"A@[4,14] 1+2 @14",
			"A@[5,15] 1+2+3 @15",
			"A@[11,21] 2 @14", "A@[11,21] 2+3 @15",
			"A@[12,22] 2+3+4 @22",
			"A@[15,25] 3 @15", "A@[15,25] 3+4 @22",
			"A@[16,26] 4 @22", "A@[16,26] 4+5 @26",
			"A@[20,30] 4+5+6 @30",
			"A@[23,33] 5 @26", "A@[23,33] 5+6 @30",
			"A@[27,37] 6 @30",
		), slidingReduceSmallInput...)},
	},
	{
		name:  "KStreamSlidingWindowAggregateTest.testReduceSmallInput(ON_WINDOW_CLOSE)",
		build: slidingReduce(10, 5, true), key: windowKey(10), unordered: true,
		steps: []ksStep{step(out(
			"A@[0,10] 1 @10",
			"A@[4,14] 1+2 @14",
			"A@[5,15] 1+2+3 @15",
			"A@[11,21] 2+3 @15",
			"A@[12,22] 2+3+4 @22",
		), slidingReduceSmallInput...)},
	},
	{
		name:  "KStreamSlidingWindowAggregateTest.testNoGracePeriodSmallInput(ON_WINDOW_UPDATE)",
		build: slidingAgg(50, 0, false), key: windowKey(50), unordered: true,
		// Counted per closed window, as Kafka Streams' dropped-records
		// sensor counts: 4 at 103 misses [55,105] and its left window
		// [53,103], 6 at 110 its left window [60,110].
		late: 3,
		steps: []ksStep{step(out(
			"A@[50,100] 0+1 @100",
			"A@[55,105] 0+1+2 @105",
			"A@[56,106] 0+1+2+3 @106", "A@[56,106] 0+1+2+3+4 @106",
			"A@[63,113] 0+1+2+3+4+5 @113", "A@[63,113] 0+1+2+3+4+5+6 @113",
			"A@[101,151] 0+2 @105", "A@[101,151] 0+2+3 @106", "A@[101,151] 0+2+3+4 @106", "A@[101,151] 0+2+3+4+5 @113", "A@[101,151] 0+2+3+4+5+6 @113",
			"A@[104,154] 0+2+3 @106", "A@[104,154] 0+2+3+5 @113", "A@[104,154] 0+2+3+5+6 @113",
			"A@[106,156] 0+3 @106", "A@[106,156] 0+3+5 @113", "A@[106,156] 0+3+5+6 @113",
			"A@[107,157] 0+5 @113", "A@[107,157] 0+5+6 @113",
			"A@[111,161] 0+5 @113",
		), in("A", "1", 100), in("A", "2", 105), in("A", "3", 106), in("A", "4", 103), in("A", "5", 113), in("A", "6", 110))},
	},
	{
		name:  "KStreamSlidingWindowAggregateTest.testNoGracePeriodSmallInput(ON_WINDOW_CLOSE)",
		build: slidingAgg(50, 0, true), key: windowKey(50), unordered: true,
		late: 3,
		steps: []ksStep{step(out(
			"A@[50,100] 0+1 @100",
			"A@[55,105] 0+1+2 @105",
			"A@[56,106] 0+1+2+3+4 @106",
		), in("A", "1", 100), in("A", "2", 105), in("A", "3", 106), in("A", "4", 103), in("A", "5", 113), in("A", "6", 110))},
	},
	{
		name:  "KStreamSlidingWindowAggregateTest.testEarlyNoGracePeriodSmallInput(ON_WINDOW_UPDATE)",
		build: slidingAgg(50, 0, false), key: windowKey(50), unordered: true,
		steps: []ksStep{step(out(
			"A@[0,50] 0+1 @0", "A@[0,50] 0+1+2 @5", "A@[0,50] 0+1+2+3 @6", "A@[0,50] 0+1+2+3+4 @6", "A@[0,50] 0+1+2+3+4+5 @13", "A@[0,50] 0+1+2+3+4+5+6 @13",
			"A@[1,51] 0+2 @5", "A@[1,51] 0+2+3 @6", "A@[1,51] 0+2+3+4 @6", "A@[1,51] 0+2+3+4+5 @13", "A@[1,51] 0+2+3+4+5+6 @13",
			"A@[4,54] 0+2+3 @6", "A@[4,54] 0+2+3+5 @13", "A@[4,54] 0+2+3+5+6 @13",
			"A@[6,56] 0+3 @6", "A@[6,56] 0+3+5 @13", "A@[6,56] 0+3+5+6 @13",
			"A@[7,57] 0+5 @13", "A@[7,57] 0+5+6 @13",
			"A@[11,61] 0+5 @13",
			"A@[20,70] 0+6 @70",
		), in("A", "1", 0), in("A", "2", 5), in("A", "3", 6), in("A", "4", 3), in("A", "5", 13), in("A", "6", 10), in("A", "6", 70))},
	},
	{
		name:  "KStreamSlidingWindowAggregateTest.testEarlyNoGracePeriodSmallInput(ON_WINDOW_CLOSE)",
		build: slidingAgg(50, 0, true), key: windowKey(50), unordered: true,
		steps: []ksStep{step(out(
			"A@[0,50] 0+1+2+3+4+5+6 @13",
			"A@[1,51] 0+2+3+4+5+6 @13",
			"A@[4,54] 0+2+3+5+6 @13",
			"A@[6,56] 0+3+5+6 @13",
			"A@[7,57] 0+5+6 @13",
			"A@[11,61] 0+5 @13",
		), in("A", "1", 0), in("A", "2", 5), in("A", "3", 6), in("A", "4", 3), in("A", "5", 13), in("A", "6", 10), in("A", "6", 70))},
	},
}

func TestKafkaStreamsSlidingWindows(t *testing.T) {
	for _, sc := range ksSlidingWindows {
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
