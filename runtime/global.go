package runtime

// The global thread: it follows the global topics into their stores, which it restores before the App runs.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/statestore"
)

// Global tables (topology.GlobalTable). Every instance reads every
// partition of a global table's topic into one global store, on a global
// thread of its own: one goroutine per App driving a changelog.Reader,
// whose consumer belongs to no group, so global topics are never assigned
// and never rebalanced. Start restores every global store to the end
// offsets listed when it began before any stream thread starts; after that
// the thread follows the topics for as long as the App runs. The topic is
// the store's source of truth, as a changelog is a local store's: there is
// no changelog of its own.
//
// One store holds all partitions of its topic, so it keeps one position
// per partition, each written in the same atomic store write as the
// records it covers (see globalStore). A restart therefore reads only what
// each partition gained since.

// globalDirName is the state directory's folder holding the persistent
// global stores, one folder each, named after the store.
const globalDirName = "global"

// globalThread keeps an App's global stores: it restores them at Start and
// follows their topics afterwards.
type globalThread struct {
	a      *App
	log    *slog.Logger
	stores []*globalStore
	parts  map[string]int32 // store name → partitions of its topic
	reader *changelog.Reader
	cancel context.CancelFunc
	exited chan struct{}

	// ready is closed when every partition was first restored; failed is
	// closed, with err set, when the thread stops on an error.
	ready     chan struct{}
	readyOnce sync.Once
	failed    chan struct{}
	err       error

	mu sync.Mutex
	// restoring lists the partitions not yet restored to the end offset
	// listed when their restoration began.
	restoring map[changelog.TopicPartition]bool
	// caughtUp is, for each store, the oldest confirmation of the topic
	// ends it last had no lag to: the time as of which it held all its
	// topic held.
	caughtUp map[string]time.Time
	// restored counts records applied by finished restorations, and
	// followed records applied while following, since Start.
	restored, followed atomic.Int64
	// started is when start registered the partitions; took, set once
	// the gate opens, how long the first restoration took.
	started time.Time
	took    atomic.Int64
	// rebuilds counts the stores emptied and read again (Stats.StoreResets).
	rebuilds atomic.Int64
	// read counts, per partition, the records applied by registrations
	// that ended (finished restorations, released partitions); the
	// reader's progress counts the current one's.
	read map[changelog.TopicPartition]int64
}

// newGlobalThread opens the App's global stores, or returns nil when the
// topology has none.
func newGlobalThread(a *App) (*globalThread, error) {
	specs := graph.Of(a.topo).GlobalStores()
	if len(specs) == 0 {
		return nil, nil
	}
	t := &globalThread{a: a, log: a.log.With("thread", "global"), parts: make(map[string]int32),
		ready: make(chan struct{}), failed: make(chan struct{}),
		restoring: make(map[changelog.TopicPartition]bool), caughtUp: make(map[string]time.Time),
		read: make(map[changelog.TopicPartition]int64)}
	for _, s := range specs {
		n := a.plan.partitions[s.Topic]
		if n <= 0 {
			t.closeStores()
			return nil, fmt.Errorf("runtime: global table %q: partition count of topic %q unknown", s.Store.Name, s.Topic)
		}
		inner, err := a.openGlobal(s.Store)
		if err != nil {
			t.closeStores()
			return nil, fmt.Errorf("runtime: open global store %q: %w", s.Store.Name, err)
		}
		g, err := newGlobalStore(s.Store.Name, s.Topic, inner)
		if err != nil {
			inner.Close()
			t.closeStores()
			return nil, fmt.Errorf("runtime: open global store %q: %w", s.Store.Name, err)
		}
		t.stores = append(t.stores, g)
		t.parts[g.name] = n
	}
	return t, nil
}

// openGlobal opens the backing store of a global store: badger under the
// state directory's global folder (deleted and opened empty if its files
// are damaged: the topic rebuilds it), or memory.
func (a *App) openGlobal(info graph.StoreInfo) (statestore.Store, error) {
	if !info.Persistent {
		return statestore.NewMemory(), nil
	}
	dir := filepath.Join(a.appDir(), globalDirName, info.Name)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	return a.openBadgerOrRebuild(dir, globalBadgerOptions(), "global_store", info.Name)
}

// start registers every partition for restoration and starts the thread.
func (t *globalThread) start() error {
	rd, err := changelog.NewReader(changelog.ReaderConfig{
		Seeds:           t.a.cfg.Brokers,
		ClientOpts:      t.a.connOpts(),
		Logger:          t.log,
		ReadCommitted:   t.a.cfg.ProcessingGuarantee == ExactlyOnce,
		MaxBatchRecords: restoreBatchRecords,
	})
	if err != nil {
		return fmt.Errorf("runtime: global thread: %w", err)
	}
	t.reader = rd
	t.started = time.Now()
	for _, g := range t.stores {
		if err := t.registerAll(g, changelog.Restore); err != nil {
			rd.Close()
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel, t.exited = cancel, make(chan struct{})
	t.checkReady()
	go t.run(ctx)
	return nil
}

func (t *globalThread) registerAll(g *globalStore, mode changelog.Mode) error {
	for p := range t.parts[g.name] {
		if err := t.register(g, p, mode); err != nil {
			return err
		}
	}
	return nil
}

func (t *globalThread) register(g *globalStore, p int32, mode changelog.Mode) error {
	tp := changelog.TopicPartition{Topic: g.topic, Partition: p}
	if mode == changelog.Restore {
		t.mu.Lock()
		t.restoring[tp] = true
		t.mu.Unlock()
	}
	err := t.reader.Register(changelog.Partition{Topic: g.topic, Partition: p, Store: partitionView{g, p}, Mode: mode,
		Task: "global", StoreName: g.name})
	if err != nil {
		return fmt.Errorf("runtime: global store %q: %w", g.name, err)
	}
	return nil
}

func (t *globalThread) run(ctx context.Context) {
	defer close(t.exited)
	for {
		done, err := t.reader.Poll(ctx)
		if ferr := t.handle(done); ferr != nil {
			t.fail(ferr)
			return
		}
		if err != nil {
			if errors.Is(err, changelog.ErrClosed) || ctx.Err() != nil {
				return
			}
			t.log.Warn("global topic poll", "err", err)
		}
	}
}

// handle rebuilds the stores a partition reset, then acts on finished
// partitions: a restored one is followed from then on.
func (t *globalThread) handle(done []changelog.Completed) error {
	rebuilt := make(map[string]bool)
	for _, g := range t.stores {
		if !g.resetWanted.Load() {
			continue
		}
		t.log.Warn("a global store's position no longer fits its topic; emptying the store and reading the topic again", "store", g.name, "topic", g.topic)
		for p := range t.parts[g.name] {
			n, ok := t.reader.Release(g.topic, p)
			if ok && t.isReady() {
				t.followed.Add(n)
			}
			t.mu.Lock()
			t.read[changelog.TopicPartition{Topic: g.topic, Partition: p}] += n
			t.mu.Unlock()
		}
		if err := g.empty(); err != nil {
			return fmt.Errorf("runtime: empty global store %q: %w", g.name, err)
		}
		t.rebuilds.Add(1)
		if err := t.registerAll(g, changelog.Restore); err != nil {
			return err
		}
		rebuilt[g.name] = true
	}
	for _, c := range done {
		g := t.storeOf(c.Topic)
		if g == nil || rebuilt[g.name] {
			continue
		}
		if c.Err != nil {
			return fmt.Errorf("runtime: global store %q, topic %s partition %d: %w", g.name, c.Topic, c.Partition, c.Err)
		}
		if c.Mode != changelog.Restore {
			continue
		}
		t.restored.Add(c.Restored)
		tp := changelog.TopicPartition{Topic: c.Topic, Partition: c.Partition}
		t.mu.Lock()
		delete(t.restoring, tp)
		t.read[tp] += c.Restored
		t.mu.Unlock()
		if err := t.register(g, c.Partition, changelog.Follow); err != nil {
			return err
		}
	}
	t.checkReady()
	return nil
}

func (t *globalThread) storeOf(topic string) *globalStore {
	for _, g := range t.stores {
		if g.topic == topic {
			return g
		}
	}
	return nil
}

func (t *globalThread) checkReady() {
	t.mu.Lock()
	n := len(t.restoring)
	t.mu.Unlock()
	if n == 0 {
		t.readyOnce.Do(func() {
			t.took.Store(int64(time.Since(t.started)))
			t.log.Info("global stores restored", "records", t.restored.Load(), "took", time.Duration(t.took.Load()))
			close(t.ready)
		})
	}
}

func (t *globalThread) isReady() bool {
	select {
	case <-t.ready:
		return true
	default:
		return false
	}
}

func (t *globalThread) fail(err error) {
	t.err = err
	close(t.failed)
	t.a.fail(err)
}

// waitReady blocks until every global store is restored, the thread fails,
// ctx ends, or the App is closed or killed: Start waits here holding
// startMu, which a Close waits for.
func (t *globalThread) waitReady(ctx context.Context) error {
	select {
	case <-t.ready:
		return nil
	case <-t.failed:
		return t.err
	case <-ctx.Done():
		return fmt.Errorf("runtime: restoring the global stores: %w", ctx.Err())
	case <-t.a.closeAsked:
		return errors.New("runtime: closed while restoring the global stores")
	case <-t.a.killCtx.Done():
		return errors.New("runtime: killed while restoring the global stores")
	}
}

// close stops the thread and closes the stores.
func (t *globalThread) close() {
	if t.cancel != nil {
		t.cancel()
		t.reader.Close()
		<-t.exited
	} else if t.reader != nil {
		t.reader.Close()
	}
	t.closeStores()
}

func (t *globalThread) closeStores() {
	for _, g := range t.stores {
		if err := g.inner.Close(); err != nil {
			t.log.Warn("closing a global store", "store", g.name, "err", err)
		}
	}
}

func (t *globalThread) store(name string) (*globalStore, bool) {
	for _, g := range t.stores {
		if g.name == name {
			return g, true
		}
	}
	return nil, false
}

// info describes a global store for queries: positions and lags summed
// over its topic's partitions (see iq.RoleGlobal). A partition whose
// reader has no confirmed end makes the lag unknown; one still rebuilding
// from empty makes the store rebuilding.
func (t *globalThread) info(g *globalStore) iq.ReplicaInfo {
	now := time.Now()
	out := iq.ReplicaInfo{Store: g.name, Partition: 0, Role: iq.RoleGlobal, Position: -1, End: -1, Lag: -1,
		LagConfirmedAgo: iq.Unknown, CaughtUpAgo: iq.Unknown, InputCommittedAgo: 0, Restored: t.restored.Load(), ContactAgo: iq.Unknown}
	var pos, end, lag int64
	var oldest time.Time
	known := true
	for p := range t.parts[g.name] {
		pr, ok := t.reader.Progress(g.topic, p)
		if !ok {
			// Between a restoration's end and the follow's start, or
			// while the store is emptied: nothing is known.
			known = false
			continue
		}
		if pr.Rebuilding {
			out.Rebuilding = true
		}
		pos += max(pr.Position, 0)
		if pr.End < 0 || pr.EndConfirmed.IsZero() {
			known = false
			continue
		}
		end += pr.End
		lag += pr.Lag
		if oldest.IsZero() || pr.EndConfirmed.Before(oldest) {
			oldest = pr.EndConfirmed
		}
	}
	if !t.isReady() {
		// Not yet restored: a store read part way is no snapshot.
		out.Rebuilding = true
	}
	if !out.Rebuilding {
		out.Position = pos
	}
	if known && !oldest.IsZero() {
		out.End = end
		out.LagConfirmedAgo = max(now.Sub(oldest), 0)
		if !out.Rebuilding && out.LagConfirmedAgo <= LagConfirmWindow {
			out.Lag = lag
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if out.Lag == 0 && oldest.After(t.caughtUp[g.name]) {
		// Caught up with the ends the broker confirmed then, not now.
		t.caughtUp[g.name] = oldest
	}
	if at, ok := t.caughtUp[g.name]; ok {
		out.CaughtUpAgo = max(now.Sub(at), 0)
	}
	return out
}

// globalPartition is one partition of a global store's topic as the
// metrics show it.
type globalPartition struct {
	store     string
	partition int32
	// position is the offset of the next record to apply, -1 if none.
	position int64
	// lag is the records the partition lacks, -1 when not known (an end
	// never confirmed, or confirmed longer than LagConfirmWindow ago).
	lag int64
	// read counts the records applied since Start.
	read int64
}

// partitions describes every partition of every global store's topic.
func (t *globalThread) partitions() []globalPartition {
	now := time.Now()
	var out []globalPartition
	for _, g := range t.stores {
		for p := range t.parts[g.name] {
			gp := globalPartition{store: g.name, partition: p, position: -1, lag: -1}
			t.mu.Lock()
			gp.read = t.read[changelog.TopicPartition{Topic: g.topic, Partition: p}]
			t.mu.Unlock()
			if pr, ok := t.reader.Progress(g.topic, p); ok {
				gp.read += pr.Restored
				gp.position = max(pr.Position, -1)
				if pr.Lag >= 0 && !pr.EndConfirmed.IsZero() && now.Sub(pr.EndConfirmed) <= LagConfirmWindow {
					gp.lag = pr.Lag
				}
			}
			out = append(out, gp)
		}
	}
	return out
}

// infos describes every global store.
func (t *globalThread) infos() []iq.ReplicaInfo {
	var out []iq.ReplicaInfo
	for _, g := range t.stores {
		out = append(out, t.info(g))
	}
	return out
}

// names lists the global stores, sorted.
func (t *globalThread) names() []string {
	var out []string
	for _, g := range t.stores {
		out = append(out, g.name)
	}
	slices.Sort(out)
	return out
}

// globalReplica is a global store as the query layer reads it.
type globalReplica struct {
	t *globalThread
	g *globalStore
}

func (r globalReplica) Info() iq.ReplicaInfo    { return r.t.info(r.g) }
func (r globalReplica) Store() statestore.Store { return r.g }

// globalRestoredRecords is Stats.GlobalRestoredRecords.
func (a *App) globalRestoredRecords() int64 {
	if !a.serving.Load() || a.global == nil {
		return 0
	}
	return a.global.restored.Load()
}

// globalRestoreDuration is Stats.GlobalRestoreDuration.
func (a *App) globalRestoreDuration() time.Duration {
	if !a.serving.Load() || a.global == nil {
		return 0
	}
	return time.Duration(a.global.took.Load())
}

// globalFollowedRecords is Stats.GlobalFollowedRecords.
func (a *App) globalFollowedRecords() int64 {
	if !a.serving.Load() {
		return 0
	}
	t := a.global
	if t == nil || t.reader == nil {
		return 0
	}
	n := t.followed.Load()
	for _, g := range t.stores {
		for p := range t.parts[g.name] {
			if pr, ok := t.reader.Progress(g.topic, p); ok && pr.Mode == changelog.Follow {
				n += pr.Restored
			}
		}
	}
	return n
}

// globalStores describes this instance's global stores, as queries see
// them (iq.RoleGlobal) among the local replicas.
func (a *App) globalStores() []iq.ReplicaInfo {
	if a.global == nil {
		return nil
	}
	return a.global.infos()
}

// globalStore returns a global store for a task's joins.
func (a *App) globalStore(name string) (statestore.ReadWriter, bool) {
	if a.global == nil {
		return nil, false
	}
	g, ok := a.global.store(name)
	if !ok {
		return nil, false
	}
	return g, true
}
