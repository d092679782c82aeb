package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/task"
)

// restoreBatchRecords caps one store write of restoration or standby
// updating: the changelog reader's default, one badger transaction.
const restoreBatchRecords = changelog.DefaultMaxBatchRecords

// restorer reads the changelogs of a thread's restoring tasks into their
// stores on a goroutine of its own, so that restoring one task never stalls
// processing of the others. The thread collects finished tasks with
// finished, between polls.
//
// A restoring task's stores belong to the restorer: the thread does not read
// or write them until the task is reported finished or unregistered (and
// Unregister waits for a write in progress).
type restorer struct {
	reader *changelog.Reader
	log    *slog.Logger
	cancel context.CancelFunc
	exited chan struct{}

	mu      sync.Mutex
	pending map[task.ID]*restoring // tasks with changelogs still being read
	done    []task.ID              // finished, not yet collected
	failed  error
	// tally is the instance's count of records finished restorations
	// applied, shared by every thread's restorer.
	tally *restoreTally
}

// restoreTally counts, per changelog partition, the records applied by
// restorations that finished since the instance started, whichever thread
// ran them: a task that moves between threads keeps its count.
type restoreTally struct {
	mu sync.Mutex
	n  map[changelog.TopicPartition]int64
}

func newRestoreTally() *restoreTally {
	return &restoreTally{n: make(map[changelog.TopicPartition]int64)}
}

func (t *restoreTally) add(tp changelog.TopicPartition, n int64) {
	t.mu.Lock()
	t.n[tp] += n
	t.mu.Unlock()
}

func (t *restoreTally) get(tp changelog.TopicPartition) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[tp]
}

func (t *restoreTally) total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	for _, v := range t.n {
		n += v
	}
	return n
}

type restoring struct {
	parts map[changelog.TopicPartition]bool // changelog partitions not yet complete
}

func newRestorer(a *App, log *slog.Logger) (*restorer, error) {
	r := &restorer{log: log, tally: a.restored}
	if err := r.start(a, log); err != nil {
		return nil, err
	}
	return r, nil
}

// start gives the restorer a new changelog reader, with a client that knows
// nothing of topics it read before, and nothing to restore. The thread
// calls it inside a batch in flight (pauseForRewire), after stop, when its
// topics were recreated.
func (r *restorer) start(a *App, log *slog.Logger) error {
	rd, err := changelog.NewReader(changelog.ReaderConfig{
		Seeds:         a.cfg.Brokers,
		ClientOpts:    a.connOpts(),
		Logger:        log,
		ReadCommitted: a.cfg.ProcessingGuarantee == ExactlyOnce,
		// A task starts from the group's committed offsets, which may
		// cover input whose results lie past the changelog's last
		// stable offset (see changelog.ReaderConfig).
		ThroughOpenTransactions: true,
		// Small enough for one badger transaction with small values, so
		// queries never see part of a batch.
		MaxBatchRecords: restoreBatchRecords,
		Applied:         a.publishApplied,
	})
	if err != nil {
		return fmt.Errorf("runtime: changelog reader: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.mu.Lock()
	r.reader, r.cancel, r.exited = rd, cancel, make(chan struct{})
	r.pending, r.done, r.failed = make(map[task.ID]*restoring), nil, nil
	r.mu.Unlock()
	go r.run(ctx, rd, r.exited)
	return nil
}

func (r *restorer) run(ctx context.Context, rd *changelog.Reader, exited chan struct{}) {
	defer close(exited)
	for {
		completed, err := rd.Poll(ctx)
		r.complete(completed)
		if err != nil {
			if errors.Is(err, changelog.ErrClosed) || ctx.Err() != nil {
				return
			}
			r.log.Warn("changelog poll", "err", err)
		}
	}
}

func (r *restorer) complete(cs []changelog.Completed) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		id, err := task.ParseID(c.Task)
		if err != nil {
			continue
		}
		if c.Err != nil {
			if r.failed == nil {
				r.failed = fmt.Errorf("runtime: restore task %s from %s/%d: %w", id, c.Topic, c.Partition, c.Err)
			}
			continue
		}
		tp := changelog.TopicPartition{Topic: c.Topic, Partition: c.Partition}
		r.tally.add(tp, c.Restored)
		p, ok := r.pending[id]
		if !ok {
			continue
		}
		delete(p.parts, tp)
		if len(p.parts) == 0 {
			delete(r.pending, id)
			r.done = append(r.done, id)
		}
	}
}

// register starts restoring a task's logged stores. A task without any is
// finished at once.
func (r *restorer) register(t *taskrun.Active) error {
	p := &restoring{parts: make(map[changelog.TopicPartition]bool)}
	r.mu.Lock()
	r.pending[t.ID()] = p
	for _, h := range t.Stores() {
		if h.Changelog != "" {
			p.parts[changelog.TopicPartition{Topic: h.Changelog, Partition: t.ID().Partition}] = true
		}
	}
	if len(p.parts) == 0 {
		delete(r.pending, t.ID())
		r.done = append(r.done, t.ID())
	}
	r.mu.Unlock()
	for _, h := range t.Stores() {
		if h.Changelog == "" {
			continue
		}
		err := r.reader.Register(changelog.Partition{
			Topic: h.Changelog, Partition: t.ID().Partition, Store: h.Inner, Mode: changelog.Restore,
			Task: t.ID().String(), StoreName: h.Info.Name,
		})
		if err != nil {
			r.unregister(t)
			return fmt.Errorf("runtime: restore task %s: %w", t.ID(), err)
		}
	}
	return nil
}

// unregister stops restoring a task; when it returns the restorer no longer
// touches the task's stores.
func (r *restorer) unregister(t *taskrun.Active) {
	r.mu.Lock()
	delete(r.pending, t.ID())
	r.mu.Unlock()
	for _, h := range t.Stores() {
		if h.Changelog == "" {
			continue
		}
		// A restoration cut short (a task revoked while restoring)
		// counts what it restored: its successor starts from there.
		if n, ok := r.reader.Release(h.Changelog, t.ID().Partition); ok {
			r.tally.add(changelog.TopicPartition{Topic: h.Changelog, Partition: t.ID().Partition}, n)
		}
	}
}

// finished returns the tasks whose restoration completed since the last
// call, or the first restoration failure.
func (r *restorer) finished() ([]task.ID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed != nil {
		return nil, r.failed
	}
	out := r.done
	r.done = nil
	return out, nil
}

// active reports whether any task is restoring.
func (r *restorer) active() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) > 0 || len(r.done) > 0
}

// restoredRecords returns how many changelog records restoration applied to
// a task's stores since the instance started, including a restoration in
// progress.
func (r *restorer) restoredRecords(t *taskrun.Active) int64 {
	var n int64
	for _, h := range t.Stores() {
		if h.Changelog != "" {
			n += r.restoredInto(h.Changelog, t.ID().Partition)
		}
	}
	return n
}

// restoredInto is restoredRecords for one changelog partition.
func (r *restorer) restoredInto(topic string, partition int32) int64 {
	n := r.tally.get(changelog.TopicPartition{Topic: topic, Partition: partition})
	if p, ok := r.reader.Progress(topic, partition); ok {
		n += p.Restored
	}
	return n
}

// progress returns the reading state of one changelog partition.
func (r *restorer) progress(topic string, partition int32) (changelog.Progress, bool) {
	return r.reader.Progress(topic, partition)
}

func (r *restorer) close() { r.stop() }

// stop closes the reader; start gives the restorer a new one. Closing a
// stopped restorer is a no-op.
func (r *restorer) stop() {
	r.mu.Lock()
	rd, cancel, exited := r.reader, r.cancel, r.exited
	r.cancel = nil
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	rd.Close()
	<-exited
}

// storeResets counts the store resets of the current reader.
func (r *restorer) storeResets() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reader.StoreResets()
}

// isDone reports whether a task registered for restoration has finished
// (its completion may not have been collected by the thread yet).
func (r *restorer) isDone(id task.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.done, id)
}
