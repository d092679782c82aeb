package topology

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/statestore"
)

// procImpl is a processor node's per-task instance, untyped.
type procImpl interface {
	init(c *nodeInstance) error
	process(c *nodeInstance, r record) error
	close() error
}

// flusher is a procImpl that holds table updates until Flush.
type flusher interface {
	flush(c *nodeInstance) error
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
	if err := g.openStores(st); err != nil {
		return nil, err
	}
	if err := g.instantiate(st); err != nil {
		return nil, err
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

// openStores opens from the task's env the stores of st and the global
// stores its nodes read.
func (g *taskGraph) openStores(st *subTopology) error {
	env := g.env
	for _, s := range st.info.Stores {
		rw, err := env.Store(s.Name)
		if err != nil {
			return fmt.Errorf("topology: task %s: open store %q: %w", env.TaskID(), s.Name, err)
		}
		if rw == nil {
			return fmt.Errorf("topology: task %s: store %q is nil", env.TaskID(), s.Name)
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
				return fmt.Errorf("topology: task %s: open global store %q: %w", env.TaskID(), name, err)
			}
			g.stores[name] = rw
		}
	}
	return nil
}

// instantiate makes the task's instance of every node of st, with a fresh
// processor from each supplier, and links each to its children's.
func (g *taskGraph) instantiate(st *subTopology) error {
	byNode := make(map[*node]*nodeInstance, len(st.nodes))
	for _, n := range st.nodes {
		in := &nodeInstance{node: n, task: g, pos: int32(len(g.nodes) + 1)}
		if n.kind == kindProcessor {
			p, err := n.newProc()
			if err != nil {
				return err
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
	return nil
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
