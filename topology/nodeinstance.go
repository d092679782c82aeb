package topology

// One node of one task's graph: how it processes, forwards and sends records,
// opens its stores, and attributes errors and panics to itself.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/statestore"
)

// statelessProc is a procImpl that needs no setup.
type statelessProc func(*nodeInstance, record) error

func (f statelessProc) init(*nodeInstance) error                { return nil }
func (f statelessProc) process(c *nodeInstance, r record) error { return f(c, r) }
func (f statelessProc) close() error                            { return nil }

// nodeInstance is one node of one task's graph.
type nodeInstance struct {
	node     *node
	task     *taskGraph
	children []*nodeInstance
	proc     procImpl
	// fn is proc when proc is a statelessProc.
	fn statelessProc
	// ts is the timestamp inherited by records the node forwards without
	// one: that of the record being processed or the punctuation time.
	ts time.Time
	// topic is a sink's full topic name, computed once per task rather
	// than concatenated for every record.
	topic string
	// pos is the node's index in its task's nodes plus one.
	pos int32
	// results is the store of the node's versioned results
	// (node.versionedResults), opened by the processor's init.
	results *resultVersions
}

// NodeError attributes an error to the processor node it arose in. Every
// error a task graph returns from a processor, punctuator or sink carries
// one (the innermost node wins), so the runtime can name the node in what
// it logs and sends to a dead-letter topic.
type NodeError struct {
	// Node is the node's name as Describe prints it.
	Node string
	Err  error
}

func (e *NodeError) Error() string { return fmt.Sprintf("topology: node %q: %v", e.Node, e.Err) }
func (e *NodeError) Unwrap() error { return e.Err }

// PanicError is a panic raised by a user function (a processor, a mapper,
// an aggregator, a serde, a punctuator) and recovered by the task graph,
// so that one bad record or bug fails the record, not the process. It is
// returned wrapped in a *NodeError naming the node that was running.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack, for the logs.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap exposes a panic raised with an error value.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

func (in *nodeInstance) wrap(err error) error {
	if err == nil {
		return nil
	}
	// Declared only on the error path: errors.As makes its target escape,
	// which would otherwise cost an allocation per node per record.
	var ne *NodeError
	if errors.As(err, &ne) {
		return err
	}
	return &NodeError{Node: in.node.name, Err: err}
}

// process runs r through the node, remembering the node as the one
// running while it does, so that a panic can be attributed to it. The
// node is remembered by its position, not a pointer: a pointer stored
// twice per node and record costs two write barriers whenever the
// collector runs, which is often at this allocation rate.
func (in *nodeInstance) process(r record) error {
	g := in.task
	prev := g.running
	g.running = in.pos
	var err error
	switch in.node.kind {
	case kindSource:
		err = in.forward(r)
	case kindSink:
		err = in.send(r)
	default:
		in.ts = r.ts
		// A stateless node's function is called directly, not through
		// procImpl: one call less, with its copy of r, per record.
		if in.fn != nil {
			err = in.fn(in, r)
		} else if in.results != nil {
			err = in.processResult(r)
		} else {
			err = in.proc.process(in, r)
		}
		if err != nil {
			err = in.wrap(err)
		}
	}
	g.running = prev
	return err
}

// send encodes r and hands it to the task's sender.
func (in *nodeInstance) send(r record) error {
	if r.keyNull && in.node.dropNullKeys {
		return nil
	}
	key, value, err := in.node.encode(r)
	if err != nil {
		return in.wrap(fmt.Errorf("encode for topic %q: %w", in.node.topic.Name, err))
	}
	return in.wrap(in.task.env.Send(graph.OutputRecord{
		Topic:     in.topic,
		Key:       key,
		Value:     value,
		Timestamp: r.ts,
		Headers:   r.headers,
	}))
}

// holds reports whether the node keeps its table updates until the task's
// next flush. A node with no children keeps none even when its task buffers:
// nothing would read them (its store is read by queries, which see the
// store), and a table of millions of keys that is only queried would
// otherwise hold an update for every key written since the last commit.
// Nor does a node keeping versioned results: Kafka Streams does not cache
// versioned stores, so each result goes out as it is put.
func (in *nodeInstance) holds() bool {
	return in.task.buffered && len(in.children) > 0 && in.node.versionedResults == ""
}

func (in *nodeInstance) forward(r record) error {
	if in.results != nil && in.results.notLatest {
		r.notLatest = true
	}
	for _, c := range in.children {
		if err := c.process(r); err != nil {
			return err
		}
	}
	return nil
}

func (in *nodeInstance) forwardTo(child string, r record) error {
	for _, c := range in.children {
		if c.node.name == child {
			return c.process(r)
		}
	}
	return fmt.Errorf("topology: %s has no child named %q", in.node.label(), child)
}

// timestamped reports whether the store named name keeps timestamped
// values (StoreInfo.Timestamped).
func (in *nodeInstance) timestamped(name string) bool { return in.task.timestamped[name] }

func (in *nodeInstance) store(name string) (statestore.ReadWriter, error) {
	if !slices.Contains(in.node.stores, name) && !slices.Contains(in.node.globals, name) {
		return nil, fmt.Errorf("topology: %s did not declare store %q", in.node.label(), name)
	}
	rw, ok := in.task.stores[name]
	if !ok {
		return nil, fmt.Errorf("topology: task %s has no store %q", in.task.env.TaskID(), name)
	}
	if slices.Contains(in.node.globals, name) {
		return readOnlyStore{rw}, nil
	}
	if name == in.node.versionedResults {
		return in.resultStore(rw)
	}
	return rw, nil
}

// readOnlyStore is a global store as processors see it: only the global
// thread writes it, whichever runner (runtime or topologytest) provides it.
type readOnlyStore struct{ statestore.ReadWriter }

func (s readOnlyStore) Put(_, _ []byte) error { return s.refuse() }
func (s readOnlyStore) Delete([]byte) error   { return s.refuse() }
func (readOnlyStore) refuse() error {
	return errors.New("topology: a global store is read-only to processors")
}
