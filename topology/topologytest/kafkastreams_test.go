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

// The scenarios of the kafkastreams_*_test.go files replay Kafka Streams
// 3.9's own tests through the driver (runKS): each names the Kafka Streams
// test it comes from and holds that test's inputs, with their timestamps, and the outputs the test
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
