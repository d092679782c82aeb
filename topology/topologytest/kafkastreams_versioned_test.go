package topologytest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// versionedStreamTableJoin builds the topology of Kafka Streams'
// StreamTableJoinIntegrationTest.test{Inner,Left}WithVersionedStore:
// "left" joined with the table of "right", materialized versioned with 5
// minutes of history, by Kafka Streams' "<left>-<right>" joiner.
func versionedStreamTableJoin(leftJoin bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		t := topology.Table(b, "right", serde.String, serde.String, "right-store", topology.Versioned(5*time.Minute))
		s := topology.Stream(b, "left", serde.String, serde.String)
		if leftJoin {
			topology.LeftJoin(s, t, func(lv, rv string, ok bool) string { return lv + "-" + orNull(rv, ok) }).To("out", serde.String, serde.String)
			return
		}
		topology.Join(s, t, func(lv, rv string) string { return lv + "-" + rv }).To("out", serde.String, serde.String)
	}
}

// joinIntegrationSteps are AbstractJoinIntegrationTest's input records,
// all of key 0, one step each, with the outputs expected after each (keyed
// by position; absent is none).
func joinIntegrationSteps(want map[int][]string) []ksStep {
	ins := []ksIn{
		left("0", ksNull, 1), right("0", ksNull, 2), left("0", "A", 3), right("0", "a", 4),
		left("0", "B", 5), right("0", "b", 6), left("0", ksNull, 7), right("0", ksNull, 8),
		left("0", "C", 9), right("0", "c", 10), right("0", ksNull, 11), left("0", ksNull, 12),
		right("0", ksNull, 13),
		right("0", "d", 7), // out of order, with a tombstone as the latest
		left("0", "D", 6), left("0", ksNull, 2), right("0", ksNull, 3), right("0", "e", 14),
		left("0", "E", 15),
		left("0", ksNull, 10), // out of order, with a value as the latest
		right("0", ksNull, 9), left("0", "F", 4), right("0", "f", 3),
	}
	steps := make([]ksStep, len(ins))
	for i, in := range ins {
		steps[i] = step(want[i], in)
	}
	return steps
}

// graceJoin builds KStreamKTableJoinTest.makeJoin: "left" joined with the
// table of "right", versioned with 5 minutes of history, with a grace
// period, by Kafka Streams' MockValueJoiner.TOSTRING_JOINER.
func graceJoin(grace time.Duration) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		t := topology.Table(b, "right", serde.String, serde.String, "V-grace", topology.Versioned(5*time.Minute))
		topology.Join(topology.Stream(b, "left", serde.String, serde.String), t, func(lv, rv string) string { return lv + "+" + rv },
			topology.Named("Grace"), topology.JoinGrace(grace), topology.JoinValueSerde(serde.String)).To("out", serde.String, serde.String)
	}
}

// fkJoinVersioned builds KTableKTableForeignKeyJoinIntegrationTest's
// topology: the table of "left" joined (left join or inner) by foreign key
// with the table of "right", the foreign key the part of a left value after
// its "|", each table versioned (5 minutes of history) or not.
func fkJoinVersioned(leftJoin, leftVersioned, rightVersioned bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		opt := func(on bool) topology.Option {
			if on {
				return topology.Versioned(5 * time.Minute)
			}
			return nil
		}
		l := topology.Table(b, "left", serde.String, serde.String, "left", opt(leftVersioned))
		r := topology.Table(b, "right", serde.String, serde.String, "right", opt(rightVersioned))
		fk := func(_, v string) string { return v[strings.Index(v, "|")+1:] }
		var j topology.KTable[string, string]
		if leftJoin {
			j = topology.LeftJoinByForeignKey(l, r, fk, func(v, rv string, ok bool) string { return "(" + v + "," + orNull(rv, ok) + ")" }, "store", serde.String)
		} else {
			j = topology.JoinByForeignKey(l, r, fk, func(v, rv string) string { return "(" + v + "," + rv + ")" }, "store", serde.String)
		}
		j.ToStream().To("out", serde.String, serde.String)
	}
}

// fkOutOfOrderSteps are the inputs of
// KTableKTableForeignKeyJoinIntegrationTest.shouldIgnoreOutOfOrderRecordsIffVersioned
// (times after its base time), with the latest output of each key after
// each step (the test reads the output into a map).
func fkOutOfOrderSteps(want [9][]string) []ksStep {
	return []ksStep{
		step(want[0], right("rhs1", "rhsValue1", 4)),
		step(want[1], left("lhs1", "lhsValue1|rhs1", 3), left("lhs2", "lhsValue2|rhs1", 5)),
		step(want[2], left("lhs2", ksNull, 6)),
		step(want[3], left("lhs1", "lhsValue1_ooo|rhs1", 2), left("lhs2", "lhsValue2_ooo|rhs1", 2)),
		step(want[4], left("lhs1", ksNull, 2)),
		step(want[5], left("lhs1", "lhsValue1_new|rhs1", 8), left("lhs2", "lhsValue2_new|rhs1", 8)),
		step(want[6], right("rhs1", "rhsValue1_ooo", 1)),
		step(want[7], right("rhs1", ksNull, 1)),
		step(want[8], right("rhs1", "rhsValue1_new", 6)),
	}
}

var ksVersioned = []ksScenario{
	{
		name:  "StreamTableJoinIntegrationTest.testInnerWithVersionedStore",
		build: versionedStreamTableJoin(false),
		steps: joinIntegrationSteps(map[int][]string{
			4: out("0 B-a @5"), 14: out("0 D-b @6"), 18: out("0 E-e @15"), 21: out("0 F-a @4"),
		}),
	},
	{
		name:  "StreamTableJoinIntegrationTest.testLeftWithVersionedStore",
		build: versionedStreamTableJoin(true),
		steps: joinIntegrationSteps(map[int][]string{
			2: out("0 A-null @3"), 4: out("0 B-a @5"), 8: out("0 C-null @9"), 14: out("0 D-b @6"), 18: out("0 E-e @15"), 21: out("0 F-a @4"),
		}),
	},
	{
		name: "TableTableJoinIntegrationTest.testInnerWithVersionedStores",
		build: func(b *topology.Builder) {
			l := topology.Table(b, "left", serde.String, serde.String, "left", topology.Versioned(5*time.Minute), topology.WithoutLogging())
			r := topology.Table(b, "right", serde.String, serde.String, "right", topology.Versioned(5*time.Minute), topology.WithoutLogging())
			topology.JoinTables(l, r, func(lv, rv string) string { return lv + "-" + rv }, "joined", serde.String).
				ToStream().To("out", serde.String, serde.String)
		},
		steps: joinIntegrationSteps(map[int][]string{
			3: out("0 A-a @4"), 4: out("0 B-a @5"), 5: out("0 B-b @6"), 6: out("0 null @7"),
			9: out("0 C-c @10"), 10: out("0 null @11"), 18: out("0 E-e @15"),
		}),
	},
	{
		name:  "KStreamKTableJoinTest.shouldDelayJoinByGracePeriod",
		build: graceJoin(2 * time.Millisecond),
		steps: []ksStep{
			step(nil, pushToTable(4, "Y")...),
			step(out("0 X0+Y0 @0", "1 X1+Y1 @1"), pushToStream(4, "X")...),
			step(nil, pushToTable(4, "YY")...),
			step(out("0 X0+YY0 @0", "1 X1+YY1 @1"), pushToStream(4, "X")...),
			step(out("2 X2+YY2 @2", "2 X2+YY2 @2", "3 X3+YY3 @3", "3 X3+YY3 @3"), left("5", "test", 7)),
			step(nil, pushToTable(4, "YYY")...),
		},
	},
	{
		name:  "KStreamKTableJoinTest.shouldHandleLateJoinsWithGracePeriod",
		build: graceJoin(2 * time.Millisecond),
		steps: []ksStep{
			step(nil, pushToTable(4, "Y")...),
			step(out("0 X0+Y0 @0", "1 X1+Y1 @1"), pushToStream(4, "X")...),
			step(out("0 X0+Y0 @0"), pushToStream(1, "X")...),
		},
	},
	{
		name:  "KTableKTableForeignKeyJoinIntegrationTest.shouldIgnoreOutOfOrderRecordsIffVersioned(inner, both versioned)",
		build: fkJoinVersioned(false, true, true),
		byKey: true,
		steps: fkOutOfOrderSteps(fkBothVersioned),
	},
	{
		name:  "KTableKTableForeignKeyJoinIntegrationTest.shouldIgnoreOutOfOrderRecordsIffVersioned(left, both versioned)",
		build: fkJoinVersioned(true, true, true),
		byKey: true,
		steps: fkOutOfOrderSteps(fkBothVersioned),
	},
	{
		name:  "KTableKTableForeignKeyJoinIntegrationTest.shouldIgnoreOutOfOrderRecordsIffVersioned(left, right versioned)",
		build: fkJoinVersioned(true, false, true),
		byKey: true,
		steps: fkOutOfOrderSteps([9][]string{
			1: out("lhs1 (lhsValue1|rhs1,rhsValue1)", "lhs2 (lhsValue2|rhs1,rhsValue1)"),
			2: out("lhs2 null"),
			3: out("lhs1 (lhsValue1_ooo|rhs1,rhsValue1)", "lhs2 (lhsValue2_ooo|rhs1,rhsValue1)"),
			4: out("lhs1 null"),
			5: out("lhs1 (lhsValue1_new|rhs1,rhsValue1)", "lhs2 (lhsValue2_new|rhs1,rhsValue1)"),
			8: out("lhs1 (lhsValue1_new|rhs1,rhsValue1_new)", "lhs2 (lhsValue2_new|rhs1,rhsValue1_new)"),
		}),
	},
}

// fkBothVersioned is what shouldIgnoreOutOfOrderRecordsIffVersioned
// expects of an inner or left join with both tables versioned: no
// out-of-order record of either side changes a result.
var fkBothVersioned = [9][]string{
	1: out("lhs1 (lhsValue1|rhs1,rhsValue1)", "lhs2 (lhsValue2|rhs1,rhsValue1)"),
	2: out("lhs2 null"),
	5: out("lhs1 (lhsValue1_new|rhs1,rhsValue1)", "lhs2 (lhsValue2_new|rhs1,rhsValue1)"),
	8: out("lhs1 (lhsValue1_new|rhs1,rhsValue1_new)", "lhs2 (lhsValue2_new|rhs1,rhsValue1_new)"),
}

func TestKafkaStreamsVersioned(t *testing.T) {
	for _, sc := range ksVersioned {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}
