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

// versionedTableJoin builds TableTableJoinIntegrationTest's topologies:
// the tables of "left" and "right", each versioned (5 minutes of history)
// or plain, joined (op "inner", "left" or "outer") by its "<left>-<right>"
// joiner, an absent side rendered "null".
func versionedTableJoin(op string, leftVersioned, rightVersioned bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		opt := func(on bool) topology.Option {
			if on {
				return topology.Versioned(5 * time.Minute)
			}
			return nil
		}
		l := topology.Table(b, "left", serde.String, serde.String, "left", opt(leftVersioned), topology.WithoutLogging())
		r := topology.Table(b, "right", serde.String, serde.String, "right", opt(rightVersioned), topology.WithoutLogging())
		var j topology.KTable[string, string]
		switch op {
		case "inner":
			j = topology.JoinTables(l, r, func(lv, rv string) string { return lv + "-" + rv }, "joined", serde.String)
		case "left":
			j = topology.LeftJoinTables(l, r, func(lv, rv string, ok bool) string { return lv + "-" + orNull(rv, ok) }, "joined", serde.String)
		default:
			j = topology.OuterJoinTables(l, r, func(lv string, lok bool, rv string, rok bool) string {
				return orNull(lv, lok) + "-" + orNull(rv, rok)
			}, "joined", serde.String)
		}
		j.ToStream().To("out", serde.String, serde.String)
	}
}

// versionedPassThrough builds a topology whose versioned table (5 ms of
// history) reaches "out" through operators that pass out-of-order updates
// on: ToStream alone, or after Filter (values other than "x") and
// MapTableValues (upper case) without stores of their own.
func versionedPassThrough(derived bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		t := topology.Table(b, "in", serde.String, serde.String, "in-store", topology.Versioned(5*time.Millisecond))
		if derived {
			t = topology.MapTableValues(t.Filter(func(_, v string) bool { return v != "x" }), func(_, v string) string { return strings.ToUpper(v) })
		}
		t.ToStream().To("out", serde.String, serde.String)
	}
}

// versionedRegroupedCount builds a versioned table of "in" grouped by
// value and counted into "out", through MapTableValues (identity)
// materialized in a plain store "m" when materialized is set.
func versionedRegroupedCount(materialized bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		t := topology.Table(b, "in", serde.String, serde.String, "in-store", topology.Versioned(5*time.Minute))
		if materialized {
			t = topology.MapTableValues(t, func(_, v string) string { return v }, topology.Materialized("m"), topology.TableValueSerde(serde.String))
		}
		topology.GroupTableBy(t, func(_, v string) (string, string) { return v, v }, "", serde.String, serde.String).
			Count("count").ToStream().To("out", serde.String, serde.Int64)
	}
}

// derivedVersioned builds a plain table of "in" mapped to upper case
// into a store "m" materialized Versioned (5 ms of history), into "out"
// as a stream, or grouped by value and counted when count is set.
func derivedVersioned(count bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		t := topology.MapTableValues(topology.Table(b, "in", serde.String, serde.String, "in-store"), func(_, v string) string { return strings.ToUpper(v) },
			topology.Materialized("m"), topology.TableValueSerde(serde.String), topology.Versioned(5*time.Millisecond))
		if !count {
			t.ToStream().To("out", serde.String, serde.String)
			return
		}
		topology.GroupTableBy(t, func(_, v string) (string, string) { return v, v }, "", serde.String, serde.String).
			Count("count").ToStream().To("out", serde.String, serde.Int64)
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
	{
		name:  "TableTableJoinIntegrationTest.testLeftWithVersionedStores",
		build: versionedTableJoin("left", true, true),
		steps: joinIntegrationSteps(map[int][]string{
			2: out("0 A-null @3"), 3: out("0 A-a @4"), 4: out("0 B-a @5"), 5: out("0 B-b @6"), 6: out("0 null @7"),
			8: out("0 C-null @9"), 9: out("0 C-c @10"), 10: out("0 C-null @11"), 11: out("0 null @12"), 18: out("0 E-e @15"),
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testOuterWithVersionedStores",
		build: versionedTableJoin("outer", true, true),
		steps: joinIntegrationSteps(map[int][]string{
			2: out("0 A-null @3"), 3: out("0 A-a @4"), 4: out("0 B-a @5"), 5: out("0 B-b @6"), 6: out("0 null-b @7"),
			7: out("0 null @8"), 8: out("0 C-null @9"), 9: out("0 C-c @10"), 10: out("0 C-null @11"), 11: out("0 null @12"),
			17: out("0 null-e @14"), 18: out("0 E-e @15"),
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testInnerWithLeftVersionedOnly",
		build: versionedTableJoin("inner", true, false),
		steps: joinIntegrationSteps(map[int][]string{
			3: out("0 A-a @4"), 4: out("0 B-a @5"), 5: out("0 B-b @6"), 6: out("0 null @7"), 9: out("0 C-c @10"),
			10: out("0 null @11"), 18: out("0 E-e @15"), 20: out("0 null @15"), 22: out("0 E-f @15"),
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testLeftWithLeftVersionedOnly",
		build: versionedTableJoin("left", true, false),
		steps: joinIntegrationSteps(map[int][]string{
			2: out("0 A-null @3"), 3: out("0 A-a @4"), 4: out("0 B-a @5"), 5: out("0 B-b @6"), 6: out("0 null @7"),
			8: out("0 C-null @9"), 9: out("0 C-c @10"), 10: out("0 C-null @11"), 11: out("0 null @12"), 18: out("0 E-e @15"),
			20: out("0 E-null @15"), 22: out("0 E-f @15"),
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testOuterWithLeftVersionedOnly",
		build: versionedTableJoin("outer", true, false),
		steps: joinIntegrationSteps(map[int][]string{
			2: out("0 A-null @3"), 3: out("0 A-a @4"), 4: out("0 B-a @5"), 5: out("0 B-b @6"), 6: out("0 null-b @7"),
			7: out("0 null @8"), 8: out("0 C-null @9"), 9: out("0 C-c @10"), 10: out("0 C-null @11"), 11: out("0 null @12"),
			13: out("0 null-d @7"), 16: out("0 null @3"), 17: out("0 null-e @14"), 18: out("0 E-e @15"),
			20: out("0 E-null @15"), 22: out("0 E-f @15"),
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testInnerWithRightVersionedOnly",
		build: versionedTableJoin("inner", false, true),
		steps: joinIntegrationSteps(map[int][]string{
			3: out("0 A-a @4"), 4: out("0 B-a @5"), 5: out("0 B-b @6"), 6: out("0 null @7"), 9: out("0 C-c @10"),
			10: out("0 null @11"), 18: out("0 E-e @15"), 19: out("0 null @14"), 21: out("0 F-e @14"),
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testLeftWithRightVersionedOnly",
		build: versionedTableJoin("left", false, true),
		steps: joinIntegrationSteps(map[int][]string{
			2: out("0 A-null @3"), 3: out("0 A-a @4"), 4: out("0 B-a @5"), 5: out("0 B-b @6"), 6: out("0 null @7"),
			8: out("0 C-null @9"), 9: out("0 C-c @10"), 10: out("0 C-null @11"), 11: out("0 null @12"),
			14: out("0 D-null @6"), 15: out("0 null @2"), 18: out("0 E-e @15"), 19: out("0 null @14"), 21: out("0 F-e @14"),
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testOuterWithRightVersionedOnly",
		build: versionedTableJoin("outer", false, true),
		steps: joinIntegrationSteps(map[int][]string{
			2: out("0 A-null @3"), 3: out("0 A-a @4"), 4: out("0 B-a @5"), 5: out("0 B-b @6"), 6: out("0 null-b @7"),
			7: out("0 null @8"), 8: out("0 C-null @9"), 9: out("0 C-c @10"), 10: out("0 C-null @11"), 11: out("0 null @12"),
			14: out("0 D-null @6"), 15: out("0 null @2"), 17: out("0 null-e @14"), 18: out("0 E-e @15"),
			19: out("0 null-e @14"), 21: out("0 F-e @14"),
		}),
	},
	{
		// Without its inputs of keys "null" and "NULL", which the test's
		// selector maps to a null key and a null pair, both dropped.
		name:  "KTableAggregateTest.testAggOfVersionedStore",
		build: tableAgg("aggregate", func(_, v string) (string, string) { return v, v }, topology.Versioned(5*time.Minute)),
		steps: []ksStep{step(out("1 0+1 @10", "1 0+1-1 @15", "2 0+2 @20", "2 0+2-2 @23", "4 0+4 @23"),
			in("A", "1", 10), in("A", ksNull, 15), in("A", "1", 12), in("B", "2", 20), in("B", "4", 23), in("B", "7", 22))},
	},
	{
		name:  "KTableAggregateTest.testCountOfVersionedStore",
		build: tableAgg("count", func(_, v string) (string, string) { return v, v }, topology.Versioned(5*time.Minute)),
		value: longValue,
		steps: []ksStep{step(out(
			"green 1 @10", "green 2 @10", "green 1 @12", "blue 1 @12", "yellow 1 @15", "green 2 @12",
		), in("A", "green", 10), in("B", "green", 9), in("A", "blue", 12), in("A", "blue", 11), in("C", "yellow", 15), in("D", "green", 11))},
	},
	{
		// KTableSource.process over a versioned store: every put is
		// forwarded, an out-of-order one with isLatest false, and one too
		// late for the history (4 < 10 - 5) is not put nor forwarded.
		name:  "KTableSource (versioned store): out-of-order updates forwarded by toStream",
		build: versionedPassThrough(false),
		steps: []ksStep{
			step(out("A a @10"), in("A", "a", 10)),
			step(out("A b @7"), in("A", "b", 7)),
			step(out("A null @8"), in("A", ksNull, 8)),
			step(nil, in("A", "c", 4)),
			step(out("A d @12"), in("A", "d", 12)),
		},
	},
	{
		// KTableFilter and KTableMapValues without a store forward an
		// update with its isLatest flag as it came.
		name:  "KTableFilter, KTableMapValues (versioned parent): out-of-order updates passed on",
		build: versionedPassThrough(true),
		steps: []ksStep{
			step(out("A A @10"), in("A", "a", 10)),
			step(out("A B @7"), in("A", "b", 7)),
			step(out("A null @8"), in("A", "x", 8)),
			step(out("A C @12"), in("A", "c", 12)),
		},
	},
	{
		// KTableMapValues materialized in a timestamped store: its put of
		// an out-of-order update returns "is latest", so the update is its
		// latest and the re-grouping downstream counts it, retracting the
		// old value the store held.
		name:  "KTableMapValues (timestamped store over a versioned table): out-of-order updates become latest",
		build: versionedRegroupedCount(true),
		value: longValue,
		steps: []ksStep{
			step(out("green 1 @10"), in("A", "green", 10)),
			step(out("green 0 @10", "blue 1 @5"), in("A", "blue", 5)),
			// The old value is the store's, blue, not the versioned
			// table's latest, green.
			step(out("blue 0 @6", "red 1 @6"), in("A", "red", 6)),
		},
	},
	{
		// KTableRepartitionMap drops an update of a versioned table that
		// is not its key's latest.
		name:  "KTableRepartitionMap (versioned parent): out-of-order updates dropped",
		build: versionedRegroupedCount(false),
		value: longValue,
		steps: []ksStep{
			step(out("green 1 @10"), in("A", "green", 10)),
			step(nil, in("A", "blue", 5)),
		},
	},
	{
		// KTableMapValues materialized in a versioned store: its put
		// decides, as a source's does, whether an update is forwarded and
		// whether it is the latest, whatever the parent's order.
		name:  "KTableMapValues (versioned store): out-of-order updates forwarded, too-late ones not",
		build: derivedVersioned(false),
		steps: []ksStep{
			step(out("A A @10"), in("A", "a", 10)),
			step(out("A B @7"), in("A", "b", 7)),
			step(nil, in("A", "c", 2)),
			step(out("A D @12"), in("A", "d", 12)),
		},
	},
	{
		name:  "KTableMapValues (versioned store), KTableRepartitionMap: out-of-order updates dropped",
		build: derivedVersioned(true),
		value: longValue,
		steps: []ksStep{
			step(out("GREEN 1 @10"), in("A", "green", 10)),
			step(nil, in("A", "blue", 7)),
			step(out("GREEN 0 @12", "RED 1 @12"), in("A", "red", 12)),
		},
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
