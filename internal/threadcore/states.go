// Package threadcore is the pure task manager at the heart of a stream
// thread: it takes the events a thread observes (assignments, revocations,
// polls, restorations, commit outcomes, stop requests) and answers with the
// actions the thread must carry out (claim, park or close a task, pause or
// resume its input, flush and commit, abort a transaction, reconnect, exit).
//
// The core does no I/O, reads no clock and starts no goroutine, so it can be
// driven step by step by tests and by the thread's loop alike. Time comes in
// on the events (Event.At, the driver's clock), from which the core decides
// when commits are due (Config holds the interval, the join grace and the
// early commits' delay); what the broker and the thread's input say is
// reported as events (CommitClock says whether input is at its end or the
// cache full; CommitFailed says why a commit did not go through). The thread
// executes the actions in order, without holding the core, and feeds back
// the outcome of those that have one (Claim, Process, Commit, AbortTxn,
// Reconnect) as events; the batch is in flight until the thread lands it,
// and meanwhile the core holds back the events of other goroutines
// (flight.go).
package threadcore

import "fmt"

// Guarantee is the processing guarantee the core runs under.
type Guarantee uint8

const (
	// AtLeastOnce commits input offsets after flushing; a revocation
	// commits before the revoked tasks are released.
	AtLeastOnce Guarantee = iota
	// ExactlyOnce ends a transaction that spans all the thread's tasks;
	// a revocation cannot end it from inside the group client's callback,
	// so it discards what the transaction holds and aborts it before
	// processing anything else.
	ExactlyOnce
)

func (g Guarantee) String() string {
	if g == ExactlyOnce {
		return "exactly-once"
	}
	return "at-least-once"
}

// Mode is what the thread is doing.
type Mode uint8

const (
	// Processing: the thread polls, processes and commits.
	Processing Mode = iota
	// Committing: a commit (Flush then Commit) is being carried out;
	// the next event is its outcome.
	Committing
	// AbortPending (exactly-once): a revocation or loss dropped the
	// transaction's work, or the group client will abort the next
	// transaction to end; nothing is processed until it is aborted.
	AbortPending
	// Aborting (exactly-once): the abort is being carried out; the next
	// event is its outcome.
	Aborting
	// Reconnecting: the thread's client is being replaced; the old
	// client's revocation callbacks may still arrive.
	Reconnecting
	// Failed: the loop stopped on an error; what follows is decided by
	// OnStreamThreadError (Replace, Halt or Stop).
	Failed
	// Halted: the thread processes nothing more, for good, and only
	// polls to take part in the rebalance that shuts the application
	// down.
	Halted
	// Exited: the thread is done.
	Exited
)

var modeNames = [...]string{"Processing", "Committing", "AbortPending", "Aborting", "Reconnecting", "Failed", "Halted", "Exited"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// modeMoves is the transition table of Mode, and every move in it is one
// the core makes (TestEveryReachableStateIsInTheTables). Staying in a mode
// is always allowed. A thread halts only once failed (its abort or
// reconnection then returns it to Halted), and a halted thread runs no
// task, so it never commits; a commit returns to the mode it began from
// before anything else, and never to an abort owed, which the commit
// settles; an abort begins only where one is owed, or at the halt.
var modeMoves = map[Mode][]Mode{
	Processing:   {Committing, AbortPending, Reconnecting, Failed, Exited},
	Committing:   {Processing, Failed, Exited},
	AbortPending: {Aborting, Committing, Reconnecting, Failed, Exited},
	Aborting:     {Processing, Reconnecting, Failed, Halted, Exited},
	Reconnecting: {Processing, Halted, Failed, Exited},
	Failed:       {Reconnecting, Halted, Committing, Exited},
	Halted:       {Aborting, Reconnecting, Failed, Exited},
	Exited:       nil,
}

// Phase is the thread's standing in its consumer group.
type Phase uint8

const (
	// Unassigned: no assignment since the thread started, an eager
	// revocation, a loss, or the end of a cooperative join.
	Unassigned Phase = iota
	// Assigned: the thread holds its assignment. It is the only phase
	// in which the thread counts as settled.
	Assigned
	// Joining (cooperative): the group session ended and the thread is
	// between join and sync; it keeps processing, but the group client
	// holds commits back until the sync, so interval commits wait.
	Joining
	// Revoked (cooperative): the thread gave up tasks and rejoins at once
	// so that the group can assign them; it keeps processing the rest.
	Revoked
	// Rejoining (cooperative): revoked, then given this generation's
	// assignment; the rejoin is still owed.
	Rejoining
	// RejoinJoining (cooperative): revoked, and the owed rejoin's session
	// ended; between join and sync.
	RejoinJoining
)

var phaseNames = [...]string{"Unassigned", "Assigned", "Joining", "Revoked", "Rejoining", "RejoinJoining"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("Phase(%d)", p)
}

// phaseMoves is the transition table of Phase. Staying is always allowed.
// A sync ends the join: it leads Joining, Revoked and RejoinJoining to
// Unassigned (the assignment is not applied yet) and Rejoining to Assigned;
// a loss or an eager revocation leads anywhere to Unassigned; a
// cooperative revocation during a join leads to RejoinJoining.
var phaseMoves = map[Phase][]Phase{
	Unassigned:    {Assigned, Joining, Revoked},
	Assigned:      {Unassigned, Joining, Revoked},
	Joining:       {Unassigned, RejoinJoining},
	Revoked:       {Unassigned, Rejoining, RejoinJoining},
	Rejoining:     {Unassigned, Assigned, RejoinJoining, Revoked},
	RejoinJoining: {Unassigned},
}

// Slot is the state of a task the thread holds or waits for.
type Slot uint8

const (
	// Claiming: the thread asked the instance for the task's stores.
	Claiming Slot = iota
	// Waiting: another thread of the instance still held the task when
	// it was assigned; its input is paused and the claim is retried after
	// every poll.
	Waiting
	// Restoring: the task catches up on its changelogs; its input is
	// paused.
	Restoring
	// Running: the task processes its input.
	Running
)

var slotNames = [...]string{"Claiming", "Waiting", "Restoring", "Running"}

func (s Slot) String() string {
	if int(s) < len(slotNames) {
		return slotNames[s]
	}
	return fmt.Sprintf("Slot(%d)", s)
}

// slotMoves is the transition table of Slot; a slot leaves the table by
// being parked, closed or forgotten.
var slotMoves = map[Slot][]Slot{
	Claiming:  {Waiting, Restoring},
	Waiting:   {Claiming},
	Restoring: {Running},
	Running:   nil,
}

// allowed reports whether table lets a state move from → to; staying is
// always allowed.
func allowed[S comparable](table map[S][]S, from, to S) bool {
	if from == to {
		return true
	}
	for _, s := range table[from] {
		if s == to {
			return true
		}
	}
	return false
}
