package topology

import (
	"strconv"
	"time"

	"github.com/eddystreams/eddy/statestore"
)

// This file is the surface the runtime drives a topology through. Users do
// not need it: they build topologies with a Builder and hand them to the
// runtime.

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
// name (internal topics already carry the application prefix).
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
	// sub-topology declared.
	Store(name string) (statestore.ReadWriter, error)
	// Send emits a record to a sink topic. The runtime chooses the
	// partition the way Kafka's default partitioner does (see Partition).
	Send(rec OutputRecord) error
	// Now is the wall clock (a seam for tests).
	Now() time.Time
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

// StoreInfo describes a state store a sub-topology owns.
type StoreInfo struct {
	Name string
	// Persistent stores live on disk (badger); others in memory.
	Persistent bool
	// Logged stores are backed by a changelog topic.
	Logged bool
}

// SubTopologyInfo describes one sub-topology: its sources, sinks and stores.
// Every task of the sub-topology reads partition p of every source topic.
type SubTopologyInfo struct {
	ID      int
	Sources []TopicRef
	Sinks   []TopicRef
	Stores  []StoreInfo
	// CoPartitioned lists source topics that must have equal partition
	// counts (all sources of a sub-topology, in practice).
	CoPartitioned []TopicRef
}

// RepartitionInfo describes a repartition topic the runtime must create.
type RepartitionInfo struct {
	Topic TopicRef
	// Partitions is the count the user asked for, or 0 to use the
	// partition count of the sub-topology that writes it.
	Partitions int32
	// WriterSubTopology is the ID of the sub-topology that writes it.
	WriterSubTopology int
}

// TaskGraph is one task's instance of a sub-topology's processors.
type TaskGraph interface {
	// Process runs one input record through the graph. Errors from
	// deserialization are returned as *DeserializationError.
	Process(rec InputRecord) error
	// Punctuate runs wall-clock punctuators that are due at now and
	// stream-time punctuators that are due at the task's stream time.
	Punctuate(now time.Time) error
	// Punctuations counts the punctuator calls Punctuate made so far.
	Punctuations() int64
	// Flush forwards the latest value of every table key updated since
	// the last Flush, when the task buffers table updates (see
	// TableBuffering); otherwise it does nothing. The runtime calls it at
	// every commit, before collecting the stores' changelog writes.
	Flush() error
	// Close calls Close on every processor.
	Close() error
}

// TableBuffering is an optional interface of TaskEnv. When BufferTableUpdates
// reports true, tables do not forward each update as it happens: repeated
// updates of a key between two commits collapse, and TaskGraph.Flush forwards
// the latest value of each updated key (Kafka Streams' behaviour with record
// caching on). Otherwise every update is forwarded at once.
type TableBuffering interface {
	BufferTableUpdates() bool
}

// DeserializationError reports an input record that could not be decoded.
type DeserializationError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *DeserializationError) Error() string {
	return "topology: cannot deserialize record at " + e.Topic + "/" +
		strconv.Itoa(int(e.Partition)) + "@" + strconv.FormatInt(e.Offset, 10) + ": " + e.Err.Error()
}

func (e *DeserializationError) Unwrap() error { return e.Err }
