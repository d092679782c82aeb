package instancecore

import "fmt"

// ShutdownKind is how an instance stops.
type ShutdownKind uint8

const (
	// ShutdownClose: a clean close. The threads commit and close their
	// actives, static members leave the group, then everything the
	// instance holds is closed.
	ShutdownClose ShutdownKind = iota
	// ShutdownKill: a crash. The network is cut first, so that nothing
	// more reaches the brokers, and the threads stop without committing;
	// then everything the instance holds is closed.
	ShutdownKill
	// ShutdownFailedStart: Start failed. No stream thread runs; what
	// Start opened is closed.
	ShutdownFailedStart
	numShutdownKinds
)

var shutdownKindNames = [...]string{"close", "kill", "failed-start"}

func (k ShutdownKind) String() string {
	if int(k) < len(shutdownKindNames) {
		return shutdownKindNames[k]
	}
	return fmt.Sprintf("ShutdownKind(%d)", k)
}

// ShutdownStep is one action of a shutdown, which the driver carries out
// and reports (Shutdown.Report) before it is told the next.
type ShutdownStep uint8

const (
	// StepDone: the shutdown is over; nothing is left to do.
	StepDone ShutdownStep = iota
	// StepAskClose: tell a Start still waiting for the cluster to be
	// reachable to give up.
	StepAskClose
	// StepSever: cut the network (open connections closed, dials
	// refused) and end the context of the instance's background work.
	StepSever
	// StepAwaitStart: wait for a Start in progress to return. Outcome:
	// Threads, how many stream threads it started.
	StepAwaitStart
	// StepKillThreads: tell every thread it is killed (nothing more is
	// committed) and stop it.
	StepKillThreads
	// StepTake: become the instance's one shutdown. Outcome: Won; a
	// shutdown that loses waits for the winner (StepAwaitDone).
	StepTake
	// StepAwaitDone: another shutdown holds the instance; wait for it to
	// end.
	StepAwaitDone
	// StepPendingShutdown: the instance's state moves to PendingShutdown.
	StepPendingShutdown
	// StepPendingError: the instance's state moves to PendingError.
	StepPendingError
	// StepStopThreads: ask every thread to stop.
	StepStopThreads
	// StepAwaitThreads: wait, within the caller's deadline, for every
	// thread to commit and close its actives and exit.
	StepAwaitThreads
	// StepAwaitExits: wait for every killed thread to exit.
	StepAwaitExits
	// StepLeaveGroup: take the instance's static members out of the
	// group, which their clients do not do when they close. Only under
	// static membership, and only when threads ran.
	StepLeaveGroup
	// StepStopWatcher: stop watching the topics, before the threads'
	// clients and the registry it rewires are closed.
	StepStopWatcher
	// StepStopProbe: cancel the next probing rebalance.
	StepStopProbe
	// StepCloseFreshness: stop listing the changelogs' ends, before the
	// admin client it lists them with is closed.
	StepCloseFreshness
	// StepCloseRegistry: close every standby, warmup and parked replica,
	// once the threads have closed their actives.
	StepCloseRegistry
	// StepCloseAhead: close the stores opened ahead of claims.
	StepCloseAhead
	// StepStopGlobal: stop the global thread and close the global stores.
	StepStopGlobal
	// StepClosePurger: stop purging repartition topics, before the admin
	// client it deletes records with is closed.
	StepClosePurger
	// StepCloseRouter: stop following the group's routing table, before
	// the admin client it describes the group with is closed.
	StepCloseRouter
	// StepCloseAdmin: close the admin client.
	StepCloseAdmin
	// StepCloseLayout: close the shared store database, after everything
	// that holds a store (threads, registry, stores opened ahead, global
	// stores).
	StepCloseLayout
	// StepCloseStateDir: unlock the state directory, last: another
	// instance may take it once it is free.
	StepCloseStateDir
	// StepStopped: the instance's state moves on to NotRunning (or from
	// PendingError to Failed) and its end is announced.
	StepStopped
	numShutdownSteps
)

var shutdownStepNames = [...]string{"Done", "AskClose", "Sever", "AwaitStart", "KillThreads", "Take", "AwaitDone",
	"PendingShutdown", "PendingError", "StopThreads", "AwaitThreads", "AwaitExits", "LeaveGroup", "StopWatcher",
	"StopProbe", "CloseFreshness", "CloseRegistry", "CloseAhead", "StopGlobal", "ClosePurger", "CloseRouter",
	"CloseAdmin", "CloseLayout", "CloseStateDir", "Stopped"}

func (s ShutdownStep) String() string {
	if int(s) < len(shutdownStepNames) {
		return shutdownStepNames[s]
	}
	return fmt.Sprintf("ShutdownStep(%d)", s)
}

// releaseOrder closes what every kind of shutdown closes, in this order:
// each step's doc says what it must come before or after.
var releaseOrder = []ShutdownStep{StepStopWatcher, StepStopProbe, StepCloseFreshness, StepCloseRegistry,
	StepCloseAhead, StepStopGlobal, StepClosePurger, StepCloseRouter, StepCloseAdmin, StepCloseLayout,
	StepCloseStateDir}

// shutdownOrders is each kind's sequence up to what it releases. A clean
// close asks a Start in progress to give up and stops the threads once it
// holds the shutdown; a kill cuts the network first (a Start in progress,
// cut off, returns soon) and stops the threads before it knows whether it
// holds the shutdown, since a crash stops everything whoever else is
// closing.
var shutdownOrders = [numShutdownKinds][]ShutdownStep{
	ShutdownClose: {StepAskClose, StepAwaitStart, StepTake, StepPendingShutdown, StepStopThreads,
		StepAwaitThreads, StepLeaveGroup},
	ShutdownKill:        {StepSever, StepAwaitStart, StepKillThreads, StepTake, StepPendingShutdown, StepAwaitExits},
	ShutdownFailedStart: {StepTake, StepPendingError},
}

// ShutdownPhase is where a shutdown stands.
type ShutdownPhase uint8

const (
	// PhasePreparing: the shutdown is not the instance's yet.
	PhasePreparing ShutdownPhase = iota
	// PhaseStopping: the shutdown holds the instance and stops its
	// threads.
	PhaseStopping
	// PhaseReleasing: the threads are stopped; what the instance holds
	// is closed.
	PhaseReleasing
	// PhaseDeferred: another shutdown holds the instance; this one waits
	// for it.
	PhaseDeferred
	// PhaseDone: nothing is left to do.
	PhaseDone
)

var shutdownPhaseNames = [...]string{"preparing", "stopping", "releasing", "deferred", "done"}

func (p ShutdownPhase) String() string {
	if int(p) < len(shutdownPhaseNames) {
		return shutdownPhaseNames[p]
	}
	return fmt.Sprintf("ShutdownPhase(%d)", p)
}

// ShutdownOutcome is what came of the step the driver was told to carry
// out.
type ShutdownOutcome struct {
	Step ShutdownStep
	// Failed: the step did not succeed. The order does not change: what
	// is left is closed all the same, and the driver reports the error.
	Failed bool
	// Won: StepTake made this shutdown the instance's.
	Won bool
	// Threads: how many stream threads ran (StepAwaitStart).
	Threads int
}

// Shutdown decides the order in which an instance stops: the driver asks
// it for the next step (Next), carries the step out, and reports its
// outcome (Report), until Next answers StepDone. It does no I/O and is not
// safe for concurrent use: each shutdown has its own.
type Shutdown struct {
	kind   ShutdownKind
	static bool
	// order is the kind's sequence followed by the release; at is the
	// index of the step owed, len(order) once done.
	order   []ShutdownStep
	at      int
	phase   ShutdownPhase
	threads int
	failed  []ShutdownStep
}

// NewShutdown begins a shutdown of the given kind; static says whether the
// instance's threads are static members of the group.
func NewShutdown(kind ShutdownKind, static bool) *Shutdown {
	if kind >= numShutdownKinds {
		panic(fmt.Sprintf("instancecore: no shutdown of kind %s", kind))
	}
	order := append(append([]ShutdownStep(nil), shutdownOrders[kind]...), releaseOrder...)
	order = append(order, StepStopped)
	s := &Shutdown{kind: kind, static: static, order: order}
	s.skip()
	return s
}

// Next returns the step the driver carries out now, StepDone once nothing
// is left.
func (s *Shutdown) Next() ShutdownStep {
	if s.at >= len(s.order) {
		return StepDone
	}
	return s.order[s.at]
}

// Phase returns where the shutdown stands.
func (s *Shutdown) Phase() ShutdownPhase { return s.phase }

// Failed lists the steps reported failed, in order.
func (s *Shutdown) Failed() []ShutdownStep { return s.failed }

// Report records the outcome of the step Next returned and moves on. An
// outcome of any other step is refused, changing nothing.
func (s *Shutdown) Report(o ShutdownOutcome) error {
	owed := s.Next()
	if owed == StepDone || o.Step != owed {
		return fmt.Errorf("%w: shutdown outcome of %s while %s is owed", ErrRefused, o.Step, owed)
	}
	if o.Failed {
		s.failed = append(s.failed, o.Step)
	}
	switch o.Step {
	case StepAwaitStart:
		s.threads = o.Threads
	case StepTake:
		if !o.Won {
			// The winner stops and releases everything; this one only
			// waits for it.
			s.order = []ShutdownStep{StepAwaitDone}
			s.at = 0
			s.phase = PhaseDeferred
			return nil
		}
		s.phase = PhaseStopping
	}
	s.at++
	s.skip()
	return nil
}

// skip passes over the steps that do not apply, and moves the phase on
// when the release begins or the shutdown ends.
func (s *Shutdown) skip() {
	for s.at < len(s.order) && s.order[s.at] == StepLeaveGroup && !(s.static && s.threads > 0) {
		s.at++
	}
	switch {
	case s.at >= len(s.order):
		s.phase = PhaseDone
	case s.order[s.at] == releaseOrder[0]:
		s.phase = PhaseReleasing
	}
}
