// Package instancecore is the pure registry of an instance's replicas: for
// every task whose state the instance holds it keeps the replica's one
// state (task.State) and who owns it, and decides, from the events its
// driver reports (a thread's share of the assignment, revocations, claims,
// the outcomes of opening, closing and deleting stores), what happens to
// the stores: an active claimed from a parked or standby replica, an active
// parked or closed at its revocation, a parked replica adopted as a standby
// or warmup, a standby retagged as a warmup, stores closed and directories
// deleted, which stores a thread opens ahead of its claims and when they
// are let go, what a thread that exits leaves behind, and, while the
// instance replaces its clients (a pause) or closes, every replica no
// thread owns closed and the directories of recreated changelogs wiped. It
// also answers which replicas queries may read (Core.Servable).
//
// The core does no I/O and reads no clock: the driver stamps events with
// its time (Event.At) and ticks the core (EvTick), and the core deletes the
// directories left on disk past the cleanup delay. Facts of the topology
// and the disk are the driver's, given as inputs: which directories sit on
// changelogs recreated while paused (EvWipe), whether a closed replica's
// directory holds state worth keeping (EvClosed), which stores of a task
// are persistent or windowed (EvAhead), and when a directory found at
// start was last written (Config.OnDisk). Its driver carries out
// the actions a step returns, without holding the core's lock across the
// stores' I/O, and reports each outcome as an event. A replica whose I/O
// is in flight is busy: no decision touches it until its outcome arrives.
//
// Beside the core, Shutdown decides the order in which the instance stops
// (a clean close, a kill or a failed start), one step at a time, each
// carried out and reported by the driver.
package instancecore

import (
	"fmt"
	"time"

	"github.com/eddystreams/eddy/task"
)

// Share is a thread's share of the assignment.
type Share struct {
	Active, Standby, Warmup []task.ID
}

// EventKind names what the driver reports.
type EventKind uint8

const (
	// EvShare: Thread took its assignment, Share.
	EvShare EventKind = iota
	// EvRevoked: Thread gave up its assignment (revoked or lost); its
	// next one is not known yet.
	EvRevoked
	// EvClaim: Thread is to run Task as active. Answered by ActOpenActive,
	// ActHandOver, ActPromote or ActHeld.
	EvClaim
	// EvStarted: Thread built Task around its stores and restores it.
	EvStarted
	// EvClaimFailed: Thread could not build the Task it claimed; its
	// stores are closed by the thread.
	EvClaimFailed
	// EvRestored: Task's active caught up and runs.
	EvRestored
	// EvRelease: Thread let Task go at a revocation. Committed: its work
	// is committed (otherwise it is discarded). Demoted: its stores could
	// be kept open.
	EvRelease
	// EvCloseActive: Thread closes Task for good (a loss, a stop, a
	// failure).
	EvCloseActive
	// EvOpened: the standby or warmup of an ActOpenStandby or ActAdopt
	// follows its changelogs (OK), or could not start (its stores are
	// closed).
	EvOpened
	// EvClosed: the stores of an ActClose* are closed; LeftOnDisk when
	// the task's directory holds state worth keeping.
	EvClosed
	// EvTick: the driver's clock reads At. Every directory left on disk,
	// open nowhere, for Config.CleanupDelay is deleted (ActDelete) while
	// the instance is open.
	EvTick
	// EvDeleted: the directory of an ActDelete is deleted (OK) or not.
	EvDeleted
	// EvThreadExit: Thread's Incarnation exited. The actives it still
	// owns are let go: one it claimed but had not started is dropped (its
	// stores were the thread's, closed with it), one it started is closed
	// uncleanly (ActCloseActive). Replaced: the next incarnation takes the
	// index, and what it reported before this exit (see Event.Incarnation)
	// is applied now; otherwise the index is gone for good and the
	// instance waits for no share of it.
	EvThreadExit
	// EvClose: the instance closes: once nothing is in flight, every
	// replica no thread owns is closed, and nothing new is planned.
	EvClose
	// EvReceived: Thread's SyncGroup answered with an assignment naming
	// the tasks of Share, which the thread has not taken in yet: what
	// queries may read follows it at once (Servable).
	EvReceived
	// EvAheadClosed: the stores opened ahead for Task were closed
	// (ActReleaseAhead); its directory is left on disk unless open (one
	// on disk already keeps its expiry).
	EvAheadClosed
	// EvPause: the instance replaces its clients: as EvClose, until
	// EvResume.
	EvPause
	// EvWipe: Task's changelogs were recreated while paused: its
	// directory is deleted if open nowhere (ActDelete).
	EvWipe
	// EvResume: the pause is over; replicas follow the shares again.
	EvResume
	// EvAhead: Thread is about to build the tasks of its assignment, whose
	// persistent stores are Stores. Answered by ActOpenAhead when any is
	// worth opening ahead.
	EvAhead
	// EvThreadFailed: Thread's Incarnation stopped on an error it cannot
	// get past, Failure naming it; At is required. Answered by one of
	// ActReplaceThread, ActShutdownApplication or ActStopThread, as
	// Config.OnThreadFailure says. Replicas are untouched: the thread's
	// exit (EvThreadExit) lets go what it owns.
	EvThreadFailed
	numEventKinds
)

var eventNames = [...]string{"Share", "Revoked", "Claim", "Started", "ClaimFailed", "Restored", "Release", "CloseActive",
	"Opened", "Closed", "Tick", "Deleted", "ThreadExit", "Close", "Received", "AheadClosed", "Pause", "Wipe", "Resume", "Ahead",
	"ThreadFailed"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", k)
}

// Event is one input of the core.
type Event struct {
	Kind   EventKind
	Thread int
	// Incarnation is which of the successive threads of index Thread the
	// event comes from: 0 for the first, one more after each replacement
	// (EvThreadExit with Replaced). A replacement's client may hear from
	// the group before its predecessor's exit is reported: until then its
	// Share, Received and Revoked are held and applied when the exit
	// lands, its Claim is answered ActHeld (its predecessor may still own
	// the task), and its other events, which presume a claim, are
	// refused, as is any event of an incarnation that has exited.
	Incarnation int
	// At is the driver's clock when the event happened: the core keeps
	// the latest At it was given as its now (a zero At leaves it), and
	// dates the directories left on disk by it. Required for EvTick.
	At   time.Time
	Task task.ID
	// Committed, Demoted: Release. OK: Opened, Deleted. LeftOnDisk:
	// Closed. Replaced: ThreadExit.
	Committed, Demoted, OK, LeftOnDisk, Replaced bool
	// Share: EvShare, EvReceived.
	Share Share
	// Stores: EvAhead.
	Stores []AheadStore
	// Failure names what stopped the thread (EvThreadFailed): the same
	// failure again within Config.ReplacementWindow counts as in a row.
	Failure string
}

func (e Event) String() string {
	th := fmt.Sprintf("t%d", e.Thread)
	if e.Incarnation != 0 {
		th = fmt.Sprintf("t%d#%d", e.Thread, e.Incarnation)
	}
	switch e.Kind {
	case EvShare, EvReceived:
		return fmt.Sprintf("%s(%s,a%v,s%v,w%v)", e.Kind, th, e.Share.Active, e.Share.Standby, e.Share.Warmup)
	case EvRevoked:
		return fmt.Sprintf("%s(%s)", e.Kind, th)
	case EvThreadExit:
		return fmt.Sprintf("%s(%s,replaced=%t)", e.Kind, th, e.Replaced)
	case EvTick:
		return fmt.Sprintf("%s(%s)", e.Kind, e.At.Format(time.RFC3339Nano))
	case EvClaim, EvStarted, EvClaimFailed, EvCloseActive:
		return fmt.Sprintf("%s(%s,%s)", e.Kind, th, e.Task)
	case EvRelease:
		return fmt.Sprintf("%s(%s,%s,committed=%t,demoted=%t)", e.Kind, th, e.Task, e.Committed, e.Demoted)
	case EvOpened, EvDeleted:
		return fmt.Sprintf("%s(%s,ok=%t)", e.Kind, e.Task, e.OK)
	case EvClosed:
		return fmt.Sprintf("%s(%s,disk=%t)", e.Kind, e.Task, e.LeftOnDisk)
	case EvRestored, EvAheadClosed, EvWipe:
		return fmt.Sprintf("%s(%s)", e.Kind, e.Task)
	case EvAhead:
		return fmt.Sprintf("%s(%s,%v)", e.Kind, th, e.Stores)
	case EvThreadFailed:
		return fmt.Sprintf("%s(%s,%q)", e.Kind, th, e.Failure)
	}
	return e.Kind.String()
}

// ActionKind names what the driver must do.
type ActionKind uint8

const (
	// ActOpenActive: no stores of Task are open here; Thread opens them.
	// The replica is Created, Thread's, until EvStarted.
	ActOpenActive ActionKind = iota
	// ActHandOver: Thread takes Task's parked stores; the replica is
	// Restoring.
	ActHandOver
	// ActPromote: Thread takes the stores of Task's standby or warmup,
	// once the standby reader lets them go; the replica is Restoring.
	ActPromote
	// ActHeld: another thread holds Task, or its stores are being opened
	// or closed; Thread claims it again later.
	ActHeld
	// ActPark: keep the stores of Thread's revoked Task open, Parked.
	ActPark
	// ActCloseActive: close Thread's Task; Clean when its work is
	// committed. Outcome: EvClosed.
	ActCloseActive
	// ActOpenStandby: open Task's stores and follow its changelogs, As a
	// standby or warmup. Outcome: EvOpened.
	ActOpenStandby
	// ActAdopt: follow the changelogs of Task's parked stores, As a
	// standby or warmup. Outcome: EvOpened.
	ActAdopt
	// ActRetag: Task's standby is now As (standby or warmup); no state
	// moves.
	ActRetag
	// ActCloseStandby: stop following Task and close its stores.
	// Outcome: EvClosed.
	ActCloseStandby
	// ActCloseParked: close Task's parked stores. Outcome: EvClosed.
	ActCloseParked
	// ActDelete: delete Task's directory. Outcome: EvDeleted.
	ActDelete
	// ActReleaseAhead: close the stores opened ahead of claims for tasks
	// not in Keep. Outcome: EvAheadClosed for each task closed.
	ActReleaseAhead
	// ActOpenAhead: Thread opens Stores, several at once, to be taken by
	// the tasks it builds next; no outcome is owed.
	ActOpenAhead
	// ActReplaceThread: Thread's client is replaced by a new incarnation's
	// (whose exit the driver reports, EvThreadExit with Replaced); its
	// failure has now happened Failures times in a row.
	ActReplaceThread
	// ActShutdownApplication: Thread halts (its tasks close without
	// committing, and it keeps its place in the group), and the instance
	// asks every instance of the application to shut down.
	ActShutdownApplication
	// ActStopThread: Thread stops for good with its error. Failures is
	// how many times in a row the failure has happened when the
	// replacement budget is spent, 0 when the policy is to stop.
	ActStopThread
	numActionKinds
)

var actionNames = [...]string{"OpenActive", "HandOver", "Promote", "Held", "Park", "CloseActive", "OpenStandby", "Adopt", "Retag",
	"CloseStandby", "CloseParked", "Delete", "ReleaseAhead", "OpenAhead", "ReplaceThread", "ShutdownApplication", "StopThread"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return fmt.Sprintf("ActionKind(%d)", k)
}

// Action is one output of the core.
type Action struct {
	Kind   ActionKind
	Task   task.ID
	Thread int          // OpenActive, HandOver, Promote, Held, Park, CloseActive, OpenAhead, ReplaceThread, ShutdownApplication, StopThread
	As     task.State   // OpenStandby, Adopt, Retag
	Clean  bool         // CloseActive
	Keep   []task.ID    // ReleaseAhead
	Stores []AheadStore // OpenAhead
	// Failures: ReplaceThread, StopThread.
	Failures int
}

func (a Action) String() string {
	switch a.Kind {
	case ActOpenActive, ActHandOver, ActPromote, ActHeld, ActPark:
		return fmt.Sprintf("%s(t%d,%s)", a.Kind, a.Thread, a.Task)
	case ActCloseActive:
		return fmt.Sprintf("%s(t%d,%s,clean=%t)", a.Kind, a.Thread, a.Task, a.Clean)
	case ActOpenStandby, ActAdopt, ActRetag:
		return fmt.Sprintf("%s(%s,%s)", a.Kind, a.Task, a.As)
	case ActReleaseAhead:
		return fmt.Sprintf("%s(keep%v)", a.Kind, a.Keep)
	case ActOpenAhead:
		return fmt.Sprintf("%s(t%d,%v)", a.Kind, a.Thread, a.Stores)
	case ActReplaceThread, ActStopThread:
		return fmt.Sprintf("%s(t%d,failures=%d)", a.Kind, a.Thread, a.Failures)
	case ActShutdownApplication:
		return fmt.Sprintf("%s(t%d)", a.Kind, a.Thread)
	}
	return fmt.Sprintf("%s(%s)", a.Kind, a.Task)
}
