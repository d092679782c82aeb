package topology

import (
	"bytes"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/statestore"
)

// procImpl is a processor node's per-task instance, untyped.
type procImpl interface {
	init(c *nodeInstance) error
	process(c *nodeInstance, r record) error
	close() error
}

// chunked holds a node's updates between flushes in fixed-size chunks
// taken from a pool, so that a buffer holding a commit interval's updates
// of many keys (tens of thousands a task at a million keys, or a spread
// input's windows) is never copied as it grows, nor allocated and cleared
// again at every commit. The zero value works; without a pool it allocates
// its chunks.
type chunked[T any] struct {
	pool   *sync.Pool // of *[chunkLen]T
	chunks []*[chunkLen]T
	n      int
}

// chunkLen is how many items a chunk holds: 128 of a table's held updates
// make a chunk of 18 KiB.
const chunkLen = 128

func (b *chunked[T]) at(i int) *T { return &b.chunks[i/chunkLen][i%chunkLen] }

// push appends v at position b.n.
func (b *chunked[T]) push(v T) {
	if b.n/chunkLen == len(b.chunks) {
		var ch *[chunkLen]T
		if b.pool != nil {
			ch, _ = b.pool.Get().(*[chunkLen]T)
		}
		if ch == nil {
			ch = new([chunkLen]T)
		}
		b.chunks = append(b.chunks, ch)
	}
	*b.at(b.n) = v
	b.n++
}

// drain hands the held items to fn in the order they were pushed and
// empties the buffer, whether or not fn fails.
func (b *chunked[T]) drain(fn func(*T) error) error {
	held := *b
	b.chunks, b.n = nil, 0
	defer func() {
		held.empty()
		if b.chunks == nil {
			b.chunks = held.chunks
		}
	}()
	for i := range held.n {
		if err := fn(held.at(i)); err != nil {
			return err
		}
	}
	return nil
}

// empty drops the held items and returns their chunks to the pool,
// keeping the slice that held them.
func (b *chunked[T]) empty() {
	for i, ch := range b.chunks {
		clear(ch[:min(b.n-i*chunkLen, chunkLen)])
		if b.pool != nil {
			b.pool.Put(ch)
		}
	}
	clear(b.chunks)
	b.chunks, b.n = b.chunks[:0], 0
}

// tableUpdates collects a table node's updates between flushes when the
// task buffers them (see taskGraph.buffered), in chunks from a pool all
// table nodes share.
type tableUpdates struct {
	index map[string]int
	held  chunked[pendingUpdate]
	// bySlot indexes the pending updates instead of index for a table
	// whose store reports each written key's slot (emitAt).
	bySlot slotIndex
	// values, when set, holds the values of the pending updates by
	// position, unboxed, and the held records' values are nil until flush:
	// boxed at every update (an int64 above 255 or a string costs an
	// allocation in an interface), a key's value would be boxed again for
	// each record, though only its last box goes out.
	values heldValues
	// committed, when set, reads the table's store as of the last commit,
	// beneath the writes of the pending updates: the flush asks it whether
	// a key whose pending update is a tombstone without an old value held
	// a value then.
	committed committedReader
}

// committedReader is a store that reads beneath its uncommitted writes:
// the runtime's record cache (cache.Store) and topologytest's stores under
// Config.Commits. A task flushes its table updates just before it commits,
// so at the flush the committed values are those of the last flush.
//
// A key found absent there whose pending update is a tombstone is one
// Kafka Streams' caching stores neither forward nor write: SkipTombstone
// leaves the store's delete of it, and so its changelog record, out of the
// commit.
type committedReader interface {
	HasCommitted(key []byte) (bool, error)
	SkipTombstone(key []byte)
}

// readsCommitted returns rw as a committedReader, or nil when it is none.
func readsCommitted(rw statestore.ReadWriter) committedReader {
	cr, _ := rw.(committedReader)
	return cr
}

// heldValues holds a table node's pending values unboxed (see
// tableUpdates.values).
type heldValues interface {
	// box returns the value at position i as a graph value.
	box(i int) any
	// empty drops every value.
	empty()
}

// valueBuf is a heldValues of values of type A, in chunks from its own
// pool.
type valueBuf[A any] struct {
	pool sync.Pool
	vals chunked[A]
}

// set makes v the value at position i, which is at most one past the
// last.
func (b *valueBuf[A]) set(i int, v A) {
	if i == b.vals.n {
		b.vals.pool = &b.pool
		b.vals.push(v)
		return
	}
	*b.vals.at(i) = v
}

func (b *valueBuf[A]) box(i int) any { return *b.vals.at(i) }
func (b *valueBuf[A]) empty()        { b.vals.empty() }

// pendingUpdate is a held update, with the cache's copy of its key when it
// came through emitAt, or a copy of its key when it came through emit as a
// tombstone (for the flush's committed read).
type pendingUpdate struct {
	r   record
	key []byte
}

var pendingChunks sync.Pool

// add holds r at position u.held.n.
func (u *tableUpdates) add(c *nodeInstance, key []byte, r record) {
	if u.held.n == 0 {
		c.task.holding = append(c.task.holding, u)
	}
	u.held.pool = &pendingChunks
	u.held.push(pendingUpdate{r: r, key: key})
}

// emit forwards r now, or, when the task buffers table updates, keeps it
// as the pending update of its serialized key.
func (u *tableUpdates) emit(c *nodeInstance, key []byte, r record) error {
	if !c.holds() {
		return c.forward(r)
	}
	if u.index == nil {
		u.index = make(map[string]int)
	}
	if i, ok := u.index[string(key)]; ok {
		// Collapsed updates go out as one, from the value before the
		// first to the latest.
		p := u.held.at(i)
		if r.old != nil {
			r.old = p.r.old
		}
		p.r = r
		if r.valueNull && p.key == nil {
			p.key = bytes.Clone(key)
		}
		return nil
	}
	u.index[string(key)] = u.held.n
	var kept []byte
	if r.valueNull {
		kept = bytes.Clone(key)
	}
	u.add(c, kept, r)
	return nil
}

// holdsKey reports whether an update of key (as given to emit) is
// pending.
func (u *tableUpdates) holdsKey(key []byte) bool {
	_, ok := u.index[string(key)]
	return ok
}

// unheldTombstone reports whether r, an update of the key kb of the
// store rw whose updates u holds, is a tombstone for a key that held no
// value at the last flush and has no update pending since: one that Kafka
// Streams' caching stores neither write nor forward. It reads the store
// for tombstones only, and only when c holds updates and r carries no old
// value (which the flush checks instead).
func (u *tableUpdates) unheldTombstone(c *nodeInstance, rw statestore.ReadWriter, kb []byte, r record) (bool, error) {
	if !r.valueNull || r.old != nil || !c.holds() || u.holdsKey(kb) {
		return false, nil
	}
	_, found, err := rw.Get(kb)
	return !found, err
}

// emitAt is emit for a key written to the record cache, which reported the
// key's slot and its own copy of the key (cache.Store.UpdateAt): the
// pending update of the key is found by slot, which costs no hashing. The
// cache renumbers its slots at every commit and discard, as the task graph
// flushes or discards its pending updates; a slot that holds another key
// all the same (the two fell out of step) only costs a second update of
// the key in the next flush, each carrying the value before it.
//
// With lazyKey, r's key is a string not made yet: it is made from the
// cache's copy of the key, which the cache never modifies, when r is
// forwarded or held as the key's first update, and a later update of the
// key takes the held one's.
//
// It returns the update's position among the held ones, or -1 if it was
// forwarded: a table with values (tableUpdates.values) passes r without
// its value and sets the value at that position, and only when the task
// holds its updates.
func (u *tableUpdates) emitAt(c *nodeInstance, slot int, key []byte, lazyKey bool, r record) (int, error) {
	if !c.holds() {
		if lazyKey {
			r.key = unsafe.String(unsafe.SliceData(key), len(key))
		}
		return -1, c.forward(r)
	}
	if i, ok := u.bySlot.lookup(slot); ok && i < u.held.n {
		if p := u.held.at(i); bytes.Equal(p.key, key) {
			if r.old != nil {
				r.old = p.r.old
			}
			if lazyKey {
				r.key = p.r.key
			}
			p.r = r
			return i, nil
		}
	}
	if lazyKey {
		r.key = unsafe.String(unsafe.SliceData(key), len(key))
	}
	i := u.held.n
	u.bySlot.set(slot, i)
	u.add(c, key, r)
	return i, nil
}

// discard drops the pending updates: the input they came from will be
// processed again, and the store writes they reflect were dropped.
func (u *tableUpdates) discard() {
	u.resetIndex(u.held.n)
	u.held.empty()
	if u.values != nil {
		u.values.empty()
	}
}

// resetIndex forgets where the n pending updates are, as the cache
// renumbers its slots at the commit or discard that follows a flush or
// discard; an index grown past maxRetainedUpdates is let go rather than
// kept for every later interval.
func (u *tableUpdates) resetIndex(n int) {
	u.bySlot.reset(maxRetainedUpdates)
	if n > maxRetainedUpdates {
		u.index = nil
	} else {
		clear(u.index)
	}
}

// slotIndex finds a pending update by the record-cache slot of the entry
// it came from (cache.Store.UpdateAt): x[slot] is the update's position
// plus one, 0 for none. The cache renumbers its slots at every commit and
// discard, so the index is reset with the updates it points into, and a
// caller checks that the update found is still of the same entry.
type slotIndex []int32

// lookup returns the position recorded for slot, if any.
func (x slotIndex) lookup(slot int) (int, bool) {
	if slot < len(x) {
		if p := x[slot] - 1; p >= 0 {
			return int(p), true
		}
	}
	return 0, false
}

// set records pos as slot's position.
func (x *slotIndex) set(slot, pos int) {
	if slot >= len(*x) {
		*x = slices.Grow(*x, slot+1-len(*x))[:slot+1]
	}
	(*x)[slot] = int32(pos + 1)
}

// reset forgets every slot, keeping the index's memory unless it grew
// past max entries.
func (x *slotIndex) reset(max int) {
	if cap(*x) > max {
		*x = nil
		return
	}
	clear(*x)
	*x = (*x)[:0]
}

// replace gives the pending update of key, if there is one, the value,
// time and headers of a newer one with the same record key, and reports
// whether there was one: a table whose record keys are costly to make (a
// Windowed key put into an interface) makes one only when replace fails.
func (u *tableUpdates) replace(c *nodeInstance, key []byte, value any, ts time.Time, headers []Header) bool {
	if !c.holds() {
		return false
	}
	i, ok := u.index[string(key)]
	if !ok {
		return false
	}
	p := &u.held.at(i).r
	p.value, p.valueNull, p.ts, p.headers = value, false, ts, headers
	return true
}

// flush forwards the pending updates in the order their keys were first
// updated, but for a tombstone of a key that held no value at the last
// flush either: as Kafka Streams' caching stores at their flush, nothing
// downstream holds the key. The old value, when sent, tells; otherwise the
// store as of the last commit does (u.committed), read for tombstones only,
// as Kafka Streams reads its underlying store for them.
func (u *tableUpdates) flush(c *nodeInstance) error {
	u.resetIndex(u.held.n)
	if u.values == nil {
		return u.held.drain(func(p *pendingUpdate) error {
			if p.r.valueNull {
				if held, err := u.heldAtLastFlush(p); err != nil || !held {
					return err
				}
			}
			return c.forward(p.r)
		})
	}
	// Nothing a table forwards comes back to it, so no update is held
	// while these go out.
	defer u.values.empty()
	i := 0
	return u.held.drain(func(p *pendingUpdate) error {
		p.r.value = u.values.box(i)
		i++
		return c.forward(p.r)
	})
}

// heldAtLastFlush reports whether the key of p, a pending tombstone, held
// a value at the last flush: the old value tells when sent, else the store
// as of the last commit; with neither it cannot tell, and says it did, so
// that the tombstone goes out. A key the committed store lacks has its
// delete left out of the commit, even when an old value decided already:
// only the store's answer is safe to skip a write on.
func (u *tableUpdates) heldAtLastFlush(p *pendingUpdate) (bool, error) {
	if p.r.old != nil && !p.r.old.null {
		return true, nil
	}
	if u.committed == nil || p.key == nil {
		return p.r.old == nil, nil
	}
	held, err := u.committed.HasCommitted(p.key)
	if err != nil {
		return false, err
	}
	if !held {
		u.committed.SkipTombstone(p.key)
	}
	return held && p.r.old == nil, nil
}

// maxRetainedUpdates bounds the index of pending updates a table keeps
// between flushes.
const maxRetainedUpdates = 4096

// flusher is a procImpl that holds table updates until Flush.
type flusher interface {
	flush(c *nodeInstance) error
}

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

// taskGraph is the graph.TaskGraph of one task.
type taskGraph struct {
	env     graph.TaskEnv
	app     string
	nodes   []*nodeInstance
	sources map[string]*nodeInstance
	stores  map[string]statestore.ReadWriter
	// timestamped names the stores whose values carry a timestamp
	// (StoreInfo.Timestamped), which a Processor sees without it.
	timestamped map[string]bool
	// lastTopic and lastSrc remember the source of the previous record:
	// records arrive in runs from one partition, and comparing a topic
	// string that shares its bytes is cheaper than hashing it.
	lastTopic string
	lastSrc   *nodeInstance
	// running is the pos of the innermost node processing a record or
	// punctuating, 0 between records: a recovered panic is attributed to
	// it.
	running int32

	streamTime time.Time
	// committedTime is streamTime when the last commit completed, where
	// an abort takes it back (graph.Discarder).
	committedTime time.Time
	// buffered: tables hold updates until Flush (graph.TableBuffering).
	buffered bool
	meta     RecordMetadata
	hasMeta  bool
	// trackMeta: some processor may read meta, so Process must set it.
	trackMeta bool

	puncts []*punctuation
	// punctuated counts punctuator calls, for the runtime's metrics.
	punctuated int64
	// droppedLate counts records windowed aggregations left out of closed
	// windows (graph.LateCounter).
	droppedLate int64
	// droppedJoin counts records joins dropped for a null key or value
	// (graph.JoinDropCounter).
	droppedJoin int64
	// holding lists the table update buffers that took a pending update
	// since the last Flush, for Discard to empty.
	holding []*tableUpdates
	// inited counts the processors whose Init succeeded, so a failed start
	// closes exactly those.
	inited []*nodeInstance
	closed bool
}

// NewTaskGraph instantiates sub-topology id for one task: a fresh processor
// from every supplier, the task's stores from env, and each processor's
// Init, in creation order. If an Init fails, the processors already
// initialized are closed.
func (t *runtimeView) NewTaskGraph(id int, env graph.TaskEnv) (graph.TaskGraph, error) {
	if id < 0 || id >= len(t.subs) {
		return nil, fmt.Errorf("topology: no sub-topology %d (have %d)", id, len(t.subs))
	}
	st := t.subs[id]
	g := &taskGraph{
		env:     env,
		app:     env.AppID(),
		sources: make(map[string]*nodeInstance),
		stores:  make(map[string]statestore.ReadWriter),
	}
	if tb, ok := env.(graph.TableBuffering); ok {
		g.buffered = tb.BufferTableUpdates()
	}
	for _, s := range st.info.Stores {
		rw, err := env.Store(s.Name)
		if err != nil {
			return nil, fmt.Errorf("topology: task %s: open store %q: %w", env.TaskID(), s.Name, err)
		}
		if rw == nil {
			return nil, fmt.Errorf("topology: task %s: store %q is nil", env.TaskID(), s.Name)
		}
		g.stores[s.Name] = rw
		if s.Timestamped {
			if g.timestamped == nil {
				g.timestamped = make(map[string]bool)
			}
			g.timestamped[s.Name] = true
		}
	}
	for _, n := range st.nodes {
		for _, name := range n.globals {
			if _, ok := g.stores[name]; ok {
				continue
			}
			rw, err := env.Store(name)
			if err != nil {
				return nil, fmt.Errorf("topology: task %s: open global store %q: %w", env.TaskID(), name, err)
			}
			g.stores[name] = rw
		}
	}
	byNode := make(map[*node]*nodeInstance, len(st.nodes))
	for _, n := range st.nodes {
		in := &nodeInstance{node: n, task: g, pos: int32(len(g.nodes) + 1)}
		if n.kind == kindProcessor {
			p, err := n.newProc()
			if err != nil {
				return nil, err
			}
			in.proc = p
			in.fn, _ = p.(statelessProc)
		}
		switch n.kind {
		case kindSource:
			g.sources[n.topic.FullName(g.app)] = in
		case kindSink:
			in.topic = n.topic.FullName(g.app)
		}
		g.trackMeta = g.trackMeta || n.readsMeta
		byNode[n] = in
		g.nodes = append(g.nodes, in)
	}
	for _, in := range g.nodes {
		for _, c := range in.node.children {
			in.children = append(in.children, byNode[c])
		}
	}
	for _, in := range g.nodes {
		if in.proc == nil {
			continue
		}
		if err := in.proc.init(in); err != nil {
			err = fmt.Errorf("topology: task %s: init %s: %w", env.TaskID(), in.node.label(), err)
			return nil, errors.Join(err, g.Close())
		}
		g.inited = append(g.inited, in)
	}
	return g, nil
}

// recovered turns a panic recovered while the graph ran into an error
// naming the node that was running (or fallback, if none was), and clears
// what the interrupted record left behind.
func (g *taskGraph) recovered(p any, fallback *nodeInstance) error {
	in := fallback
	if g.running > 0 {
		in = g.nodes[g.running-1]
	}
	g.running = 0
	g.meta, g.hasMeta = RecordMetadata{}, false
	pe := &PanicError{Value: p, Stack: debug.Stack()}
	if in == nil {
		return fmt.Errorf("topology: task %s: %w", g.env.TaskID(), pe)
	}
	return &NodeError{Node: in.node.name, Err: pe}
}

func (g *taskGraph) Process(rec graph.InputRecord) (err error) {
	if g.closed {
		return fmt.Errorf("topology: task %s is closed", g.env.TaskID())
	}
	src := g.lastSrc
	if src == nil || rec.Topic != g.lastTopic {
		var ok bool
		if src, ok = g.sources[rec.Topic]; !ok {
			return fmt.Errorf("topology: task %s does not read topic %q", g.env.TaskID(), rec.Topic)
		}
		g.lastTopic, g.lastSrc = rec.Topic, src
	}
	// A deferred recover costs about a nanosecond per record; it keeps a
	// panic in user code (or a serde) from killing the process.
	defer func() {
		if p := recover(); p != nil {
			err = g.recovered(p, src)
		}
	}()
	r, err := src.node.decode(rec)
	if err != nil {
		return &DeserializationError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Err: err}
	}
	if src.node.extract != nil {
		ts, err := src.node.extract(r)
		if err != nil {
			return src.wrap(&TimestampError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Err: err})
		}
		r.ts = ts
	}
	// The zero time.Time is how in-process callers leave a record
	// unstamped; it never advances stream time, and windowed operators
	// refuse it as they refuse any time before the epoch.
	if !r.ts.IsZero() && r.ts.UnixMilli() < 0 {
		return src.wrap(&TimestampError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Time: r.ts})
	}
	if r.ts.After(g.streamTime) {
		g.streamTime = r.ts
	}
	if !g.trackMeta {
		return src.process(r)
	}
	g.meta = RecordMetadata{
		Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset,
		Timestamp: r.ts, Headers: rec.Headers,
	}
	g.hasMeta = true
	err = src.process(r)
	g.meta, g.hasMeta = RecordMetadata{}, false
	return err
}

func (g *taskGraph) Flush() (err error) {
	if g.closed || !g.buffered {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = g.recovered(p, nil)
		}
	}()
	for _, in := range g.nodes {
		if f, ok := in.proc.(flusher); ok {
			if err := f.flush(in); err != nil {
				return in.wrap(err)
			}
		}
	}
	clear(g.holding)
	g.holding = g.holding[:0]
	return nil
}

func (g *taskGraph) Close() error {
	if g.closed {
		return nil
	}
	g.closed = true
	var errs []error
	for _, in := range g.inited {
		if err := in.proc.close(); err != nil {
			errs = append(errs, fmt.Errorf("topology: task %s: close %s: %w", g.env.TaskID(), in.node.label(), err))
		}
	}
	g.puncts = nil
	return errors.Join(errs...)
}

// punctuation is one scheduled punctuator.
type punctuation struct {
	in        *nodeInstance
	typ       PunctuationType
	interval  time.Duration
	next      time.Time
	fn        Punctuator
	cancelled bool
	// committedNext is next when the last commit completed (see
	// taskGraph.rewind).
	committedNext time.Time
}

func (p *punctuation) Cancel() { p.cancelled = true }

// epoch anchors stream-time schedules, so that they fire at multiples of
// their interval regardless of when they were scheduled.
var epoch = time.Unix(0, 0)

func (g *taskGraph) schedule(in *nodeInstance, interval time.Duration, typ PunctuationType, fn Punctuator) (Cancellable, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("topology: %s: punctuation interval must be positive, got %v", in.node.label(), interval)
	}
	if fn == nil {
		return nil, fmt.Errorf("topology: %s: punctuator is nil", in.node.label())
	}
	p := &punctuation{in: in, typ: typ, interval: interval, fn: fn}
	switch typ {
	case StreamTime:
		// Due as soon as the task has seen a record.
		p.next = epoch
	case WallClockTime:
		p.next = g.env.Now().Add(interval)
	default:
		return nil, fmt.Errorf("topology: %s: unknown punctuation type %v", in.node.label(), typ)
	}
	p.committedNext = p.next
	g.puncts = append(g.puncts, p)
	return p, nil
}

// Committed implements graph.Discarder: it marks the times an abort
// returns to.
func (g *taskGraph) Committed() {
	g.committedTime = g.streamTime
	for _, p := range g.puncts {
		p.committedNext = p.next
	}
	for _, in := range g.nodes {
		if r, ok := in.proc.(rewinder); ok {
			r.committed()
		}
	}
}

// rewind takes time back to the last commit, for the input since then to
// be processed again (graph.Discarder): stream time, the stream-time
// punctuators' schedules and the processors' own clocks.
func (g *taskGraph) rewind() {
	g.streamTime = g.committedTime
	for _, p := range g.puncts {
		if p.typ == StreamTime {
			p.next = p.committedNext
		}
	}
	for _, in := range g.nodes {
		if r, ok := in.proc.(rewinder); ok {
			r.rewind()
		}
	}
}

// DroppedLate implements graph.LateCounter.
func (g *taskGraph) DroppedLate() int64 { return g.droppedLate }

// Punctuations implements TaskGraph.
func (g *taskGraph) Punctuations() int64 { return g.punctuated }

// NextWallClock implements TaskGraph.
func (g *taskGraph) NextWallClock() (time.Time, bool) {
	var at time.Time
	for _, p := range g.puncts {
		if p.typ == WallClockTime && !p.cancelled && (at.IsZero() || p.next.Before(at)) {
			at = p.next
		}
	}
	return at, !at.IsZero()
}

// Punctuate runs the punctuators that are due, in the order they were
// scheduled. Each fires at most once per call.
func (g *taskGraph) Punctuate(now time.Time) (err error) {
	if g.closed {
		return fmt.Errorf("topology: task %s is closed", g.env.TaskID())
	}
	due := slices.Clone(g.puncts)
	var current *nodeInstance
	defer func() {
		if p := recover(); p != nil {
			err = g.recovered(p, current)
		}
	}()
	for _, p := range due {
		if p.cancelled {
			continue
		}
		var at time.Time
		switch p.typ {
		case StreamTime:
			if g.streamTime.IsZero() || g.streamTime.Before(p.next) {
				continue
			}
			at = g.streamTime
		case WallClockTime:
			if now.Before(p.next) {
				continue
			}
			at = now
		}
		// Skip the intervals that passed unseen: the next punctuation is
		// the first scheduled instant after at.
		missed := at.Sub(p.next) / p.interval
		p.next = p.next.Add((missed + 1) * p.interval)
		p.in.ts = at
		current = p.in
		g.punctuated++
		if err = p.fn(at); err != nil {
			err = p.in.wrap(fmt.Errorf("task %s: %s punctuator: %w", g.env.TaskID(), p.typ, err))
			break
		}
	}
	g.puncts = slices.DeleteFunc(g.puncts, func(p *punctuation) bool { return p.cancelled })
	return err
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

// TimestampError reports an input record without a usable event time: its
// TimestampExtractor failed (Err), or the time is before the epoch (Time),
// as Kafka's -1 for "no timestamp" is. It is a processing error: the
// runtime handles it as Config.ProcessingErrors says.
type TimestampError struct {
	Topic     string
	Partition int32
	Offset    int64
	Time      time.Time
	Err       error
}

func (e *TimestampError) Error() string {
	at := e.Topic + "/" + strconv.Itoa(int(e.Partition)) + "@" + strconv.FormatInt(e.Offset, 10)
	if e.Err != nil {
		return "topology: timestamp extractor failed for record at " + at + ": " + e.Err.Error()
	}
	return "topology: invalid timestamp " + strconv.FormatInt(e.Time.UnixMilli(), 10) + " ms of record at " + at
}

func (e *TimestampError) Unwrap() error { return e.Err }
