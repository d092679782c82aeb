package topologytest_test

import (
	"testing"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// ttJoin builds TableTableJoinIntegrationTest's single joins: the tables
// of "left" and "right" joined (op "inner", "left" or "outer") with the
// test's joiner, which prints "<left>-<right>", into "out". The result
// store has caching off in that test; the driver runs without commits.
func ttJoin(op string) func(b *topology.Builder) {
	return tableJoinOf(op, "-", "left", "right", "store")
}

// ttSteps pairs AbstractJoinIntegrationTest's input (key 0 throughout,
// out-of-order times included) with the output expected after each
// record; a nil entry expects none.
func ttSteps(want [23][]string) []ksStep {
	ins := []ksIn{
		left("0", ksNull, 1), right("0", ksNull, 2), left("0", "A", 3), right("0", "a", 4),
		left("0", "B", 5), right("0", "b", 6), left("0", ksNull, 7), right("0", ksNull, 8),
		left("0", "C", 9), right("0", "c", 10), right("0", ksNull, 11), left("0", ksNull, 12),
		right("0", ksNull, 13), right("0", "d", 7), left("0", "D", 6), left("0", ksNull, 2),
		right("0", ksNull, 3), right("0", "e", 14), left("0", "E", 15), left("0", ksNull, 10),
		right("0", ksNull, 9), left("0", "F", 4), right("0", "f", 3),
	}
	steps := make([]ksStep, len(ins))
	for i, in := range ins {
		steps[i] = step(want[i], in)
	}
	return steps
}

// ttMultiJoin builds TableTableJoinIntegrationTest's multi-joins: the
// tables of "left" and "right" joined (first, "inner", "left" or
// "outer") with the test's joiner and no Materialized, so keeping no
// store, and that result joined (second) with the right table again into
// the store "store", caching off, into "out".
func ttMultiJoin(first, second string) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		l := topology.Table(b, "left", serde.String, serde.String, "left")
		r := topology.Table(b, "right", serde.String, serde.String, "right")
		ttJoinOp(ttJoinOp(l, r, first, ""), r, second, "store").ToStream().To("out", serde.String, serde.String)
	}
}

// ttJoinOp joins l and r as op with the test's joiner, which prints
// "<left>-<right>", into store ("" for none).
func ttJoinOp(l, r topology.KTable[string, string], op, store string) topology.KTable[string, string] {
	switch op {
	case "inner":
		return topology.JoinTables(l, r, func(lv, rv string) string { return lv + "-" + rv }, store, serde.String)
	case "left":
		return topology.LeftJoinTables(l, r, func(lv, rv string, ok bool) string { return lv + "-" + orNull(rv, ok) }, store, serde.String)
	default:
		return topology.OuterJoinTables(l, r, func(lv string, lok bool, rv string, rok bool) string {
			return orNull(lv, lok) + "-" + orNull(rv, rok)
		}, store, serde.String)
	}
}

// ttMultiSteps pairs AbstractJoinIntegrationTest's input without
// out-of-order data (key 0, then a record with a null key on each side)
// with the output expected after each record; a nil entry expects none.
func ttMultiSteps(want [17][]string) []ksStep {
	ins := []ksIn{
		left("0", ksNull, 1), right("0", ksNull, 2), left("0", "A", 3), right("0", "a", 4),
		left("0", "B", 5), right("0", "b", 6), left("0", ksNull, 7), right("0", ksNull, 8),
		left("0", "C", 9), right("0", "c", 10), right("0", ksNull, 11), left("0", ksNull, 12),
		right("0", ksNull, 13), right("0", "d", 14), left("0", "D", 15),
		left(ksNull, "E", 16), right(ksNull, "e", 17),
	}
	steps := make([]ksStep, len(ins))
	for i, in := range ins {
		steps[i] = step(want[i], in)
	}
	return steps
}

// tombstoneJoin builds a join of op whose right table is filtered to even
// values (KTableFilterTest's predicate) before the join, printing as
// KTableKTable*JoinTest's joiner does.
func tombstoneJoin(op string, filtered bool) func(b *topology.Builder) {
	return func(b *topology.Builder) {
		l := topology.Table(b, "left", serde.String, serde.String, "left-store")
		r := topology.Table(b, "right", serde.String, serde.String, "right-store")
		if filtered {
			r = r.Filter(even)
		}
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

var ksTableTableJoins = []ksScenario{
	{
		name:  "TableTableJoinIntegrationTest.testInner(cacheEnabled=false)",
		build: ttJoin("inner"),
		steps: ttSteps([23][]string{
			nil, nil, nil, out("0 A-a @4"), out("0 B-a @5"), out("0 B-b @6"), out("0 null @7"), nil,
			nil, out("0 C-c @10"), out("0 null @11"), nil, nil, nil, out("0 D-d @7"), out("0 null @7"),
			nil, nil, out("0 E-e @15"), out("0 null @14"), nil, nil, out("0 F-f @4"),
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testLeft(cacheEnabled=false)",
		build: ttJoin("left"),
		steps: ttSteps([23][]string{
			nil, nil, out("0 A-null @3"), out("0 A-a @4"), out("0 B-a @5"), out("0 B-b @6"), out("0 null @7"), nil,
			out("0 C-null @9"), out("0 C-c @10"), out("0 C-null @11"), out("0 null @12"), nil, nil, out("0 D-d @7"), out("0 null @7"),
			nil, nil, out("0 E-e @15"), out("0 null @14"), nil, out("0 F-null @4"), out("0 F-f @4"),
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testOuter(cacheEnabled=false)",
		build: ttJoin("outer"),
		steps: ttSteps([23][]string{
			nil, nil, out("0 A-null @3"), out("0 A-a @4"), out("0 B-a @5"), out("0 B-b @6"), out("0 null-b @7"), out("0 null @8"),
			out("0 C-null @9"), out("0 C-c @10"), out("0 C-null @11"), out("0 null @12"), nil, out("0 null-d @7"), out("0 D-d @7"), out("0 null-d @7"),
			out("0 null @3"), out("0 null-e @14"), out("0 E-e @15"), out("0 null-e @14"), out("0 null @9"), out("0 F-null @4"), out("0 F-f @4"),
		}),
	},
	{
		// Both outputs of records 4, 6 and 10 are KAFKA-6443's
		// duplicates: the right update reaches the second join through
		// the first and through its own right side, whose lookup of the
		// first join's result joins both tables' current values. Record
		// 11 sends nothing, as the test notes, because of the self-join.
		name:  "TableTableJoinIntegrationTest.testInnerInner(cacheEnabled=false)",
		build: ttMultiJoin("inner", "inner"),
		steps: ttMultiSteps([17][]string{
			nil, nil, nil, out("0 A-a-a @4", "0 A-a-a @4"), out("0 B-a-a @5"), out("0 B-b-b @6", "0 B-b-b @6"),
			out("0 null @7"), nil, nil, out("0 C-c-c @10", "0 C-c-c @10"), nil, nil, nil, nil, out("0 D-d-d @15"), nil, nil,
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testInnerLeft(cacheEnabled=false)",
		build: ttMultiJoin("inner", "left"),
		steps: ttMultiSteps([17][]string{
			nil, nil, nil, out("0 A-a-a @4", "0 A-a-a @4"), out("0 B-a-a @5"), out("0 B-b-b @6", "0 B-b-b @6"),
			out("0 null @7"), nil, nil, out("0 C-c-c @10", "0 C-c-c @10"), out("0 null @11"), nil, nil, nil, out("0 D-d-d @15"), nil, nil,
		}),
	},
	{
		// Record 14's null-d comes of the self-join, as the test notes.
		name:  "TableTableJoinIntegrationTest.testInnerOuter(cacheEnabled=false)",
		build: ttMultiJoin("inner", "outer"),
		steps: ttMultiSteps([17][]string{
			nil, nil, nil, out("0 A-a-a @4", "0 A-a-a @4"), out("0 B-a-a @5"), out("0 B-b-b @6", "0 B-b-b @6"),
			out("0 null-b @7"), out("0 null @8"), nil, out("0 C-c-c @10", "0 C-c-c @10"), out("0 null @11", "0 null @11"), nil, nil,
			out("0 null-d @14"), out("0 D-d-d @15"), nil, nil,
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testLeftInner(cacheEnabled=false)",
		build: ttMultiJoin("left", "inner"),
		steps: ttMultiSteps([17][]string{
			nil, nil, nil, out("0 A-a-a @4", "0 A-a-a @4"), out("0 B-a-a @5"), out("0 B-b-b @6", "0 B-b-b @6"),
			out("0 null @7"), nil, nil, out("0 C-c-c @10", "0 C-c-c @10"), out("0 null @11"), nil, nil, nil, out("0 D-d-d @15"), nil, nil,
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testLeftLeft(cacheEnabled=false)",
		build: ttMultiJoin("left", "left"),
		steps: ttMultiSteps([17][]string{
			nil, nil, out("0 A-null-null @3"), out("0 A-a-a @4", "0 A-a-a @4"), out("0 B-a-a @5"), out("0 B-b-b @6", "0 B-b-b @6"),
			out("0 null @7"), nil, out("0 C-null-null @9"), out("0 C-c-c @10", "0 C-c-c @10"), out("0 C-null-null @11", "0 C-null-null @11"),
			out("0 null @12"), nil, nil, out("0 D-d-d @15"), nil, nil,
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testLeftOuter(cacheEnabled=false)",
		build: ttMultiJoin("left", "outer"),
		steps: ttMultiSteps([17][]string{
			nil, nil, out("0 A-null-null @3"), out("0 A-a-a @4", "0 A-a-a @4"), out("0 B-a-a @5"), out("0 B-b-b @6", "0 B-b-b @6"),
			out("0 null-b @7"), out("0 null @8"), out("0 C-null-null @9"), out("0 C-c-c @10", "0 C-c-c @10"),
			out("0 C-null-null @11", "0 C-null-null @11"), out("0 null @12"), nil, out("0 null-d @14"), out("0 D-d-d @15"), nil, nil,
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testOuterInner(cacheEnabled=false)",
		build: ttMultiJoin("outer", "inner"),
		steps: ttMultiSteps([17][]string{
			nil, nil, nil, out("0 A-a-a @4", "0 A-a-a @4"), out("0 B-a-a @5"), out("0 B-b-b @6", "0 B-b-b @6"),
			out("0 null-b-b @7"), nil, nil, out("0 C-c-c @10", "0 C-c-c @10"), out("0 null @11"), nil, nil,
			out("0 null-d-d @14", "0 null-d-d @14"), out("0 D-d-d @15"), nil, nil,
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testOuterLeft(cacheEnabled=false)",
		build: ttMultiJoin("outer", "left"),
		steps: ttMultiSteps([17][]string{
			nil, nil, out("0 A-null-null @3"), out("0 A-a-a @4", "0 A-a-a @4"), out("0 B-a-a @5"), out("0 B-b-b @6", "0 B-b-b @6"),
			out("0 null-b-b @7"), out("0 null @8"), out("0 C-null-null @9"), out("0 C-c-c @10", "0 C-c-c @10"),
			out("0 C-null-null @11", "0 C-null-null @11"), out("0 null @12"), nil, out("0 null-d-d @14", "0 null-d-d @14"), out("0 D-d-d @15"), nil, nil,
		}),
	},
	{
		name:  "TableTableJoinIntegrationTest.testOuterOuter(cacheEnabled=false)",
		build: ttMultiJoin("outer", "outer"),
		steps: ttMultiSteps([17][]string{
			nil, nil, out("0 A-null-null @3"), out("0 A-a-a @4", "0 A-a-a @4"), out("0 B-a-a @5"), out("0 B-b-b @6", "0 B-b-b @6"),
			out("0 null-b-b @7"), out("0 null @8", "0 null @8"), out("0 C-null-null @9"), out("0 C-c-c @10", "0 C-c-c @10"),
			out("0 C-null-null @11", "0 C-null-null @11"), out("0 null @12"), nil, out("0 null-d-d @14", "0 null-d-d @14"), out("0 D-d-d @15"), nil, nil,
		}),
	},
	{
		// KTableKTableInnerJoin.process forwards Change(null, ...)
		// whenever the other side holds a value, whether or not this
		// side held the key; the merger forwards it.
		name:  "KTableKTableInnerJoin.process: a tombstone of a key the side does not hold goes out while the other side holds one",
		build: tombstoneJoin("inner", false),
		steps: []ksStep{
			step(nil, right("1", "Y1", 1)),
			step(out("1 null @2"), left("1", ksNull, 2)),
			step(nil, left("2", ksNull, 3)),
			step(nil, left("3", "X3", 4)),
			step(out("3 null @5"), right("3", ksNull, 5)),
			step(out("3 null @6"), right("3", ksNull, 6)),
		},
	},
	{
		// KTableKTableLeftJoin.process: with no right value, only a
		// tombstone of a key the left table held goes out (the left
		// table sends old values for the join); with one, any.
		name:  "KTableKTableLeftJoin.process: a tombstone of a key the left side does not hold goes out while the right side holds one",
		build: tombstoneJoin("left", false),
		steps: []ksStep{
			step(nil, right("1", "Y1", 1)),
			step(out("1 null @2"), left("1", ksNull, 2)),
			step(nil, left("2", ksNull, 3)),
			step(out("2 X2+null @4"), left("2", "X2", 4)),
			step(out("2 null @5"), left("2", ksNull, 5)),
			step(nil, left("2", ksNull, 6)),
		},
	},
	{
		// KTableKTableRightJoin.process (a left join's right side) sends
		// the left value joined with a null right one, whatever the right
		// side held; without a left value, nothing.
		name:  "KTableKTableRightJoin.process: a right tombstone of a key the right side does not hold joins the left value with null",
		build: tombstoneJoin("left", false),
		steps: []ksStep{
			step(nil, right("1", ksNull, 1)),
			step(out("2 X2+null @2"), left("2", "X2", 2)),
			step(out("2 X2+null @3"), right("2", ksNull, 3)),
		},
	},
	{
		// An outer join makes both tables send old values, so the
		// filtered right table (KTableFilter with sendOldValues) sends
		// nothing for an update that neither passed before nor passes now.
		name:  "KTableKTableOuterJoin.process: a filtered right update that never passed reaches no join",
		build: tombstoneJoin("outer", true),
		steps: []ksStep{
			step(out("1 X1+null @1"), left("1", "X1", 1)),
			step(nil, right("1", "3", 2)),
			step(out("1 X1+4 @3"), right("1", "4", 3)),
			step(out("1 X1+null @4"), right("1", "5", 4)),
			step(nil, right("1", ksNull, 5)),
		},
	},
	{
		// The left join's right table sends no old values, so its filter
		// sends a tombstone for every update that fails it, which the
		// right side joins with the left value.
		name:  "KTableKTableRightJoin.process: a filtered right update that never passed still joins the left value with null",
		build: tombstoneJoin("left", true),
		steps: []ksStep{
			step(out("1 X1+null @1"), left("1", "X1", 1)),
			step(out("1 X1+null @2"), right("1", "3", 2)),
		},
	},
	{
		// With caching, KTableKTableJoinMerger's store drops at its flush
		// the tombstone KTableKTableInnerJoin sent for a key the result
		// did not hold.
		name:    "KTableKTableInnerJoin.process with a caching result store: the tombstone of a key the result never held is dropped at the flush",
		build:   tombstoneJoin("inner", false),
		commits: true,
		steps: []ksStep{
			step(nil, right("1", "Y1", 1)),
			step(nil, left("1", ksNull, 2)),
			step(out("1 X1+Y1 @3"), left("1", "X1", 3)),
			step(nil, left("2", "X2", 4)),
			step(nil, right("2", "Y2", 5), left("2", ksNull, 6)),
		},
	},
}

func TestKafkaStreamsTableTableJoins(t *testing.T) {
	for _, sc := range ksTableTableJoins {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

// TestKafkaStreamsTableTableMultiJoinsCached replays the nine multi-joins
// of TableTableJoinIntegrationTest with caching on: the whole input, out
// of order records included, committed after each record as Kafka
// Streams' test driver does, where the test checks only the last output,
// F-f-f at 4.
func TestKafkaStreamsTableTableMultiJoinsCached(t *testing.T) {
	ops := []string{"inner", "left", "outer"}
	names := map[string]string{"inner": "Inner", "left": "Left", "outer": "Outer"}
	for _, first := range ops {
		for _, second := range ops {
			var want [23][]string
			want[22] = out("0 F-f-f @4")
			sc := ksScenario{
				name:       "TableTableJoinIntegrationTest.test" + names[first] + names[second] + "(cacheEnabled=true)",
				build:      ttMultiJoin(first, second),
				commits:    true,
				lastPerKey: true,
				steps:      ttSteps(want),
			}
			t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
		}
	}
}
