package topology

import "github.com/eddystreams/eddy/internal/graph"

// Header is a Kafka record header: a string key and a byte value. Records
// carry their headers from source to sink unless a processor changes them.
type Header = graph.Header

// StoreInfo declares a state store (see Builder.AddStore): Name names it
// (and its changelog, "<app>-<Name>-changelog"); Persistent stores live on
// disk (badger), others in memory; Logged stores are backed by a changelog
// topic, so that they survive the loss of their instance.
type StoreInfo = graph.StoreInfo

// StoreKind says what keys a store holds (StoreInfo.Kind): plain keys, or
// the composite keys of a window or session store, which the runtime keeps
// bounded by StoreInfo.Retention and logs to a changelog deleted by time.
type StoreKind = graph.StoreKind

// The kinds of store.
const (
	KeyValueKind = graph.KeyValue
	WindowKind   = graph.Window
	SessionKind  = graph.Session
	// VersionedKind stores hold a table's versions (see Versioned).
	VersionedKind = graph.Versioned
)

// TopicRef names a topic in a TopologyDescription: Name as the user gave
// it, and Internal for repartition topics, whose name on the broker is
// "<app>-<Name>" (see FullName).
type TopicRef = graph.TopicRef

// runtimeView is a Topology as the runtime sees it (graph.Topology), a
// type of its own so that these methods stay out of the user API.
type runtimeView Topology

// Graph returns the topology as the runtime drives it. Its argument is a
// type users cannot name: Eddy's own packages call it through graph.Of.
func (t *Topology) Graph(graph.Key) graph.Topology { return (*runtimeView)(t) }
