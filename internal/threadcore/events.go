package threadcore

import (
	"fmt"
	"time"

	"github.com/eddystreams/eddy/task"
)

// EventKind names what happened to the thread.
type EventKind uint8

const (
	// EvSynced: the group's sync delivered an assignment; Tasks are its
	// actives. It comes from the balancer's callback, which may run while
	// the thread processes, through a mailbox the thread empties before
	// anything else.
	EvSynced EventKind = iota
	// EvAssigned: the assignment callback; Tasks are the actives to hold.
	EvAssigned
	// EvClaimed: a Claim got the task's stores; it is restoring. Handle
	// is the driver's object for the task, which the core keeps with its
	// slot (Core.Handle) and hands back in the action that releases it.
	EvClaimed
	// EvHeld: a Claim found the task still held by another thread of
	// the instance.
	EvHeld
	// EvClaimFailed: a Claim failed (the application fails with it).
	EvClaimFailed
	// EvSessionEnded: a cooperative revocation callback with nothing in
	// it: the group session ended and a join begins.
	EvSessionEnded
	// EvRevoked: a cooperative revocation of Tasks.
	EvRevoked
	// EvRevokedAll: an eager revocation, of everything.
	EvRevokedAll
	// EvLost: the partitions were lost (the member fell out of the group).
	EvLost
	// EvPolled: a poll returned.
	EvPolled
	// EvProcessed: Task consumed N input records or transaction markers;
	// the outcome of ActProcess, one per task that consumed any.
	EvProcessed
	// EvSent: a task sent a sink record. Every mode takes it, and it
	// calls for no action: the thread's hot path.
	EvSent
	// EvPollDone: the polled records are processed.
	EvPollDone
	// EvRestored: Task caught up on its changelogs.
	EvRestored
	// EvRebalanceRequested: the group wants to rebalance while the thread
	// holds it off; the thread commits before letting it go on.
	EvRebalanceRequested
	// EvTick: the end of an iteration, at At; Clock says what the
	// thread's input, cache and producer call for. The core decides
	// whether a commit is due.
	EvTick
	// EvCommitted: the commit went through.
	EvCommitted
	// EvCommitAborted (exactly-once): the group client aborted the
	// transaction instead of committing it; the tasks' work is dropped.
	EvCommitAborted
	// EvCommitFailed: the commit failed for Cause.
	EvCommitFailed
	// EvAborted (exactly-once): the transaction was aborted.
	EvAborted
	// EvAbortFailed (exactly-once): the abort failed for Cause.
	EvAbortFailed
	// EvReconnected: the thread has a new client.
	EvReconnected
	// EvFailed: the loop stopped on an error.
	EvFailed
	// EvReplace: OnStreamThreadError replaces the failed thread's client.
	EvReplace
	// EvHalt: OnStreamThreadError shuts the application down; the thread
	// stops processing for good.
	EvHalt
	// EvRewire: the application's topics are gone; the thread lets go of
	// its tasks and client until they are back.
	EvRewire
	// EvStop: the thread stops; Clean when it ends without an error.
	EvStop
	// EvKill: the instance is killed: nothing more is committed.
	EvKill
	numEventKinds
)

var eventNames = [...]string{"Synced", "Assigned", "Claimed", "Held", "ClaimFailed", "SessionEnded", "Revoked", "RevokedAll", "Lost",
	"Polled", "Processed", "Sent", "PollDone", "Restored", "RebalanceRequested", "Tick", "Committed", "CommitAborted", "CommitFailed",
	"Aborted", "AbortFailed", "Reconnected", "Failed", "Replace", "Halt", "Rewire", "Stop", "Kill"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", k)
}

// Cause says why a commit, an abort or a reconnection happened.
type Cause uint8

const (
	// CauseNone: no failure.
	CauseNone Cause = iota
	// CauseRefused: the group refused an offset commit because it moved
	// on without this member (a task migration).
	CauseRefused
	// CauseFenced: the transaction cannot end: the producer was fenced,
	// or the transaction is stuck as a member dropped from the group.
	CauseFenced
	// CauseFatal: anything else; the loop stops.
	CauseFatal
	// CauseReplace: OnStreamThreadError replaces the thread's client.
	CauseReplace
	// CauseRewire: the application's topics are gone.
	CauseRewire
)

var causeNames = [...]string{"none", "refused", "fenced", "fatal", "replace", "rewire"}

func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("Cause(%d)", c)
}

// CommitClock is what the thread's input, cache and producer say at the end
// of an iteration; the time is the tick's At.
type CommitClock struct {
	// InputAtEnd: every input partition of a running task the thread
	// fetched from was at its end in the last fetch.
	InputAtEnd bool
	// BudgetFull: the thread's cache budget is full.
	BudgetFull bool
	// ProduceFailed: a record failed to produce in a way that dooms the
	// uncommitted work (under exactly-once any failure: the transaction
	// can only abort; under at-least-once a member whose session may
	// have expired): the commit comes now, joining or not, rather than
	// after more doomed work.
	ProduceFailed bool
}

// Event is one input of the core.
type Event struct {
	Kind EventKind
	// At is the driver's clock when the event happened; the core reads
	// no clock of its own, and keeps the latest At it was given as its
	// now. A zero At leaves it as it was.
	At    time.Time
	Task  task.ID   // Claimed, Held, ClaimFailed, Processed, Restored
	Tasks []task.ID // Synced, Assigned, Revoked
	N     int       // Processed
	Clock CommitClock
	Cause Cause // CommitFailed, AbortFailed
	Clean bool  // Stop
	// Closing marks a callback of the group client that a Reconnect or
	// Exit in flight is closing (Synced, Assigned, SessionEnded, Revoked,
	// RevokedAll, Lost): the core takes it while that batch is in flight.
	Closing bool
	// Handle is the driver's object for Task (Claimed); opaque to the
	// core.
	Handle any
}

func (e Event) String() string {
	switch e.Kind {
	case EvClaimed, EvHeld, EvClaimFailed, EvRestored:
		return fmt.Sprintf("%s(%s)", e.Kind, e.Task)
	case EvProcessed:
		return fmt.Sprintf("%s(%s,%d)", e.Kind, e.Task, e.N)
	case EvSynced, EvAssigned, EvRevoked:
		return fmt.Sprintf("%s%v", e.Kind, e.Tasks)
	case EvTick:
		return fmt.Sprintf("%s%+v", e.Kind, e.Clock)
	case EvCommitFailed, EvAbortFailed:
		return fmt.Sprintf("%s(%s)", e.Kind, e.Cause)
	case EvStop:
		return fmt.Sprintf("%s(clean=%t)", e.Kind, e.Clean)
	}
	return e.Kind.String()
}

// ActionKind names what the thread must do.
type ActionKind uint8

const (
	// ActClaim: take Task's stores from the instance's registry (or open
	// them) and start restoring it, its input paused. Outcome: EvClaimed,
	// EvHeld or EvClaimFailed.
	ActClaim ActionKind = iota
	// ActPause: pause Task's input partitions.
	ActPause
	// ActResume: Task is restored: mark it running and resume its input.
	ActResume
	// ActPark: hand Tasks' open stores to the registry, without closing
	// them; their work is committed or discarded.
	ActPark
	// ActClose: close Tasks; Clean when their work is committed,
	// otherwise their uncommitted work is dropped.
	ActClose
	// ActDiscard: drop Tasks' uncommitted work (cache and pending
	// changelog writes) because their transaction is aborted.
	ActDiscard
	// ActProcess: run the polled records through their tasks. Outcome:
	// an EvProcessed for each task that consumed input, maybe none.
	ActProcess
	// ActFlush: flush Tasks' caches, the outbox and their changelog
	// writes (at-least-once: also the producer, then the stores).
	ActFlush
	// ActCommit: commit Tasks' input offsets (exactly-once: end the
	// transaction, then write the stores). Follows an ActFlush of the
	// same tasks. Outcome: EvCommitted, EvCommitAborted or
	// EvCommitFailed.
	ActCommit
	// ActAbortTxn (exactly-once): abort the open transaction. Outcome:
	// EvAborted or EvAbortFailed.
	ActAbortTxn
	// ActBegin (exactly-once): begin the next transaction.
	ActBegin
	// ActPunctuate: run the tasks' due punctuators.
	ActPunctuate
	// ActPurge: purge repartition records below the committed offsets.
	ActPurge
	// ActUnsettle: the thread no longer holds a settled assignment; the
	// instance is rebalancing.
	ActUnsettle
	// ActRegistryRevoked: tell the registry that the thread's next
	// assignment is not known yet.
	ActRegistryRevoked
	// ActReconnect: replace the thread's client (for Cause). Outcome:
	// EvReconnected or EvFailed.
	ActReconnect
	// ActExit: leave the group and close the client; close Tasks, Clean
	// when committed. Killed: the network is already cut.
	ActExit
	// ActOpenAhead: open the stores of Tasks, new to the thread, several
	// at once, before the Claims that follow take them.
	ActOpenAhead
	// ActTakeShare: an assignment is taken: the registry takes the
	// thread's share of standbys and warmups, and the instance may be
	// running.
	ActTakeShare
	// ActPublish: Settled changed; readers on other goroutines (whether
	// the instance is settled) take the new value. It comes first in its
	// batch.
	ActPublish
	numActionKinds
)

var actionNames = [...]string{"Claim", "Pause", "Resume", "Park", "Close", "Discard", "Process", "Flush", "Commit", "AbortTxn", "Begin",
	"Punctuate", "Purge", "Unsettle", "RegistryRevoked", "Reconnect", "Exit", "OpenAhead", "TakeShare", "Publish"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return fmt.Sprintf("ActionKind(%d)", k)
}

// Action is one output of the core.
type Action struct {
	Kind   ActionKind
	Task   task.ID   // Claim, Pause, Resume
	Tasks  []task.ID // Park, Close, Discard, Flush, Commit, Exit, OpenAhead
	Clean  bool      // Close, Exit
	Killed bool      // Exit
	Cause  Cause     // Reconnect
	// Handles are the handles of Tasks (Park, Close, Exit), in the same
	// order, which the core lets go of: nil for a task never claimed.
	Handles []any
	Settled bool // Publish
}

func (a Action) String() string {
	switch a.Kind {
	case ActClaim, ActPause, ActResume:
		return fmt.Sprintf("%s(%s)", a.Kind, a.Task)
	case ActClose:
		return fmt.Sprintf("%s%v(clean=%t)", a.Kind, a.Tasks, a.Clean)
	case ActPark, ActDiscard, ActFlush, ActCommit, ActOpenAhead:
		return fmt.Sprintf("%s%v", a.Kind, a.Tasks)
	case ActReconnect:
		return fmt.Sprintf("%s(%s)", a.Kind, a.Cause)
	case ActExit:
		return fmt.Sprintf("%s%v(clean=%t,killed=%t)", a.Kind, a.Tasks, a.Clean, a.Killed)
	case ActPublish:
		return fmt.Sprintf("%s(settled=%t)", a.Kind, a.Settled)
	}
	return a.Kind.String()
}
