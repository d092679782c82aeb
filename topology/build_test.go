package topology_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

func noop() topology.Processor[string, string, string, string] {
	return &funcProc[string, string, string, string]{}
}

func TestBuildErrors(t *testing.T) {
	cases := []struct {
		name  string
		build func(b *topology.Builder)
		want  []string
	}{
		{"empty", func(*topology.Builder) {}, []string{"no nodes"}},
		{"unknown store", func(b *topology.Builder) {
			topology.Process(topology.Stream(b, "in", serde.String, serde.String), "proc", noop, "ghost")
		}, []string{`processor "proc" uses store "ghost", which is not declared`}},
		{"store in two sub-topologies", func(b *topology.Builder) {
			b.AddStore(topology.StoreInfo{Name: "shared"})
			topology.Process(topology.Stream(b, "a", serde.String, serde.String), "pa", noop, "shared")
			topology.Process(topology.Stream(b, "b", serde.String, serde.String), "pb", noop, "shared")
		}, []string{`store "shared" is used by processor "pa" in sub-topology 0 and by processor "pb" in sub-topology 1`}},
		{"DSL store used across a repartition", func(b *topology.Builder) {
			s := topology.Stream(b, "in", serde.String, serde.String)
			topology.GroupBy(s, func(_, v string) string { return v }, "g", serde.String, serde.String).Count("counts")
			topology.Process(s, "peek-counts", noop, "counts")
		}, []string{`store "counts" is used by processor "count-4" in sub-topology 1 and by processor "peek-counts" in sub-topology 0`}},
		{"topic read twice", func(b *topology.Builder) {
			topology.Stream(b, "in", serde.String, serde.String)
			topology.Table(b, "in", serde.String, serde.String, "t")
		}, []string{`topic "in" is read by two sources, "source-0" and "source-1"`}},
		{"repartition topic read twice", func(b *topology.Builder) {
			s := topology.Stream(b, "in", serde.String, serde.String)
			topology.GroupBy(s, func(_, v string) string { return v }, "same", serde.String, serde.String).Count("c1")
			topology.GroupBy(s, func(_, v string) string { return v }, "same", serde.String, serde.String).Count("c2")
		}, []string{`topic "same-repartition" is read by two sources`}},
		{"nil serdes", func(b *topology.Builder) {
			s := topology.Stream[string, string](b, "in", nil, serde.String)
			s.To("out", serde.String, nil, topology.Named("out-sink"))
			topology.Aggregate(s.GroupByKey(serde.String, serde.String), func() int64 { return 0 },
				func(string, string, int64) int64 { return 0 }, "agg", nil)
			topology.GroupBy(s, func(k, _ string) string { return k }, "g", nil, serde.String).Count("c")
		}, []string{
			`source "source-0": key serde is nil`,
			`sink "out-sink": value serde is nil`,
			`processor "aggregate-2": store "agg": value serde is nil`,
			`GroupBy "g" after source "source-0": key and value serdes must not be nil`,
		}},
		{"nil functions", func(b *topology.Builder) {
			s := topology.Stream(b, "in", serde.String, serde.String)
			s.Filter(nil)
			topology.Map[string, string, string, string](s, nil)
			s.GroupByKey(serde.String, serde.String).Reduce(nil, "r")
			topology.Process[string, string, string, string](s, "p", nil)
		}, []string{
			`processor "filter-1": predicate is nil`,
			`processor "map-2": function is nil`,
			`processor "reduce-3": reducer is nil`,
			`processor "p": processor supplier is nil`,
		}},
		{"duplicate store", func(b *topology.Builder) {
			g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			g.Count("dup")
			b.AddStore(topology.StoreInfo{Name: "dup"})
		}, []string{`store "dup" is declared twice (by processor "count-1" and by AddStore)`}},
		{"duplicate node name", func(b *topology.Builder) {
			s := topology.Stream(b, "in", serde.String, serde.String)
			s.Peek(func(string, string) {}, topology.Named("x"))
			topology.Process(s, "x", noop)
		}, []string{`node name "x" is used twice`}},
		{"unused store", func(b *topology.Builder) {
			topology.Stream(b, "in", serde.String, serde.String)
			b.AddStore(topology.StoreInfo{Name: "lonely"})
		}, []string{`store "lonely" is declared but no processor uses it`}},
		{"empty names", func(b *topology.Builder) {
			topology.Stream(b, "", serde.String, serde.String).To("", serde.String, serde.String)
			b.AddStore(topology.StoreInfo{})
		}, []string{`source "source-0": topic name is empty`, `sink "sink-1": topic name is empty`, "AddStore: store name is empty"}},
		{"merge across builders", func(b *topology.Builder) {
			other := topology.NewBuilder()
			topology.Stream(b, "a", serde.String, serde.String).Merge(topology.Stream(other, "b", serde.String, serde.String))
		}, []string{`processor "merge-1": merges a stream from another Builder`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := topology.NewBuilder()
			c.build(b)
			topo, err := b.Build()
			require.Nil(t, topo)
			require.Error(t, err)
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestBuildNumbersSubTopologiesInCreationOrder(t *testing.T) {
	b := topology.NewBuilder()
	a := topology.Stream(b, "a", serde.String, serde.String)
	c := topology.Stream(b, "c", serde.String, serde.String)
	// Sub-topology 0 is the one holding the first node, "a", even though
	// "c" joins it later through the merge.
	topology.Stream(b, "b", serde.String, serde.String).To("b-out", serde.String, serde.String)
	a.Merge(c).To("ac-out", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	subs := graph.Of(topo).SubTopologies()
	require.Len(t, subs, 2)
	require.Equal(t, 0, subs[0].ID)
	require.Equal(t, []topology.TopicRef{{Name: "a"}, {Name: "c"}}, subs[0].Sources)
	require.Equal(t, []topology.TopicRef{{Name: "ac-out"}}, subs[0].Sinks)
	require.Equal(t, 1, subs[1].ID)
	require.Equal(t, []topology.TopicRef{{Name: "b"}}, subs[1].Sources)

	// The topology is a snapshot: later use of the builder does not
	// change it.
	a.To("late", serde.String, serde.String)
	require.Len(t, graph.Of(topo).SubTopologies()[0].Sinks, 1)
	again, err := b.Build()
	require.NoError(t, err)
	require.Len(t, graph.Of(again).SubTopologies()[0].Sinks, 2)
}

func TestDescribeStructure(t *testing.T) {
	b := topology.NewBuilder()
	b.AddStore(topology.StoreInfo{Name: "scratch"})
	s := topology.Stream(b, "in", serde.String, serde.String)
	p := topology.Process(s, "enrich", noop, "scratch")
	p.To("out", serde.String, serde.String)
	s.To("copy", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)

	d := topo.Describe()
	require.Len(t, d.SubTopologies, 1)
	require.Equal(t, []topology.NodeDescription{
		{Name: "source-0", Kind: topology.SourceNode, Topic: topology.TopicRef{Name: "in"}, Children: []string{"enrich", "sink-3"}},
		{Name: "enrich", Kind: topology.ProcessorNode, Stores: []string{"scratch"}, Parents: []string{"source-0"}, Children: []string{"sink-2"}},
		{Name: "sink-2", Kind: topology.SinkNode, Topic: topology.TopicRef{Name: "out"}, Parents: []string{"enrich"}},
		{Name: "sink-3", Kind: topology.SinkNode, Topic: topology.TopicRef{Name: "copy"}, Parents: []string{"source-0"}},
	}, d.SubTopologies[0].Nodes)
	require.Equal(t, `Sub-topology 0
  Source: source-0 (topic: in)
    --> enrich, sink-3
  Processor: enrich (stores: scratch)
    --> sink-2
    <-- source-0
  Sink: sink-2 (topic: out)
    <-- enrich
  Sink: sink-3 (topic: copy)
    <-- source-0
  Store: scratch (in-memory, not logged)
`, d.String())
	require.Equal(t, d.String(), topo.Describe().String(), "Describe is stable")
}

func TestCheckCoPartitioning(t *testing.T) {
	b := topology.NewBuilder()
	x := topology.Stream(b, "x", serde.String, serde.String)
	y := topology.Stream(b, "y", serde.String, serde.String)
	merged := x.Merge(y)
	topology.GroupBy(merged, func(_, v string) string { return v }, "g", serde.String, serde.String).Count("c")
	topo, err := b.Build()
	require.NoError(t, err)

	cases := []struct {
		name  string
		parts map[string]int32
		want  []string
	}{
		{"equal", map[string]int32{"x": 4, "y": 4, "app-g-repartition": 8}, nil},
		{"different", map[string]int32{"x": 4, "y": 3, "app-g-repartition": 8},
			[]string{"sub-topology 0 reads topics with different partition counts", "x (4), y (3)"}},
		{"missing", map[string]int32{"x": 4, "y": 4},
			[]string{`sub-topology 1: partition count of topic "app-g-repartition" is unknown`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := graph.Of(topo).CheckCoPartitioning(c.parts, "app")
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}
