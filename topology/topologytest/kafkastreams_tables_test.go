package topologytest_test

import (
	"strconv"
	"testing"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// tableJoin builds Kafka Streams' KTableKTable*JoinTest topologies: the
// tables of "left" and "right" joined (op "inner", "left" or "outer") with
// Kafka Streams' MockValueJoiner.TOSTRING_JOINER into "out".
func tableJoin(op string) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		l := topology.Table(b, "left", serde.String, serde.String, "left-store")
		r := topology.Table(b, "right", serde.String, serde.String, "right-store")
		var j topology.KTable[string, string]
		switch op {
		case "inner":
			j = topology.JoinTables(l, r, func(lv, rv string) string { return lv + "+" + rv }, "joined", serde.String)
		case "left":
			j = topology.LeftJoinTables(l, r, func(lv, rv string, ok bool) string { return lv + "+" + orNull(rv, ok) }, "joined", serde.String)
		default:
			j = topology.OuterJoinTables(l, r, func(lv string, lok bool, rv string, rok bool) string {
				return orNull(lv, lok) + "+" + orNull(rv, rok)
			}, "joined", serde.String)
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
