// Package graph is a built topology as the runtime drives it: the records a
// task takes in and sends out, the environment a task gives its processor
// graph, the sub-topologies with their topics and stores, and the
// repartition topics to create.
//
// Users never see this package. Package topology declares what they use
// (Header, StoreInfo, TopicRef are aliases of the types here, so that a
// user's Record and a task's InputRecord share their headers without a
// copy), and its Topology is a Built: the runtime, internal/taskrun and
// topologytest reach the view through Of.
package graph

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/eddystreams/eddy/statestore"
)

// Built is a built topology, a *topology.Topology: package topology
// imports this one, so it is named here by what it offers.
type Built interface {
	// Graph returns the view of the topology the runtime drives.
	Graph(Key) Topology
}

// Key is the argument of Built.Graph. Only packages of this module can
// name it, so only they can ask a topology for its view: the method stays
// out of reach of users, whose API is package topology's.
type Key struct{ _ struct{} }

// Of returns the runtime's view of topo.
func Of(topo Built) Topology { return topo.Graph(Key{}) }

// Topology is what the runtime asks of a built topology.
type Topology interface {
	// SubTopologies describes every sub-topology; element i has ID i.
	SubTopologies() []SubTopology
	// RepartitionTopics lists the repartition topics to create, in the
	// order they were created.
	RepartitionTopics() []Repartition
	// SourceTopics returns the full names of all topics application app
	// reads, sorted: the topics its consumers subscribe to.
	SourceTopics(app string) []string
	// GlobalStores lists the global stores: each is read in full from its
	// topic by every instance, belongs to no task, and is handed to the
	// tasks whose joins read it through TaskEnv.Store.
	GlobalStores() []GlobalStore
	// StoreSubTopology returns the ID of the sub-topology that owns store,
	// so that a key's partition can be turned into the task holding it.
	StoreSubTopology(store string) (int, bool)
	// CheckCoPartitioning checks that the source topics of every
	// sub-topology have equal partition counts, since each task reads the
	// same partition of all of them. partitions maps full topic names to
	// partition counts and must hold every source topic, internal ones
	// included. The error names each offending sub-topology and its
	// topics with their counts.
	CheckCoPartitioning(partitions map[string]int32, app string) error
	// NewTaskGraph instantiates sub-topology id for one task: a fresh
	// processor from every supplier, the task's stores from env, and each
	// processor's Init, in creation order. If an Init fails, the
	// processors already initialized are closed.
	NewTaskGraph(id int, env TaskEnv) (TaskGraph, error)
}

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// InputRecord is a raw record read from a source topic, handed to a task.
type InputRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	Headers   []Header
	Key       []byte
	Value     []byte
}

// OutputRecord is a serialized record a sink emits. Topic is the full topic
// name (internal topics already carry the application prefix). Key and
// Value are read-only: they may be a string's own bytes.
type OutputRecord struct {
	Topic     string
	Key       []byte
	Value     []byte
	Timestamp time.Time
	Headers   []Header
}

// TaskEnv is what the runtime provides to one task's processor graph.
type TaskEnv interface {
	// AppID is the application ID that prefixes internal topic names.
	AppID() string
	// TaskID is the task's "<subtopology>_<partition>" name.
	TaskID() string
	// Partition is the task's partition.
	Partition() int32
	// Store returns the byte-level store the task opened for a store the
	// sub-topology declared, or a global store (read-only) that one of
	// its joins reads.
	Store(name string) (statestore.ReadWriter, error)
	// Send emits a record to a sink topic. The runtime chooses the
	// partition the way Kafka's default partitioner does
	// (topology.Partition).
	Send(rec OutputRecord) error
	// Now is the wall clock, an environment's own so that test drivers
	// can control it.
	Now() time.Time
}

// TableBuffering is an optional interface of TaskEnv. When BufferTableUpdates
// reports true, tables do not forward each update as it happens: repeated
// updates of a key between two commits collapse, and TaskGraph.Flush forwards
// the latest value of each updated key (Kafka Streams' behaviour with record
// caching on). Otherwise every update is forwarded at once.
type TableBuffering interface {
	BufferTableUpdates() bool
}

// Discarder is implemented by task graphs that hold, between commits, what
// the input since the last commit produced (the combiners' partial
// aggregates, the table updates held until Flush) or where it took them
// (stream time). The runtime calls Committed when a commit has completed,
// its store writes included, and Discard when the input since then is to
// be processed again without a commit (an aborted transaction), after which
// the graph stands as it did at Committed, so that the input is neither
// counted twice nor judged by a time it has not reached yet. Discard comes
// before the stores' caches drop their writes; the graph must read nothing
// from its stores in it.
type Discarder interface {
	Committed()
	Discard()
}

// TaskLogger is implemented by task environments that give the task graph
// a logger for what it reports on its own (late records dropped); without
// it, the graph logs to slog's default logger.
type TaskLogger interface {
	Logger() *slog.Logger
}

// LateCounter is implemented by task graphs that drop late records: a
// windowed aggregation leaves a record out of every window of its that has
// closed (window end plus grace at or before stream time).
type LateCounter interface {
	// DroppedLate counts the records the task left out of at least one
	// window for being late.
	DroppedLate() int64
}

// JoinDropCounter is implemented by task graphs whose stream-table joins
// drop stream records with a null key or value, which cannot be joined.
type JoinDropCounter interface {
	// DroppedJoinRecords counts the records the task's joins dropped for
	// a null key or value.
	DroppedJoinRecords() int64
}

// TaskGraph is one task's instance of a sub-topology's processors.
type TaskGraph interface {
	// Process runs one input record through the graph. Errors from
	// deserialization are returned as *topology.DeserializationError.
	Process(rec InputRecord) error
	// Punctuate runs wall-clock punctuators that are due at now and
	// stream-time punctuators that are due at the task's stream time.
	Punctuate(now time.Time) error
	// Punctuations counts the punctuator calls Punctuate made so far.
	Punctuations() int64
	// NextWallClock is when the earliest of the graph's wall-clock
	// punctuators is next due; false without one. Stream-time
	// punctuators fall due only as processed records move stream time.
	NextWallClock() (time.Time, bool)
	// Flush forwards the latest value of every table key updated since
	// the last Flush, when the task buffers table updates (see
	// TableBuffering); otherwise it does nothing. The runtime calls it at
	// every commit, before collecting the stores' changelog writes.
	Flush() error
	// Close calls Close on every processor.
	Close() error
}

// TopicRef names a topic a sub-topology reads or writes. Internal topics
// (repartition topics) are named without the application prefix; their full
// name is InternalTopicName(app, Name).
type TopicRef struct {
	Name     string
	Internal bool
}

// FullName returns the topic's name on the broker for application app.
func (r TopicRef) FullName(app string) string {
	if r.Internal {
		return InternalTopicName(app, r.Name)
	}
	return r.Name
}

// InternalTopicName is "<app>-<name>", the name of an internal topic.
func InternalTopicName(app, name string) string { return app + "-" + name }

// StoreInfo describes a state store: its name, whether it lives on disk,
// whether a changelog backs it, and, for window and session stores, the
// layout and retention the runtime needs to bound them.
type StoreInfo struct {
	Name string
	// Persistent stores live on disk (badger); others in memory.
	Persistent bool
	// Logged stores are backed by a changelog topic.
	Logged bool
	// Kind is what the store's keys are. Window and session stores are
	// wrapped in a statestore.SegmentedStore wherever they are opened, and
	// their changelogs are compacted and deleted by time. Versioned stores
	// are opened and logged as key-value stores, their keys laid out by
	// statestore.VersionedStore.
	Kind StoreKind
	// Retention, SegmentInterval and WindowSize, in milliseconds, are the
	// statestore.WindowOptions of a window or session store (see
	// WindowOptions); Retention is also a versioned store's history
	// retention (VersionedOptions). Unused for key-value stores.
	Retention, SegmentInterval, WindowSize int64
	// Timestamped stores hold statestore timestamped values (see
	// statestore.AppendTimestamped): each value with the timestamp of the
	// result it stands for.
	Timestamped bool
}

// StoreKind is the kind of keys a store holds.
type StoreKind int

const (
	// KeyValue stores hold plain keys.
	KeyValue StoreKind = iota
	// Window stores hold statestore.WindowStore keys.
	Window
	// Session stores hold statestore.SessionStore keys.
	Session
	// Versioned stores hold statestore.VersionedStore keys.
	Versioned
)

func (k StoreKind) String() string {
	switch k {
	case KeyValue:
		return "key-value"
	case Window:
		return "window"
	case Session:
		return "session"
	case Versioned:
		return "versioned"
	}
	return "StoreKind(" + strconv.Itoa(int(k)) + ")"
}

// Windowed reports whether the store is a window or session store.
func (s StoreInfo) Windowed() bool { return s.Kind == Window || s.Kind == Session }

// WindowOptions are the options of a window or session store.
func (s StoreInfo) WindowOptions() statestore.WindowOptions {
	return statestore.WindowOptions{Retention: s.Retention, SegmentInterval: s.SegmentInterval, WindowSize: s.WindowSize}
}

// VersionedOptions are the options of a versioned store.
func (s StoreInfo) VersionedOptions() statestore.VersionedOptions {
	return statestore.VersionedOptions{HistoryRetention: s.Retention}
}

// SubTopology describes one sub-topology: its sources, sinks and stores.
// Every task of the sub-topology reads partition p of every source topic.
type SubTopology struct {
	ID      int
	Sources []TopicRef
	Sinks   []TopicRef
	Stores  []StoreInfo
	// CoPartitioned lists source topics that must have equal partition
	// counts (all sources of a sub-topology, in practice).
	CoPartitioned []TopicRef
}

// GlobalStore is a global table's store and the topic it is read from (a
// user topic, all of its partitions). Its Info is never Logged: the topic
// is its source of truth.
type GlobalStore struct {
	Store StoreInfo
	Topic string
}

// Repartition describes a repartition topic the runtime must create.
type Repartition struct {
	Topic TopicRef
	// Partitions is the count the user asked for, or 0 to use the
	// partition count of the sub-topology that writes it.
	Partitions int32
	// WriterSubTopology is the ID of the sub-topology that writes it.
	WriterSubTopology int
}
