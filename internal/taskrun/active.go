// Package taskrun runs tasks: an Active task processes its partition of a
// sub-topology through the record cache in front of its stores and says
// what a commit must send and write; a Standby applies the changelogs of a
// task that is active elsewhere. The runtime owns them; users meet tasks
// only by ID and State (package task).
package taskrun

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// Sender emits a sink record on behalf of a task. The runtime implements it
// with its producer and chooses the partition.
type Sender interface {
	Send(rec graph.OutputRecord) error
}

// StoreOpener opens the backing store for one store of one task. The runtime
// decides where persistent stores live and how they are tuned.
type StoreOpener func(id task.ID, info topology.StoreInfo) (statestore.Store, error)

// Config is what an active task needs to start.
type Config struct {
	ID       task.ID
	AppID    string
	Topology *topology.Topology
	// Changelog maps a logged store's name to its changelog topic.
	Changelog func(store string) string
	Open      StoreOpener
	// Global returns a global store (read-only) by name, for the joins
	// that read one; nil when there are none.
	Global func(name string) (statestore.ReadWriter, bool)
	// Stores are stores already open for this task (from a standby being
	// promoted); the rest are opened with Open.
	Stores []*StoreHandle
	// Budget bounds the bytes of writes the task's caches hold between
	// commits; it is shared by all the tasks of one stream thread.
	Budget *cache.Budget
	Sender Sender
	Logger *slog.Logger
	Now    func() time.Time
}

// StoreHandle is one open store of a task.
type StoreHandle struct {
	Info topology.StoreInfo
	// Inner is the backing store; Cache sits in front of it and is what
	// processors use.
	Inner statestore.Store
	Cache *cache.Store
	// Changelog is the changelog topic of a logged store, "" otherwise.
	Changelog string
	// versions logs the puts of a logged versioned store, which its
	// changelog holds; nil for any other store.
	versions *versionLog
}

// ChangelogWrite is a batch of pending writes of one store, bound for one
// changelog partition.
type ChangelogWrite struct {
	Store     string
	Topic     string
	Partition int32
	Entries   []statestore.Entry
}

// Active is an active task: one partition of one sub-topology, with its
// processors, its stores and the offsets it has consumed.
type Active struct {
	cfg Config
	// released: Close or Demote closed the task's processors and closed
	// or handed on its stores. It keeps them from doing so twice, whichever
	// of its thread's exit paths reaches the task first; it is no
	// lifecycle, the thread core's slot is the task's state.
	released bool
	stores   map[string]*StoreHandle
	order    []string // store names in declaration order
	graph    graph.TaskGraph
	// consumed maps an input topic to the offset of the next record to
	// process on the task's partition. Records come in runs from one
	// topic, so lastTopic and lastNext remember the entry of the previous
	// record and most records update it without a map lookup.
	consumed  map[string]*int64
	lastTopic string
	lastNext  *int64
	// committed holds the offsets last committed, so that a commit with
	// nothing new to say is skipped.
	committed map[string]int64
	// processed counts the records Process was given while running.
	processed int64
	// uncommitted: since its last complete commit the task processed or
	// skipped a record or ran a punctuator, the only ways its caches,
	// held table updates, graph times and consumed offsets change. A
	// commit leaves out a task without it (CommitNeeded), so an idle
	// thread's commit costs nothing per task.
	uncommitted bool
	log         *slog.Logger
}

// NewActive opens the task's stores and instantiates its processors. The
// task keeps no state of its own: its thread's core (threadcore.Slot)
// records whether it restores or runs, and the driver calls Process,
// Punctuate and Flush only while it runs, Restored once when its
// restoration ends.
func NewActive(cfg Config) (t *Active, err error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	subs := graph.Of(cfg.Topology).SubTopologies()
	if cfg.ID.SubTopology < 0 || cfg.ID.SubTopology >= len(subs) {
		return nil, fmt.Errorf("task %s: no such sub-topology", cfg.ID)
	}
	t = &Active{
		cfg:       cfg,
		stores:    make(map[string]*StoreHandle),
		consumed:  make(map[string]*int64),
		committed: make(map[string]int64),
		log:       cfg.Logger.With("task", cfg.ID.String()),
	}
	// The error returns set t to nil: close the stores of the task made.
	made := t
	defer func() {
		if err != nil {
			made.closeStores()
		}
	}()
	adopted := make(map[string]*StoreHandle)
	for _, h := range cfg.Stores {
		adopted[h.Info.Name] = h
	}
	for _, info := range subs[cfg.ID.SubTopology].Stores {
		var inner statestore.Store
		if h, ok := adopted[info.Name]; ok {
			delete(adopted, info.Name)
			inner = h.Inner
		} else if inner, err = cfg.Open(cfg.ID, info); err != nil {
			return nil, fmt.Errorf("task %s: open store %q: %w", cfg.ID, info.Name, err)
		}
		h := &StoreHandle{Info: info, Inner: inner, Cache: cache.New(inner, cfg.Budget)}
		if info.Logged {
			h.Changelog = cfg.Changelog(info.Name)
			if info.Kind == topology.VersionedKind {
				h.versions = new(versionLog)
			}
		}
		t.stores[info.Name] = h
		t.order = append(t.order, info.Name)
	}
	if len(adopted) > 0 {
		for _, h := range adopted {
			h.Inner.Close()
		}
		return nil, fmt.Errorf("task %s: adopted stores the sub-topology does not declare", cfg.ID)
	}
	g, err := graph.Of(cfg.Topology).NewTaskGraph(cfg.ID.SubTopology, env{t})
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", cfg.ID, err)
	}
	t.graph = g
	return t, nil
}

// ID returns the task's ID.
func (t *Active) ID() task.ID { return t.cfg.ID }

// Stores returns the task's stores in declaration order.
func (t *Active) Stores() []*StoreHandle {
	out := make([]*StoreHandle, 0, len(t.order))
	for _, n := range t.order {
		out = append(out, t.stores[n])
	}
	return out
}

// Store returns one of the task's stores by name.
func (t *Active) Store(name string) (*StoreHandle, bool) {
	h, ok := t.stores[name]
	return h, ok
}

// Restored tells the task its restoration ended and it is about to run:
// its stores hold everything their changelogs held when restoration began. From now on only commits
// write its stores, so their record caches may keep what they read (see
// cache.Store.SetReadCache), as do versioned stores, whose expired versions
// leave through the cache too; window and session stores drop expired
// segments as they are written, so they (and any other kind) read through.
func (t *Active) Restored() {
	for _, n := range t.order {
		h := t.stores[n]
		h.Cache.SetReadCache(h.Info.Kind == topology.KeyValueKind || h.Info.Kind == topology.VersionedKind)
	}
}

// Process runs one input record through the task's processors. The record's
// offset counts as consumed only if processing succeeds; see Skip. The
// task must be running: the thread checks its slot once per task of a poll,
// not once per record.
func (t *Active) Process(rec graph.InputRecord) error {
	t.processed++
	t.uncommitted = true
	if err := t.graph.Process(rec); err != nil {
		return err
	}
	t.markConsumed(rec.Topic, rec.Offset+1)
	return nil
}

func (t *Active) markConsumed(topic string, next int64) {
	t.uncommitted = true
	if t.lastNext == nil || topic != t.lastTopic {
		p, ok := t.consumed[topic]
		if !ok {
			p = new(int64)
			t.consumed[topic] = p
		}
		t.lastTopic, t.lastNext = topic, p
	}
	*t.lastNext = next
}

// Skip marks a record as consumed without processing it: a record the
// deserialization handler chose to skip, or a transaction marker, which
// holds no data but takes an offset the task's commit must cover.
func (t *Active) Skip(rec graph.InputRecord) { t.markConsumed(rec.Topic, rec.Offset+1) }

// Processed counts the records Process was given while the task ran,
// failed ones included.
func (t *Active) Processed() int64 { return t.processed }

// DroppedLate counts the records the task's windowed aggregations left
// out of closed windows (graph.LateCounter).
func (t *Active) DroppedLate() int64 {
	if lc, ok := t.graph.(graph.LateCounter); ok {
		return lc.DroppedLate()
	}
	return 0
}

// DroppedJoin counts the stream records the task's joins dropped for a
// null key or value (graph.JoinDropCounter).
func (t *Active) DroppedJoin() int64 {
	if jc, ok := t.graph.(graph.JoinDropCounter); ok {
		return jc.DroppedJoinRecords()
	}
	return 0
}

// Punctuations counts the punctuator calls the task made.
func (t *Active) Punctuations() int64 { return t.graph.Punctuations() }

// Punctuate runs punctuators that are due. The task must be running.
func (t *Active) Punctuate(now time.Time) error {
	before := t.graph.Punctuations()
	err := t.graph.Punctuate(now)
	if t.graph.Punctuations() != before {
		t.uncommitted = true
	}
	return err
}

// NextWallClockPunctuation is when the earliest of the task's wall-clock
// punctuators is next due; false without one. Its stream-time punctuators
// fall due only as it processes records.
func (t *Active) NextWallClockPunctuation() (time.Time, bool) { return t.graph.NextWallClock() }

// CommitNeeded reports whether a commit has anything to do for the task:
// it processed or skipped a record, or ran a punctuator, since its last
// complete commit (Kafka Streams' StreamTask.commitNeeded). A task without
// need holds no dirty cache entry, no held table update and no consumed
// offset its last commit did not cover, so a commit may leave it out
// altogether.
func (t *Active) CommitNeeded() bool { return t.uncommitted }

// Flush forwards the task's buffered table updates downstream (see
// graph.TableBuffering). Call it at every commit, before
// PendingChangelog: forwarding may write further stores. A task that has
// not run yet buffers nothing, so flushing it is harmless.
func (t *Active) Flush() error {
	return t.graph.Flush()
}

// PendingChangelog returns, for each logged store with writes since the last
// commit, the records to send to its changelog partition. Entries are
// sorted by key.
func (t *Active) PendingChangelog() []ChangelogWrite {
	var out []ChangelogWrite
	for _, n := range t.order {
		h := t.stores[n]
		if !h.Info.Logged {
			continue
		}
		d := h.Cache.Dirty()
		if h.versions != nil {
			d = h.versions.records
		}
		if len(d) > 0 {
			out = append(out, ChangelogWrite{Store: n, Topic: h.Changelog, Partition: t.cfg.ID.Partition, Entries: d})
		}
	}
	return out
}

// LastOffsetFunc reports the offset of the last changelog record acknowledged
// for a topic partition since the commit began.
type LastOffsetFunc func(topic string, partition int32) (offset int64, ok bool)

// CompleteCommit writes every store's pending writes into the store together
// with its new changelog position. It must be called only after every record
// returned by PendingChangelog has been acknowledged by the broker.
func (t *Active) CompleteCommit(last LastOffsetFunc) error {
	p, err := t.BeginCommit(last, func(statestore.Store) bool { return false })
	if err != nil {
		return err
	}
	return p.Finish(nil)
}

// PendingCommit is a commit of a task's stores begun by BeginCommit: the
// writes its caller makes, with other tasks' writes, before Finish.
type PendingCommit struct {
	// Writes are the writes of the stores BeginCommit's grouped accepted,
	// each with the changelog position it brings its store to.
	Writes []statestore.StoreWrite
	t      *Active
	dones  []func(error)
}

// errNotWritten releases the stores of a commit abandoned before their
// write was made.
var errNotWritten = errors.New("not written")

// BeginCommit is CompleteCommit for a caller that writes some of the
// stores itself, in one write with other tasks' stores
// (statestore.SharedBadger's Commit): the stores grouped accepts are
// returned in Writes, not written, and the others are written as
// CompleteCommit writes them. The caller then makes the writes and calls
// Finish with their outcome; the stores in Writes take no write before.
func (t *Active) BeginCommit(last LastOffsetFunc, grouped func(statestore.Store) bool) (*PendingCommit, error) {
	p := &PendingCommit{t: t}
	for _, n := range t.order {
		h := t.stores[n]
		pos := statestore.NoPosition
		if h.Info.Logged {
			if len(h.Cache.Dirty()) == 0 {
				// Nothing went to the changelog, so there is no position
				// to record, but tombstones the cache skipped
				// (cache.Store.SkipTombstone) are still to be released,
				// which a commit with nothing to write does.
				if err := h.Cache.Commit(statestore.NoPosition); err != nil {
					p.release(errNotWritten)
					return nil, fmt.Errorf("task %s: write store %q: %w", t.cfg.ID, n, err)
				}
				continue
			}
			off, ok := last(h.Changelog, t.cfg.ID.Partition)
			if !ok {
				p.release(errNotWritten)
				return nil, fmt.Errorf("task %s: store %q has pending writes but no acknowledged changelog offset", t.cfg.ID, n)
			}
			pos = off + 1
		}
		if h.versions != nil {
			// Sent with this commit's changelog records.
			h.versions.take()
		}
		if grouped(h.Inner) {
			if entries, done := h.Cache.BeginCommit(); len(entries) > 0 {
				p.Writes = append(p.Writes, statestore.StoreWrite{Store: h.Inner, Entries: entries, Position: pos})
				p.dones = append(p.dones, done)
			}
			continue
		}
		if err := h.Cache.Commit(pos); err != nil {
			p.release(errNotWritten)
			return nil, fmt.Errorf("task %s: write store %q: %w", t.cfg.ID, n, err)
		}
	}
	return p, nil
}

// Finish ends the commit with the outcome of the write of Writes, err.
// Without error the task's commit is complete, as after CompleteCommit;
// with one, the writes stay pending and Finish returns it.
func (p *PendingCommit) Finish(err error) error {
	p.release(err)
	if err != nil {
		return fmt.Errorf("task %s: write stores: %w", p.t.cfg.ID, err)
	}
	// An abort from here on returns the graph to this point.
	if d, ok := p.t.graph.(graph.Discarder); ok {
		d.Committed()
	}
	p.t.uncommitted = false
	return nil
}

func (p *PendingCommit) release(err error) {
	for _, done := range p.dones {
		done(err)
	}
	p.dones = nil
}

// Abort drops the task's writes since its last commit: its transaction did
// not commit, so its stores stay exactly at their recorded positions and the
// input will be processed again, by a graph whose times are back where they
// were at that commit.
func (t *Active) Abort() {
	if d, ok := t.graph.(graph.Discarder); ok {
		d.Discard()
	}
	for _, n := range t.order {
		t.stores[n].discard()
	}
	clear(t.consumed)
	t.lastTopic, t.lastNext = "", nil
	for topic, off := range t.committed {
		t.consumed[topic] = &off
	}
}

// OffsetsToCommit returns the input offsets consumed since the last call to
// MarkCommitted, keyed by topic (the partition is the task's).
func (t *Active) OffsetsToCommit() map[string]int64 {
	out := make(map[string]int64)
	for topic, next := range t.consumed {
		if off, ok := t.committed[topic]; !ok || off != *next {
			out[topic] = *next
		}
	}
	return out
}

// MarkCommitted records that offsets returned by OffsetsToCommit are
// committed.
func (t *Active) MarkCommitted(offsets map[string]int64) {
	for topic, off := range offsets {
		t.committed[topic] = off
	}
}

// Demote lets go of a restoring or running task for parking: it closes
// the task's processors but keeps its stores open and returns them, for
// the registry to hold until the next assignment says where the task goes.
// The caller must have committed the task: uncommitted writes are dropped.
// A task already demoted or closed is left as it is, with an error and no
// stores.
func (t *Active) Demote() ([]*StoreHandle, error) {
	if t.released {
		return nil, fmt.Errorf("task %s: demoted after it was let go", t.cfg.ID)
	}
	t.released = true
	var err error
	if t.graph != nil {
		if cerr := t.graph.Close(); cerr != nil {
			err = fmt.Errorf("task %s: close processors: %w", t.cfg.ID, cerr)
		}
	}
	out := make([]*StoreHandle, 0, len(t.order))
	for _, n := range t.order {
		h := t.stores[n]
		h.discard()
		// Whoever takes the stores next may write them directly.
		h.Cache.SetReadCache(false)
		out = append(out, h)
	}
	t.stores = nil
	t.order = nil
	return out, err
}

// Close closes the task's processors and stores; closing a task again, or
// one demoted, does nothing. A clean close assumes the caller committed; an
// unclean one drops writes not yet committed, so the stores keep exactly
// what their recorded positions say.
func (t *Active) Close(clean bool) error {
	if t.released {
		return nil
	}
	t.released = true
	var errs []error
	if t.graph != nil {
		if err := t.graph.Close(); err != nil {
			errs = append(errs, fmt.Errorf("task %s: close processors: %w", t.cfg.ID, err))
		}
	}
	if !clean {
		for _, h := range t.stores {
			h.discard()
		}
	}
	errs = append(errs, t.closeStores()...)
	return errors.Join(errs...)
}

func (t *Active) closeStores() []error {
	var errs []error
	for _, n := range t.order {
		h := t.stores[n]
		h.discard()
		h.Cache.SetReadCache(false) // returns its share of the budget
		if err := h.Inner.Close(); err != nil {
			errs = append(errs, fmt.Errorf("task %s: close store %q: %w", t.cfg.ID, n, err))
		}
	}
	return errs
}

// env is the task's face towards its processor graph.
type env struct{ t *Active }

func (e env) AppID() string                     { return e.t.cfg.AppID }
func (e env) TaskID() string                    { return e.t.cfg.ID.String() }
func (e env) Partition() int32                  { return e.t.cfg.ID.Partition }
func (e env) Now() time.Time                    { return e.t.cfg.Now() }
func (e env) Send(rec graph.OutputRecord) error { return e.t.cfg.Sender.Send(rec) }

// Logger implements graph.TaskLogger.
func (e env) Logger() *slog.Logger { return e.t.log }

// BufferTableUpdates implements graph.TableBuffering: with a record cache,
// tables forward each key's latest value at commit rather than every update.
func (e env) BufferTableUpdates() bool {
	return e.t.cfg.Budget != nil && e.t.cfg.Budget.Max() > 0
}

func (e env) Store(name string) (statestore.ReadWriter, error) {
	h, ok := e.t.stores[name]
	if !ok {
		if e.t.cfg.Global != nil {
			if g, ok := e.t.cfg.Global(name); ok {
				return g, nil
			}
		}
		return nil, fmt.Errorf("task %s: no store %q", e.t.cfg.ID, name)
	}
	if h.versions != nil {
		return versionLogged{h.Cache, h.versions}, nil
	}
	return h.Cache, nil
}
