package topology

import (
	"strconv"

	"github.com/eddystreams/eddy/serde"
)

// BranchedStream is a stream being split into named branches by Split.
// Add branches with Branch and finish with DefaultBranch or NoDefaultBranch,
// which return the branches by name.
type BranchedStream[K, V any] struct {
	b        *Builder
	n        *node
	parent   KStream[K, V]
	names    []string
	preds    []func(K, V) bool
	branches map[string]KStream[K, V]
	done     bool
}

// Split starts splitting s into branches: each record goes to the first
// branch, in the order they were added, whose predicate accepts it, else
// to the default branch if there is one, else nowhere. Named names the
// split node (default "split-<n>"); each branch is a node named
// "<split node>-<branch>", which is what Describe shows.
func (s KStream[K, V]) Split(opts ...Option) *BranchedStream[K, V] {
	b := s.builder()
	n := b.addNode(kindProcessor, "split", collect(opts), s.n)
	bs := &BranchedStream[K, V]{b: b, n: n, parent: s, branches: make(map[string]KStream[K, V])}
	bs.setProc()
	return bs
}

// setProc gives the split node a processor over the branches added so
// far, copied so that later Branch calls do not change a built topology.
func (bs *BranchedStream[K, V]) setProc() {
	preds := append([]func(K, V) bool(nil), bs.preds...)
	bs.n.newProc = func() (procImpl, error) {
		return statelessProc(func(c *nodeInstance, r record) error {
			// The branch nodes are the split node's only children, in
			// the order of preds.
			k, v := as[K](r.key), as[V](r.value)
			for i, p := range preds {
				if p == nil || p(k, v) {
					return c.children[i].process(r)
				}
			}
			return nil
		}), nil
	}
}

// Branch adds the branch name, taking the records pred accepts that no
// earlier branch took. Branch names must be unique within the split.
func (bs *BranchedStream[K, V]) Branch(name string, pred func(K, V) bool) *BranchedStream[K, V] {
	n := bs.add(name)
	bs.b.checkFunc(n, pred == nil, "predicate")
	if pred == nil {
		// Keep the node's processor well-formed; Build fails anyway.
		pred = func(K, V) bool { return false }
	}
	bs.preds = append(bs.preds, pred)
	bs.setProc()
	return bs
}

func (bs *BranchedStream[K, V]) add(name string) *node {
	if bs.done {
		bs.b.errorf("%s: branch %q added after the default branch or NoDefaultBranch", bs.n.label(), name)
	}
	if name == "" {
		name = strconv.Itoa(len(bs.names))
	}
	bs.b.checkName("branch", name)
	n := bs.b.addStateless("branch", options{name: bs.n.name + "-" + name, derived: true}, func(c *nodeInstance, r record) error {
		return c.forward(r)
	}, bs.n)
	if _, dup := bs.branches[name]; dup {
		bs.b.errorf("%s: branch %q is added twice", bs.n.label(), name)
	}
	bs.names = append(bs.names, name)
	bs.branches[name] = KStream[K, V]{b: bs.b, n: n, keyChanged: bs.parent.keyChanged}
	return n
}

// DefaultBranch adds the branch name, taking every record no other branch
// took, and returns all branches by name.
func (bs *BranchedStream[K, V]) DefaultBranch(name string) map[string]KStream[K, V] {
	bs.add(name)
	bs.preds = append(bs.preds, nil)
	bs.setProc()
	bs.done = true
	return bs.branches
}

// NoDefaultBranch returns all branches by name; records no branch takes
// are dropped.
func (bs *BranchedStream[K, V]) NoDefaultBranch() map[string]KStream[K, V] {
	bs.done = true
	return bs.branches
}

// Repartition writes s through the repartition topic
// "<app>-<name>-repartition" and continues from it in a new sub-topology,
// so that records are spread over partitions by their current key (after
// Map or SelectKey, say) before stateful work, or over a different number
// of partitions. name is the name given with Named, else the generated
// "repartition-<n>"; give one to keep the topic stable as the topology
// changes. NumPartitions sets the topic's partition count (default: that
// of the sub-topology writing it). keySerde and valueSerde encode the
// topic; either may be nil when its type is string, []byte or int64, for
// which serde.String, serde.Bytes and serde.Int64 are used. Grouping the
// result by key needs no further repartitioning. Records without a key are
// dropped, as Kafka Streams drops them, unless a left or outer join
// downstream keeps them (KIP-962).
func (s KStream[K, V]) Repartition(keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...Option) KStream[K, V] {
	b := s.builder()
	o := collect(opts)
	if keySerde == nil {
		keySerde = defaultSerde[K]()
	}
	if valueSerde == nil {
		valueSerde = defaultSerde[V]()
	}
	name := o.name
	if name == "" {
		// The id the node would get, so that the generated name follows
		// the same scheme as other nodes'.
		name = "repartition-" + strconv.Itoa(len(b.nodes))
	}
	topic := TopicRef{Name: name + "-repartition", Internal: true}
	b.checkName("Repartition", name)
	sink := addSink(b, s.n, topic, keySerde, valueSerde, options{name: topic.Name + "-sink", derived: true})
	sink.partitions = o.partitions
	if o.partitions < 0 {
		b.errorf("%s: partition count %d is negative", sink.label(), o.partitions)
	}
	src := addSource(b, topic, keySerde, valueSerde, options{name: topic.Name + "-source", derived: true})
	return KStream[K, V]{b: b, n: src}
}

// defaultSerde returns the serde of package serde for T when there is an
// obvious one, else nil.
func defaultSerde[T any]() serde.Serde[T] {
	var s any
	switch any(zero[T]()).(type) {
	case string:
		s = serde.String
	case []byte:
		s = serde.Bytes
	case int64:
		s = serde.Int64
	default:
		return nil
	}
	return s.(serde.Serde[T])
}
