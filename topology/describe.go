package topology

import (
	"fmt"
	"strings"
)

// NodeKind tells sources, processors and sinks apart in a description.
type NodeKind int

const (
	// SourceNode reads a topic.
	SourceNode NodeKind = iota
	// ProcessorNode transforms records, possibly with stores.
	ProcessorNode
	// SinkNode writes a topic.
	SinkNode
)

func (k NodeKind) String() string {
	switch k {
	case SourceNode:
		return "Source"
	case ProcessorNode:
		return "Processor"
	case SinkNode:
		return "Sink"
	}
	return fmt.Sprintf("NodeKind(%d)", int(k))
}

// NodeDescription describes one node.
type NodeDescription struct {
	Name string
	Kind NodeKind
	// Topic is the topic a source reads or a sink writes.
	Topic TopicRef
	// Stores lists the stores a processor uses.
	Stores   []string
	Parents  []string
	Children []string
}

// SubTopologyDescription describes one sub-topology.
type SubTopologyDescription struct {
	ID     int
	Nodes  []NodeDescription // in creation order
	Stores []StoreInfo
}

// GlobalStoreDescription describes a global table: its store, the topic
// every instance reads into it, and the nodes that read it (joins and
// processors).
type GlobalStoreDescription struct {
	Store   StoreInfo
	Topic   string
	Readers []string
}

// TopologyDescription describes a topology; its String method prints it.
type TopologyDescription struct {
	SubTopologies []SubTopologyDescription
	// GlobalStores are read by every instance and belong to no
	// sub-topology: they generate no tasks.
	GlobalStores []GlobalStoreDescription
}

// Describe returns the structure of the topology: its sub-topologies, their
// nodes with their edges, topics and stores.
func (t *Topology) Describe() TopologyDescription {
	var d TopologyDescription
	for _, st := range t.subs {
		sd := SubTopologyDescription{ID: st.info.ID, Stores: append([]StoreInfo(nil), st.info.Stores...)}
		for _, n := range st.nodes {
			nd := NodeDescription{Name: n.name, Kind: NodeKind(n.kind), Stores: append([]string(nil), n.stores...)}
			if n.kind != kindProcessor {
				nd.Topic = n.topic
			}
			for _, p := range n.parents {
				nd.Parents = append(nd.Parents, p.name)
			}
			for _, c := range n.children {
				nd.Children = append(nd.Children, c.name)
			}
			sd.Nodes = append(sd.Nodes, nd)
		}
		d.SubTopologies = append(d.SubTopologies, sd)
	}
	for _, gt := range t.globals {
		d.GlobalStores = append(d.GlobalStores, GlobalStoreDescription{Store: gt.info, Topic: gt.topic, Readers: append([]string(nil), gt.readers...)})
	}
	return d
}

// String prints the description, one sub-topology after another, each node
// followed by its children ("-->") and parents ("<--"). Internal topics are
// shown without the application prefix.
func (d TopologyDescription) String() string {
	var sb strings.Builder
	for i, st := range d.SubTopologies {
		if i > 0 {
			sb.WriteByte('\n')
		}
		fmt.Fprintf(&sb, "Sub-topology %d\n", st.ID)
		for _, n := range st.Nodes {
			fmt.Fprintf(&sb, "  %s: %s", n.Kind, n.Name)
			switch n.Kind {
			case SourceNode, SinkNode:
				fmt.Fprintf(&sb, " (topic: %s", n.Topic.Name)
				if n.Topic.Internal {
					sb.WriteString(", internal")
				}
				sb.WriteByte(')')
			default:
				if len(n.Stores) > 0 {
					fmt.Fprintf(&sb, " (stores: %s)", strings.Join(n.Stores, ", "))
				}
			}
			sb.WriteByte('\n')
			if len(n.Children) > 0 {
				fmt.Fprintf(&sb, "    --> %s\n", strings.Join(n.Children, ", "))
			}
			if len(n.Parents) > 0 {
				fmt.Fprintf(&sb, "    <-- %s\n", strings.Join(n.Parents, ", "))
			}
		}
		for _, s := range st.Stores {
			kind := "in-memory"
			if s.Persistent {
				kind = "persistent"
			}
			logged := "not logged"
			if s.Logged {
				logged = "logged"
			}
			if s.Windowed() {
				fmt.Fprintf(&sb, "  Store: %s (%s, %s, %s, retention %d ms)\n", s.Name, kind, logged, s.Kind, s.Retention)
				continue
			}
			if s.Kind == VersionedKind {
				fmt.Fprintf(&sb, "  Store: %s (%s, %s, versioned, history %d ms)\n", s.Name, kind, logged, s.Retention)
				continue
			}
			fmt.Fprintf(&sb, "  Store: %s (%s, %s)\n", s.Name, kind, logged)
		}
	}
	for _, g := range d.GlobalStores {
		kind := "in-memory"
		if g.Store.Persistent {
			kind = "persistent"
		}
		fmt.Fprintf(&sb, "\nGlobal store %s (%s, topic: %s, every partition, no tasks)\n", g.Store.Name, kind, g.Topic)
		if len(g.Readers) > 0 {
			fmt.Fprintf(&sb, "    --> %s\n", strings.Join(g.Readers, ", "))
		}
	}
	return sb.String()
}
