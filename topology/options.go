package topology

import "time"

// Option adjusts one DSL operation. Options that do not apply to an
// operation are ignored; each option's doc says where it applies.
type Option func(*options)

type options struct {
	name string
	// derived marks a name made from one already checked (a repartition
	// topic's sink and source), so that a bad name is reported once.
	derived    bool
	partitions int32
	inMemory   bool
	unlogged   bool
	// extractor is a TimestampExtractor[K, V] for a source, checked
	// against the source's types when the source is added.
	extractor any
	// valueSerde is a serde.Serde[V] of a join's stream side, checked
	// against the stream's value type by the join.
	valueSerde any
	// store is the store a derived table is materialized in (Materialized)
	// and tableValueSerde its serde.Serde[V] (TableValueSerde).
	store           string
	tableValueSerde any
	// combine turns combining on for an aggregation (WithCombining);
	// merger is Aggregate's func(K, A, A) A (WithMerger), see combine.go.
	combine bool
	merger  any
	// versioned materializes a source table in a versioned store keeping
	// history milliseconds of history (Versioned).
	versioned bool
	history   int64
	// grace is a stream-table join's grace period in milliseconds
	// (JoinGrace).
	grace    int64
	hasGrace bool
	// restoreJoinTime: a stream-stream join starts from the stream time
	// its window stores reached (RestoreJoinStreamTime).
	restoreJoinTime bool
	// storedOlds: a materialized table-table join sends its store's old
	// values (StoredOldValues).
	storedOlds bool
}

func collect(opts []Option) options {
	var o options
	for _, fn := range opts {
		if fn != nil {
			fn(&o)
		}
	}
	return o
}

// Named gives the node an operation creates a fixed name instead of a
// generated one such as "filter-3". Names appear in Describe and errors, and
// a processor forwards to a named child with ProcessorContext.ForwardTo.
// Node names must be unique within a topology.
func Named(name string) Option { return func(o *options) { o.name = name } }

// NumPartitions sets the partition count of the repartition topic that
// GroupBy or GroupByKey create. Without it the topic gets the partition
// count of the sub-topology that writes it.
func NumPartitions(n int32) Option { return func(o *options) { o.partitions = n } }

// InMemory keeps the store of an aggregation or table in memory instead of
// on disk. It is rebuilt from its changelog when its task starts.
func InMemory() Option { return func(o *options) { o.inMemory = true } }

// WithoutLogging gives the store of an aggregation or table no changelog
// topic. Its contents are then lost when a task moves to another instance,
// and standby replicas cannot follow it.
func WithoutLogging() Option { return func(o *options) { o.unlogged = true } }

// TimestampExtractor gives a source record its event time, the time
// windows and stream time are computed from. rec holds the decoded key
// and value, the headers, and the timestamp the record carries in Kafka
// (what is used without an extractor). A key or value that was a Kafka
// null is the zero value. An error, or a time before the epoch, fails
// the record as a processing error (runtime.Config.ProcessingErrors
// decides what follows); the record is not processed.
type TimestampExtractor[K, V any] func(rec Record[K, V]) (time.Time, error)

// WithTimestampExtractor sets the event time of the records a source
// (Stream, Table) reads; K and V must be the source's key and value
// types. Without it a record's event time is its Kafka timestamp.
func WithTimestampExtractor[K, V any](fn TimestampExtractor[K, V]) Option {
	return func(o *options) { o.extractor = fn }
}
