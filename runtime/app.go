package runtime

// An App: its construction, start, close and failure.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/internal/instancecore"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// App is one instance of an application: a topology run by stream threads
// against Kafka. Create it with New, then Start it; Close it to leave the
// group cleanly.
type App struct {
	cfg  Config
	topo *topology.Topology
	log  *slog.Logger

	// state is the current State, read without locks; stateMu orders
	// its changes and the queue of the listener's calls (see setState).
	state   atomic.Int32
	stateMu sync.Mutex
	// notices holds the moves of state the listener has yet to hear of.
	notices stateNotices
	// badTransitions counts transitions setState refused (bugs).
	badTransitions atomic.Int64
	// startMu is held by Start, across all its I/O; Close and Kill take
	// it to wait for a Start in progress, whose clients and stores they
	// must not release while it makes them. Nothing else takes it, and
	// Start's long waits give up when Close asks (closeAsked) or Kill cuts
	// the network. closing is set by whichever of Close, Kill or a failed
	// Start stops the instance, so that it is stopped once.
	startMu sync.Mutex
	closing atomic.Bool
	// closeAsked is closed by the first Close, before it waits for a
	// Start in progress: a Start still waiting for the cluster to be
	// reachable gives up on it (see untilReachable).
	closeAsked     chan struct{}
	closeAskedOnce sync.Once
	// threadsUp is set once a.threads is complete and never changes
	// again; until then thread callbacks must not read it.
	threadsUp atomic.Bool
	// serving is set once Start has planned the topics and opened the
	// registry, which queries read.
	serving atomic.Bool
	dir     *stateDir
	// shared is the database of the task stores in the shared layout,
	// nil in the per-store one (see layout.go).
	shared  *statestore.SharedBadger
	admin   *kadm.Client
	adminCl *kgo.Client
	plan    *topicPlan
	threads []*thread
	// joins tells a leading thread which of the others have joined (see
	// localJoins).
	joins *localJoins

	// net is the dialer of every client; killCtx ends when Kill cuts it.
	net        *network
	killCtx    context.Context
	killCancel context.CancelFunc

	skipped atomic.Int64
	// processingErrors counts records skipped by ProcessingLogAndContinue.
	processingErrors atomic.Int64
	// enforced counts records processed past an empty input partition
	// whose TaskIdleTime had run out (Stats.EnforcedProcessing).
	enforced atomic.Int64
	// replaced counts stream threads replaced by ReplaceThread.
	replaced atomic.Int64
	// rejoins counts stream threads that joined the group again after it
	// refused their offset commit (errGroupMovedOn) or, under
	// at-least-once, the commit could not reach the broker.
	rejoins atomic.Int64
	// storesWiped counts stores deleted because their files were
	// damaged, or written with another layout.
	storesWiped atomic.Int64
	// damagedMu serialises admitDamaged's reading and writing of its
	// record; it exists for that file's I/O alone, which it spans.
	damagedMu sync.Mutex
	// landings are the tasks whose exactly-once commit is ending (see
	// landing.go): queries of their actives wait for the writes to land.
	landings commitLandings
	// diskFullWaits counts store writes refused for a full disk and
	// retried (see thread.writeStores).
	diskFullWaits atomic.Int64
	errLogs       logLimiter
	// shutdownReason, once set, asks the group to shut the application
	// down (ShutdownApplication); every subscription carries it.
	shutdownReason atomic.Pointer[string]
	restored       *restoreTally
	registry       *registry
	ahead          aheadStores
	// global keeps the global stores; nil without global tables.
	global  *globalThread
	fresh   *freshness
	purge   *purger
	metrics *metrics
	// openStoreHook, set only by tests, runs every store opening (open)
	// of openStore and openAhead in their stead: it may delay the opening
	// or wrap the store.
	openStoreHook func(id task.ID, info topology.StoreInfo, open func() (statestore.Store, error)) (statestore.Store, error)
	// fileLimit raises the open-file limit and returns it (0: none);
	// tests replace it to stand for a low limit.
	fileLimit func() (uint64, error)
	// transitionHook, set only by tests before Start, is told of every
	// state transition the instance core's replicas make (kind
	// "replica"; the core refuses illegal ones itself, so err is nil).
	transitionHook func(kind string, id task.ID, from, to task.State, err error)

	// watches hands the replicas' writes to live queries (watch.go).
	watches iq.Hub

	// assignment is the latest assignment any thread received.
	assignment atomic.Pointer[groupproto.AssignmentInfo]
	// routing is the routing table queries use; router keeps it in step
	// with the assignments (see routing.go).
	routing atomic.Pointer[iq.Metadata]
	router  *router
	// startRouting is the group's routing table as Start found it when
	// checking access to the group, nil if it was not settled then.
	startRouting *groupproto.Routing
	probeMu      sync.Mutex
	probe        *time.Timer // the next probing rebalance

	// startIDs are the topic IDs seen at start; watchTopics compares the
	// broker's with them (see wipe.go).
	startIDs  map[string]kadm.TopicID
	stopWatch context.CancelFunc
	watchDone chan struct{}
	rewires   atomic.Int64
	// recreatedResets counts stores deleted because their changelog was
	// recreated; Stats.StoreResets includes them.
	recreatedResets atomic.Int64

	closeOnce sync.Once
	done      chan struct{}
	errMu     sync.Mutex
	err       error
}

// New checks the configuration and the topology and returns an App that is
// not yet connected to anything.
func New(topo *topology.Topology, cfg Config) (*App, error) {
	if topo == nil {
		return nil, errors.New("runtime: nil topology")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	a := &App{
		cfg:  cfg,
		topo: topo,
		log:  cfg.Logger.With("app", cfg.ApplicationID),
		done: make(chan struct{}),
		net:  newNetwork(cfg.TLS, cfg.Dial),

		closeAsked: make(chan struct{}),

		restored:  newRestoreTally(),
		joins:     newLocalJoins(cfg.NumStreamThreads),
		fileLimit: raiseFileLimit,
	}
	a.killCtx, a.killCancel = context.WithCancel(context.Background())
	a.metrics = newMetrics(a)
	return a, nil
}

// State returns the App's lifecycle state.
func (a *App) State() State { return State(a.state.Load()) }

// ProcessID is the instance's stable ID, kept in its state directory across
// restarts. It is empty before Start.
func (a *App) ProcessID() string {
	if a.dir == nil {
		return ""
	}
	return a.dir.processID
}

// Done is closed when the App stops, whether by Close or by a fatal error.
func (a *App) Done() <-chan struct{} { return a.done }

// Err returns the fatal error that stopped the App, if any.
func (a *App) Err() error {
	a.errMu.Lock()
	defer a.errMu.Unlock()
	return a.err
}

// Start locks the state directory, creates or verifies the application's
// internal topics, raises the open-file limit to its hard limit (failing,
// with ErrFileLimit, if that cannot hold the stores of every task),
// restores the global stores (topology.GlobalTable) to the ends of their
// topics, waiting for that as long as ctx allows and no Close comes, and
// starts the stream threads. It moves the App from Created to Rebalancing
// at once; it returns once the threads are running, and they join the
// group in the background (the App is Running once they have their
// assignments and restored their active tasks). A failed Start leaves the
// App Failed.
func (a *App) Start(ctx context.Context) (err error) {
	// Held across Start's I/O and log lines: it is what Close and Kill
	// wait on, for the whole of Start.
	a.startMu.Lock()
	defer a.startMu.Unlock()
	if a.closing.Load() || !a.setState(StateRebalancing, StateCreated) {
		return fmt.Errorf("runtime: Start called in state %s", a.State())
	}
	defer func() {
		if err != nil {
			a.setErr(err)
			a.shutdown(context.Background(), instancecore.ShutdownFailedStart)
		}
	}()
	if err := a.prepare(ctx); err != nil {
		return err
	}
	a.serving.Store(true)
	a.router.learnGroup(a.startRouting)
	if a.global != nil {
		// Global stores are restored before any stream thread exists,
		// so the first record processed already sees them whole.
		if err := a.global.waitReady(ctx); err != nil {
			return err
		}
	}
	budget := a.cfg.CacheMaxBytes / int64(a.cfg.NumStreamThreads)
	for i := range a.cfg.NumStreamThreads {
		th, err := newThread(a, i, cache.NewBudget(budget))
		if err != nil {
			for _, t := range a.threads {
				t.abort()
			}
			a.threads = nil
			return err
		}
		a.threads = append(a.threads, th)
	}
	// The watcher starts before the threads: a thread that fails at once
	// releases the App, which stops the watcher.
	wctx, cancel := context.WithCancel(context.Background())
	a.stopWatch = cancel
	a.watchDone = make(chan struct{})
	go func() {
		defer close(a.watchDone)
		a.watchTopics(wctx, a.startIDs)
	}()
	a.threadsUp.Store(true)
	for _, th := range a.threads {
		go th.run()
	}
	a.log.Info("started", "threads", len(a.threads), "state_dir", a.dir.path)
	return nil
}

// prepare does what Start does before the stream threads exist: it locks
// the state directory, connects the admin client, plans the topics, checks
// the open-file limit and opens the replica registry.
func (a *App) prepare(ctx context.Context) (err error) {
	a.dir, err = openStateDir(filepath.Join(a.cfg.StateDir, a.cfg.ApplicationID))
	if err != nil {
		return err
	}
	a.log = a.log.With("process", a.dir.processID)
	a.adminCl, err = kgo.NewClient(a.clientOpts()...)
	if err != nil {
		return fmt.Errorf("runtime: admin client: %w", err)
	}
	a.admin = kadm.NewClient(a.adminCl)
	if err := a.untilReachable(ctx, func() error { return a.checkCluster(ctx) }); err != nil {
		return AuthFailure(err, a.cfg.Brokers, a.cfg.SASL)
	}
	// Before any store is opened: the registry opens those on disk.
	if err := a.checkFileLimit(); err != nil {
		return err
	}
	if err := a.openLayout(); err != nil {
		return err
	}
	if err := a.forgetRecreatedState(a.startIDs); err != nil {
		return err
	}
	if a.registry, err = newRegistry(a); err != nil {
		return err
	}
	if a.global, err = newGlobalThread(a); err != nil {
		return err
	}
	if a.global != nil {
		// Started before queries are served, which read its reader.
		if err := a.global.start(); err != nil {
			return err
		}
	}
	a.fresh = newFreshness(a, FreshnessInterval, FreshnessQuietInterval)
	a.purge = newPurger(a.killCtx, a.admin, a.cfg.ApplicationID, a.plan.repartitions, a.cfg.RepartitionPurgeInterval, a.log)
	a.router = newRouter(a)
	return nil
}

// checkCluster is what Start asks of the cluster: access to the group,
// the topic plan (creating missing internal topics) and access to its
// topics, and the topics' IDs. Each check is a round trip or more; those
// that do not need each other's answers overlap (see startup.go). Run
// again after a failure, it repeats what succeeded: creating a topic that
// exists is not an error.
func (a *App) checkCluster(ctx context.Context) error {
	var groupErr error
	err := alongside(func() { groupErr = a.checkGroupAccess(ctx) }, func() error {
		var err error
		a.plan, err = planTopics(ctx, a.admin, a.topo, a.cfg)
		return err
	})
	if err != nil {
		return errors.Join(err, groupErr)
	}
	var accessErr error
	err = alongside(func() { accessErr = errors.Join(groupErr, a.checkPlannedAccess(ctx)) }, func() error {
		var err error
		a.startIDs, err = a.topicIDs(ctx)
		return err
	})
	// A missing ACL explains a failed describe, so it comes first.
	if accessErr != nil {
		return accessErr
	}
	if err != nil {
		return fmt.Errorf("runtime: describe topics: %w", err)
	}
	return nil
}

// Close stops processing, commits what was processed, closes every store and
// leaves the group so the remaining instances take over at once. It moves
// the App to PendingShutdown, then NotRunning (or, when a fatal error is
// stopping it, from PendingError to Failed). It is safe to call more than
// once and after a fatal error; a Close called while Start runs waits for
// Start to return.
func (a *App) Close(ctx context.Context) error {
	won, err := a.shutdown(ctx, instancecore.ShutdownClose)
	if !won {
		return a.closeErr()
	}
	a.log.Info("closed")
	return err
}

// stopped ends a shutdown: PendingShutdown becomes NotRunning and
// PendingError Failed, and Done is closed.
func (a *App) stopped() {
	if !a.setState(StateNotRunning, StatePendingShutdown) {
		a.setState(StateFailed, StatePendingError)
	}
	a.closeOnce.Do(func() { close(a.done) })
}

// leaveStatic takes the instance's static members out of the group: a
// static member's client does not leave when it closes (so that a restart
// can take its place back), but a clean Close should hand its tasks over
// at once.
func (a *App) leaveStatic(ctx context.Context) error {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = a.cfg.ApplicationID
	for _, th := range a.threads {
		m := kmsg.NewLeaveGroupRequestMember()
		m.InstanceID = kmsg.StringPtr(th.instanceID())
		m.Reason = kmsg.StringPtr("eddy instance closing")
		req.Members = append(req.Members, m)
	}
	resp, err := req.RequestWith(ctx, a.adminCl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("runtime: leave the group as static members: %w", err)
	}
	for _, m := range resp.Members {
		if e := kerr.ErrorForCode(m.ErrorCode); e != nil && !errors.Is(e, kerr.UnknownMemberID) {
			return fmt.Errorf("runtime: leave the group as static member %s: %w", *m.InstanceID, e)
		}
	}
	return nil
}

func (a *App) closeErr() error {
	if a.State() == StateFailed {
		return a.Err()
	}
	return nil
}

// requestApplicationShutdown asks the group to shut every instance down
// (ShutdownApplication): the subscriptions of this instance's threads carry
// the reason from now on, and a rebalance makes the leader read them. If no
// assignment carrying the shutdown arrives within the rebalance timeout,
// this instance shuts down alone.
func (a *App) requestApplicationShutdown(err error) {
	reason := fmt.Sprintf("instance %s: %v", a.dir.processID, err)
	if !a.shutdownReason.CompareAndSwap(nil, &reason) {
		return
	}
	a.log.Error("asking every instance of the application to shut down", "err", err)
	for _, th := range a.threads {
		go th.forceRebalance()
	}
	time.AfterFunc(a.cfg.RebalanceTimeout, func() {
		a.fail(fmt.Errorf("runtime: the group did not act on the request to shut the application down within %s; shutting this instance down: %w", a.cfg.RebalanceTimeout, err))
	})
}

// fail records a fatal error from a thread, moves the App to PendingError
// and stops it in the background: the thread that failed cannot close the
// others while it is still inside its own loop. An error met while Close
// or Kill is already stopping the App is recorded (Err) but does not
// change the state.
func (a *App) fail(err error) {
	if a.setErr(err) {
		a.log.Error("fatal error, stopping", "err", err)
		a.setState(StatePendingError, StateRebalancing, StateRunning)
		go a.Close(context.Background())
	}
}

func (a *App) setErr(err error) bool {
	a.errMu.Lock()
	defer a.errMu.Unlock()
	if a.err != nil {
		return false
	}
	a.err = err
	return true
}
