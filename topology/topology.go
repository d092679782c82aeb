package topology

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/eddystreams/eddy/internal/graph"
)

// Topology is a built, immutable processor graph split into sub-topologies.
// Hand it to the runtime to run it; inspect it with Describe.
type Topology struct {
	nodes []*node
	subs  []*subTopology
	// storeSub maps each store to the sub-topology that owns it.
	storeSub map[string]int
	// globals are the global tables, each read by every instance.
	globals []*globalTable
}

type subTopology struct {
	nodes []*node // in creation order
	info  graph.SubTopology
}

// Build checks the graph and splits it into sub-topologies: the connected
// components of the graph once repartition (and all other) topics are cut,
// each holding its sources, processors, stores and sinks. Sub-topologies
// are numbered from 0 in the order their first node was created, so the
// same program always yields the same numbering.
//
// Build reports every problem it finds, each naming the node and the store
// or topic concerned. The Builder may be used further; a later Build
// includes the later additions.
func (b *Builder) Build() (*Topology, error) {
	errs := slices.Clone(b.errs)
	nodes := cloneGraph(b.nodes)

	if len(nodes) == 0 {
		errs = append(errs, errors.New("topology: the topology has no nodes; add a source with Stream or Table"))
	}
	byName := make(map[string]*node)
	readers := make(map[TopicRef]*node)
	declared := make(map[string]bool)
	for _, s := range b.stores {
		declared[s.Name] = true
	}
	globalReaders := b.takeGlobalStores(nodes)
	for _, n := range nodes {
		if prev, dup := byName[n.name]; dup {
			errs = append(errs, fmt.Errorf("topology: node name %q is used twice (nodes %d and %d)", n.name, prev.id, n.id))
		} else {
			byName[n.name] = n
		}
		if n.kind == kindSource {
			if prev, dup := readers[n.topic]; dup {
				errs = append(errs, fmt.Errorf("topology: topic %q is read by two sources, %q and %q", n.topic.Name, prev.name, n.name))
			} else {
				readers[n.topic] = n
			}
		}
		for _, s := range n.stores {
			if !declared[s] {
				errs = append(errs, fmt.Errorf("topology: %s uses store %q, which is not declared (use Builder.AddStore)", n.label(), s))
			}
		}
	}

	useKeyOnlyDecodes(nodes)
	filterNullKeys(nodes, readers)
	errs = append(errs, b.checkGlobals(nodes)...)
	t := &Topology{nodes: nodes, storeSub: make(map[string]int)}
	for _, gt := range b.globals {
		c := *gt
		c.readers = append(slices.Clone(gt.readers), globalReaders[gt.info.Name]...)
		t.globals = append(t.globals, &c)
	}
	t.split()

	// A store lives in one task; processors in different sub-topologies run
	// in different tasks and cannot share it.
	storeUser := make(map[string]*node)
	for _, n := range nodes {
		for _, s := range n.stores {
			sub := t.subOf(n)
			if first, ok := storeUser[s]; ok && t.subOf(first) != sub {
				errs = append(errs, fmt.Errorf("topology: store %q is used by %s in sub-topology %d and by %s in sub-topology %d; a store must stay within one sub-topology",
					s, first.label(), t.subOf(first), n.label(), sub))
				continue
			}
			if _, ok := storeUser[s]; !ok {
				storeUser[s] = n
				t.storeSub[s] = sub
			}
		}
	}
	for _, s := range b.stores {
		if _, used := storeUser[s.Name]; !used {
			errs = append(errs, fmt.Errorf("topology: store %q is declared but no processor uses it", s.Name))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	t.fillInfo(b.stores)
	return t, nil
}

// cloneGraph copies the nodes and their edges so that a Topology is not
// affected by later use of its Builder.
func cloneGraph(nodes []*node) []*node {
	out := make([]*node, len(nodes))
	for i, n := range nodes {
		c := *n
		c.stores = slices.Clone(n.stores)
		c.globals = slices.Clone(n.globals)
		out[i] = &c
	}
	for _, c := range out {
		c.parents = remap(c.parents, out)
		c.children = remap(c.children, out)
		if c.joins != nil {
			c.joins = out[c.joins.id]
		}
	}
	return out
}

// useKeyOnlyDecodes gives each source that has a keyOnlyDecode, and only
// keyOnly children, that decode.
func useKeyOnlyDecodes(nodes []*node) {
	for _, n := range nodes {
		if n.kind != kindSource || n.keyOnlyDecode == nil || n.extract != nil || len(n.children) == 0 {
			continue
		}
		if !slices.ContainsFunc(n.children, func(c *node) bool { return !c.keyOnly }) {
			n.decode = n.keyOnlyDecode
		}
	}
}

// filterNullKeys makes every sink writing a topic the topology reads
// itself (a repartition) drop keyless records, unless a join that keeps
// them lies downstream of the topic: a keyless record has no partition to
// go to, and only a left or outer join has anything to do with it.
func filterNullKeys(nodes []*node, readers map[TopicRef]*node) {
	relaxed := make(map[*node]bool)
	var below func(n *node) bool
	below = func(n *node) bool {
		if r, done := relaxed[n]; done {
			return r
		}
		relaxed[n] = false // a cycle through topics adds nothing
		r := n.relaxedNullKeys
		if src, ok := readers[n.topic]; ok && n.kind == kindSink && n.topic.Internal {
			r = below(src)
		}
		for _, c := range n.children {
			r = below(c) || r
		}
		relaxed[n] = r
		return r
	}
	for _, n := range nodes {
		if src, ok := readers[n.topic]; ok && n.kind == kindSink && n.topic.Internal {
			n.dropNullKeys = !below(src)
		}
	}
}

func remap(ns []*node, to []*node) []*node {
	out := make([]*node, len(ns))
	for i, n := range ns {
		out[i] = to[n.id]
	}
	return out
}

// split groups nodes into connected components and numbers them by their
// first node.
func (t *Topology) split() {
	parent := make([]int, len(t.nodes))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(x, y *node) {
		a, b := find(x.id), find(y.id)
		// Keep the smaller id as the root so roots are first nodes.
		if a < b {
			parent[b] = a
		} else {
			parent[a] = b
		}
	}
	for _, n := range t.nodes {
		for _, c := range n.children {
			union(n, c)
		}
		if n.joins != nil {
			union(n, n.joins)
		}
	}
	subOfRoot := make(map[int]*subTopology)
	for _, n := range t.nodes {
		r := find(n.id)
		st, ok := subOfRoot[r]
		if !ok {
			st = &subTopology{info: graph.SubTopology{ID: len(t.subs)}}
			subOfRoot[r] = st
			t.subs = append(t.subs, st)
		}
		st.nodes = append(st.nodes, n)
		n.sub = st.info.ID
	}
}

func (t *Topology) subOf(n *node) int { return n.sub }

func (t *Topology) fillInfo(stores []StoreInfo) {
	for _, st := range t.subs {
		info := &st.info
		for _, n := range st.nodes {
			switch n.kind {
			case kindSource:
				info.Sources = append(info.Sources, n.topic)
			case kindSink:
				if !slices.Contains(info.Sinks, n.topic) {
					info.Sinks = append(info.Sinks, n.topic)
				}
			}
		}
		info.CoPartitioned = slices.Clone(info.Sources)
		for _, s := range stores {
			if sub, ok := t.storeSub[s.Name]; ok && sub == info.ID {
				info.Stores = append(info.Stores, s)
			}
		}
	}
}

// SubTopologies describes every sub-topology; element i has ID i.
func (t *runtimeView) SubTopologies() []graph.SubTopology {
	out := make([]graph.SubTopology, len(t.subs))
	for i, st := range t.subs {
		out[i] = graph.SubTopology{
			ID:            st.info.ID,
			Sources:       slices.Clone(st.info.Sources),
			Sinks:         slices.Clone(st.info.Sinks),
			Stores:        slices.Clone(st.info.Stores),
			CoPartitioned: slices.Clone(st.info.CoPartitioned),
		}
	}
	return out
}

// RepartitionTopics lists the repartition topics the runtime must create,
// in the order they were created.
func (t *runtimeView) RepartitionTopics() []graph.Repartition {
	var out []graph.Repartition
	seen := make(map[TopicRef]bool)
	for _, st := range t.subs {
		for _, n := range st.nodes {
			if n.kind != kindSink || !n.topic.Internal || seen[n.topic] {
				continue
			}
			seen[n.topic] = true
			out = append(out, graph.Repartition{Topic: n.topic, Partitions: n.partitions, WriterSubTopology: st.info.ID})
		}
	}
	return out
}

// SourceTopics returns the full names of all topics the application app
// reads, sorted: the topics its consumer subscribes to.
func (t *runtimeView) SourceTopics(app string) []string {
	var out []string
	for _, st := range t.subs {
		for _, r := range st.info.Sources {
			out = append(out, r.FullName(app))
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// StoreSubTopology returns the ID of the sub-topology that owns store, so
// that a key's partition can be turned into the task holding it.
func (t *runtimeView) StoreSubTopology(store string) (int, bool) {
	id, ok := t.storeSub[store]
	return id, ok
}

// CheckCoPartitioning checks that the source topics of every sub-topology
// have equal partition counts, since each task reads the same partition of
// all of them. partitions maps full topic names to partition counts and
// must hold every source topic, internal ones included. The error names
// each offending sub-topology and its topics with their counts.
func (t *runtimeView) CheckCoPartitioning(partitions map[string]int32, app string) error {
	var errs []error
	for _, st := range t.subs {
		var parts []string
		counts := make(map[int32]bool)
		for _, r := range st.info.CoPartitioned {
			name := r.FullName(app)
			n, ok := partitions[name]
			if !ok {
				errs = append(errs, fmt.Errorf("topology: sub-topology %d: partition count of topic %q is unknown", st.info.ID, name))
				continue
			}
			counts[n] = true
			parts = append(parts, fmt.Sprintf("%s (%d)", name, n))
		}
		if len(counts) > 1 {
			errs = append(errs, fmt.Errorf("topology: sub-topology %d reads topics with different partition counts, which must be equal: %s",
				st.info.ID, strings.Join(parts, ", ")))
		}
	}
	return errors.Join(errs...)
}
