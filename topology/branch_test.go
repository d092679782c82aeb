package topology_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// TestSplitRoutesToFirstMatchingBranch sends numbers through three
// branches and a default one: each goes to the first branch that accepts
// it, in the order the branches were added, exactly once.
func TestSplitRoutesToFirstMatchingBranch(t *testing.T) {
	b := topology.NewBuilder()
	num := func(v string) int { n, _ := strconv.Atoi(v); return n }
	branches := topology.Stream(b, "in", serde.String, serde.String).Split(topology.Named("by-size")).
		Branch("huge", func(_, v string) bool { return num(v) >= 1000 }).
		Branch("big", func(_, v string) bool { return num(v) >= 100 }).
		Branch("even", func(_, v string) bool { return num(v)%2 == 0 }).
		DefaultBranch("rest")
	require.Len(t, branches, 4)
	for name, s := range branches {
		s.To("out-"+name, serde.String, serde.String)
	}
	d, topo := start(t, b)
	in := strIn(d, "in")
	want := map[string][]string{}
	for _, n := range []int{5, 2000, 150, 12, 7, 1000, 100, 99, 4} {
		v := strconv.Itoa(n)
		require.NoError(t, in.Pipe("k"+v, v))
		switch {
		case n >= 1000:
			want["huge"] = append(want["huge"], v)
		case n >= 100:
			want["big"] = append(want["big"], v)
		case n%2 == 0:
			want["even"] = append(want["even"], v)
		default:
			want["rest"] = append(want["rest"], v)
		}
	}
	for name := range branches {
		var got []string
		for _, kv := range readKVs(t, d, "out-"+name, serde.String, serde.String) {
			require.Equal(t, "k"+kv.Value, kv.Key)
			got = append(got, kv.Value)
		}
		require.Equal(t, want[name], got, name)
	}
	desc := topo.Describe().String()
	require.Contains(t, desc, "Processor: by-size\n    --> by-size-huge, by-size-big, by-size-even, by-size-rest\n")
}

// TestSplitWithoutDefaultDropsTheRest: records no branch takes go nowhere.
func TestSplitWithoutDefaultDropsTheRest(t *testing.T) {
	b := topology.NewBuilder()
	br := topology.Stream(b, "in", serde.String, serde.String).Split().
		Branch("a", func(_, v string) bool { return strings.HasPrefix(v, "a") }).
		NoDefaultBranch()
	br["a"].To("out", serde.String, serde.String)
	d, _ := start(t, b)
	in := strIn(d, "in")
	for _, v := range []string{"apple", "banana", "avocado", "cherry"} {
		require.NoError(t, in.Pipe(v, v))
	}
	require.Equal(t, kvs[string, string]("apple", "apple", "avocado", "avocado"), readKVs(t, d, "out", serde.String, serde.String))
}

// TestRepartitionRekeysThroughANamedTopic: the re-keyed stream is written
// to <name>-repartition with the asked partition count and read back by a
// new sub-topology, whose GroupByKey then needs no second repartition.
func TestRepartitionRekeysThroughANamedTopic(t *testing.T) {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	byValue := topology.SelectKey(s, func(_, v string) string { return v }).
		Repartition(nil, nil, topology.Named("by-value"), topology.NumPartitions(7))
	byValue.GroupByKey(serde.String, serde.String).Count("counts").ToStream().To("out", serde.String, serde.Int64)
	d, topo := start(t, b)
	rt := graph.Of(topo)
	require.Equal(t, []graph.Repartition{{Topic: topology.TopicRef{Name: "by-value-repartition", Internal: true}, Partitions: 7, WriterSubTopology: 0}},
		rt.RepartitionTopics())
	require.Len(t, rt.SubTopologies(), 2)
	require.Equal(t, []topology.TopicRef{{Name: "by-value-repartition", Internal: true}}, rt.SubTopologies()[1].Sources)

	in := strIn(d, "in")
	for _, v := range []string{"x", "y", "x"} {
		require.NoError(t, in.Pipe("k", v))
	}
	require.Equal(t, kvs[string, int64]("x", int64(1), "y", int64(1), "x", int64(2)), readKVs(t, d, "out", serde.String, serde.Int64))
}

// TestRepartitionDefaultNameAndSerdes: without Named the topic is named
// after the node's id; a type without a default serde needs one given.
func TestRepartitionDefaultNameAndSerdes(t *testing.T) {
	b := topology.NewBuilder()
	topology.Stream(b, "in", serde.String, serde.String).Repartition(nil, nil).To("out", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	require.Equal(t, "repartition-1-repartition", graph.Of(topo).RepartitionTopics()[0].Topic.Name)

	b = topology.NewBuilder()
	s := topology.MapValues(topology.Stream(b, "in", serde.String, serde.String), func(_, v string) float64 { return 1 })
	s.Repartition(nil, nil, topology.Named("floats"))
	_, err = b.Build()
	require.ErrorContains(t, err, `sink "floats-repartition-sink": value serde is nil`)
}

// TestNameValidation: user-given names of nodes, stores and topics that
// Kafka could not take in a topic name, and duplicates, fail Build with
// errors naming them; default names are unchanged.
func TestNameValidation(t *testing.T) {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	s.Filter(func(string, string) bool { return true }, topology.Named("has space"))
	s.Peek(func(string, string) {}, topology.Named("ok.name_1"))
	s.Peek(func(string, string) {}, topology.Named("ok.name_1"))
	s.Repartition(nil, nil, topology.Named("a/b"))
	topology.GroupBy(s, func(_, v string) string { return v }, "grp:1", serde.String, serde.String).Count("störe")
	s.Split().Branch("x y", func(string, string) bool { return true }).Branch("x y", nil)
	s.GroupByKey(serde.String, serde.String).Count(strings.Repeat("n", 250))
	_, err := b.Build()
	require.Error(t, err)
	for _, want := range []string{
		`node name "has space" has the character ' '`,
		`node name "ok.name_1" is used twice`,
		`Repartition name "a/b" has the character '/'`,
		`GroupBy name "grp:1" has the character ':'`,
		`store name "störe" has the character 'ö'`,
		`branch name "x y" has the character ' '`,
		`processor "split-10": branch "x y" is added twice`,
		`processor "split-10-x y": predicate is nil`,
		`is longer than 249 characters`,
	} {
		require.ErrorContains(t, err, want)
	}

	// Default names: every existing scheme is kept, so that internal topics
	// named after nodes or stores keep their names across upgrades.
	b = topology.NewBuilder()
	s = topology.Stream(b, "in", serde.String, serde.String)
	topology.GroupBy(s, func(_, v string) string { return v }, "", serde.String, serde.String).Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	require.Equal(t, "counts-repartition", graph.Of(topo).RepartitionTopics()[0].Topic.Name)
}

// TestMergeNamed: the package-level Merge takes Named, and merges like the
// method.
func TestMergeNamed(t *testing.T) {
	b := topology.NewBuilder()
	x := topology.Stream(b, "x", serde.String, serde.String)
	y := topology.Stream(b, "y", serde.String, serde.String)
	topology.Merge([]topology.KStream[string, string]{x, y}, topology.Named("both")).To("out", serde.String, serde.String)
	d, topo := start(t, b)
	require.Contains(t, topo.Describe().String(), "Processor: both\n    --> sink-3\n    <-- source-0, source-1\n")
	require.NoError(t, strIn(d, "y").Pipe("k", "from-y"))
	require.NoError(t, strIn(d, "x").Pipe("k", "from-x"))
	require.Equal(t, kvs[string, string]("k", "from-y", "k", "from-x"), readKVs(t, d, "out", serde.String, serde.String))
}
