package runtime

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/instancecore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// ProcessingErrorHandling says what a stream thread does when a processor
// returns an error, or panics, on a record.
type ProcessingErrorHandling int

const (
	// ProcessingFail stops the stream thread with a *ProcessingError
	// naming the task, node, topic, partition and offset; what happens
	// next is OnStreamThreadError's to say. Nothing at or past the record
	// is committed, so the record is processed again by whoever takes the
	// task over.
	ProcessingFail ProcessingErrorHandling = iota
	// ProcessingLogAndContinue logs the error (at most a few lines a
	// second), counts it (Stats.ProcessingErrors and the metric
	// eddy_processing_errors_total), sends the record to DeadLetterTopic
	// when one is set, and carries on past it. What the record did before
	// it failed (store writes, records forwarded) is kept: a task cannot
	// undo part of a record.
	ProcessingLogAndContinue
)

func (h ProcessingErrorHandling) String() string {
	switch h {
	case ProcessingFail:
		return "fail"
	case ProcessingLogAndContinue:
		return "log-and-continue"
	}
	return fmt.Sprintf("ProcessingErrorHandling(%d)", int(h))
}

// StreamThreadErrorPolicy says what happens when a stream thread stops on
// an error it cannot get past: a processing error under ProcessingFail, an
// undecodable record under DeserializationFail, a failed commit, a lost
// connection that does not come back.
type StreamThreadErrorPolicy int

const (
	// ShutdownInstance stops this instance: App.Done is closed and App.Err
	// returns the error. The other instances take over its tasks. The
	// default.
	ShutdownInstance StreamThreadErrorPolicy = iota
	// ReplaceThread drops the thread's uncommitted work, leaves the group
	// and joins it again as a new member, as a new thread would. An error
	// that comes back for the same record (or, for errors tied to no
	// record, the same error) MaxThreadReplacements times within ten
	// minutes is not retried again: the instance shuts down with it, so a
	// poison record never turns into a silent loop.
	ReplaceThread
	// ShutdownApplication asks every instance of the application to shut
	// down (through the group: the next assignment tells each member,
	// with the reason), then shuts this instance down. If the group does
	// not answer within RebalanceTimeout (for example because an instance
	// of an older Eddy leads it), only this instance shuts down.
	ShutdownApplication
)

func (p StreamThreadErrorPolicy) String() string {
	switch p {
	case ShutdownInstance:
		return "shutdown-instance"
	case ReplaceThread:
		return "replace-thread"
	case ShutdownApplication:
		return "shutdown-application"
	}
	return fmt.Sprintf("StreamThreadErrorPolicy(%d)", int(p))
}

// MaxThreadReplacements is how many times in a row ReplaceThread replaces
// a thread for the same failure before the instance gives up.
const MaxThreadReplacements = 3

// replacementWindow is how far apart two failures may be to count as in a
// row.
const replacementWindow = 10 * time.Minute

// threadPolicy is the instance core's name for p: the core decides what
// becomes of a failed thread (instancecore.EvThreadFailed).
func threadPolicy(p StreamThreadErrorPolicy) instancecore.ThreadPolicy {
	switch p {
	case ReplaceThread:
		return instancecore.ReplaceThread
	case ShutdownApplication:
		return instancecore.ShutdownApplication
	}
	return instancecore.StopThread
}

// ProcessingError is a record a processor failed on (an error it returned
// or a panic it raised). errors.As finds the underlying error; a panic is
// a *topology.PanicError.
type ProcessingError struct {
	Task      task.ID
	Topic     string
	Partition int32
	Offset    int64
	// Node is the processor node that failed, "" if not known.
	Node string
	Err  error
}

func (e *ProcessingError) Error() string {
	node := ""
	if e.Node != "" {
		node = fmt.Sprintf(" in node %q", e.Node)
	}
	return fmt.Sprintf("runtime: task %s failed%s on record %s/%d@%d: %v", e.Task, node, e.Topic, e.Partition, e.Offset, errors.Unwrap(e))
}

// Unwrap returns the processor's error (the node's own error, not the
// wrapper naming the node).
func (e *ProcessingError) Unwrap() error {
	var ne *topology.NodeError
	if errors.As(e.Err, &ne) {
		return ne.Err
	}
	return e.Err
}

// RecordTooLargeError is an output record (to a sink, a repartition topic
// or the dead-letter topic) bigger than the producer can send: its
// record batch alone would exceed the client's ProducerBatchMaxBytes
// (Kafka's max.message.bytes default, unless set through
// Config.ClientOptions). Send refuses it at once, so it fails the record
// being processed as a processing error, with the policy of
// Config.ProcessingErrors, instead of failing the commit that would carry it.
type RecordTooLargeError struct {
	Topic string
	// Bytes is the record batch the record would need; Max the limit.
	Bytes, Max int
}

func (e *RecordTooLargeError) Error() string {
	return fmt.Sprintf("runtime: record for %s too large to produce: a batch of %d bytes, the producer's limit is %d (ProducerBatchMaxBytes)", e.Topic, e.Bytes, e.Max)
}

// ApplicationShutdownError is the error of an instance that closed because
// some instance of the application asked them all to (ShutdownApplication).
// Reason is what that instance gave.
type ApplicationShutdownError struct {
	Reason string
}

func (e *ApplicationShutdownError) Error() string {
	return "runtime: the application was shut down at an instance's request: " + e.Reason
}

// Headers Eddy adds to a record it sends to the dead-letter topic, beside
// the record's own headers.
const (
	DeadLetterHeaderError     = "eddy.error"
	DeadLetterHeaderTopic     = "eddy.topic"
	DeadLetterHeaderPartition = "eddy.partition"
	DeadLetterHeaderOffset    = "eddy.offset"
	DeadLetterHeaderTask      = "eddy.task"
	DeadLetterHeaderNode      = "eddy.node"
	// DeadLetterHeaderOmitted is set on a dead letter that would be too
	// large to produce with the record's whole content: "value", or
	// "key,value", the parts left out (the source coordinates in the
	// other headers find the record itself).
	DeadLetterHeaderOmitted = "eddy.omitted"
)

// deadLetter is in, as sent to the dead-letter topic: its key, value and
// headers, and where it came from and why it failed.
func deadLetter(topic string, id task.ID, in graph.InputRecord, node string, err error) graph.OutputRecord {
	hs := make([]topology.Header, 0, len(in.Headers)+6)
	hs = append(hs, in.Headers...)
	hs = append(hs,
		topology.Header{Key: DeadLetterHeaderError, Value: []byte(err.Error())},
		topology.Header{Key: DeadLetterHeaderTopic, Value: []byte(in.Topic)},
		topology.Header{Key: DeadLetterHeaderPartition, Value: []byte(strconv.Itoa(int(in.Partition)))},
		topology.Header{Key: DeadLetterHeaderOffset, Value: []byte(strconv.FormatInt(in.Offset, 10))},
		topology.Header{Key: DeadLetterHeaderTask, Value: []byte(id.String())},
	)
	if node != "" {
		hs = append(hs, topology.Header{Key: DeadLetterHeaderNode, Value: []byte(node)})
	}
	return graph.OutputRecord{Topic: topic, Key: in.Key, Value: in.Value, Timestamp: in.Timestamp, Headers: hs}
}

// shrinkDeadLetter returns dl without its value, or without its key and
// value, whichever first fits a batch of max bytes; ok is false when
// neither does (the record's own headers alone are too large).
func shrinkDeadLetter(dl graph.OutputRecord, max int) (graph.OutputRecord, bool) {
	hs := dl.Headers[:len(dl.Headers):len(dl.Headers)] // appends copy
	dl.Value = nil
	dl.Headers = append(hs, topology.Header{Key: DeadLetterHeaderOmitted, Value: []byte("value")})
	if batchBytes(dl) <= max {
		return dl, true
	}
	dl.Key = nil
	dl.Headers = append(hs, topology.Header{Key: DeadLetterHeaderOmitted, Value: []byte("key,value")})
	return dl, batchBytes(dl) <= max
}

// failureKey names a thread failure for counting replacements: the record
// it happened on, or the error's text when it concerns no record.
func failureKey(err error) string {
	var pe *ProcessingError
	if errors.As(err, &pe) {
		return fmt.Sprintf("record %s/%d@%d", pe.Topic, pe.Partition, pe.Offset)
	}
	var de *topology.DeserializationError
	if errors.As(err, &de) {
		return fmt.Sprintf("record %s/%d@%d", de.Topic, de.Partition, de.Offset)
	}
	return err.Error()
}

// logLimiter lets through a few log lines a second and counts the rest, so
// that a stream of failing records cannot flood the logs.
type logLimiter struct {
	mu         sync.Mutex
	windowFrom time.Time
	inWindow   int
	suppressed int
}

const logLinesPerSecond = 5

// allow reports whether to log now, and how many lines were suppressed
// since the last one let through.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.windowFrom) >= time.Second {
		l.windowFrom, l.inWindow = now, 0
	}
	if l.inWindow >= logLinesPerSecond {
		l.suppressed++
		return false, 0
	}
	l.inWindow++
	n := l.suppressed
	l.suppressed = 0
	return true, n
}
