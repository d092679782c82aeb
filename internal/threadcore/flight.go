package threadcore

import (
	"errors"
	"fmt"
)

// ErrBusy wraps every event the core holds back because a batch it handed
// out is still being carried out and the event is not one that may come in
// meanwhile (inFlight). The core's state is unchanged; the driver steps
// the event again once the batch has landed (Land).
var ErrBusy = errors.New("threadcore: a batch is in flight")

// admission is what the core does with an event while a batch is in
// flight.
type admission uint8

const (
	// held: the event waits until every batch in flight has landed.
	held admission = iota
	// outcome: the outcome of an action in flight (or a send made by
	// one), stepped by the driver carrying the batch out; it continues
	// that batch's flight.
	outcome
	// fromClosing: a callback of the group client that a Reconnect or
	// Exit in flight is closing (Event.Closing). Closing the client waits
	// for its callbacks, so holding them would never land the batch; they
	// are taken at once, each as a flight of its own, and the modes
	// (Reconnecting, Exited) make them touch no task.
	fromClosing
)

// inFlight is what each kind of event meets while a batch is in flight.
// The driver carries a batch out without holding the core's lock, so every
// event another goroutine brings meanwhile (a rebalance callback let
// through by AllowRebalance, a stop, a failure, a reconnection's
// callbacks) is ordered by this table rather than by that lock.
var inFlight = [numEventKinds]admission{
	EvClaimed:       outcome,
	EvHeld:          outcome,
	EvClaimFailed:   outcome,
	EvProcessed:     outcome,
	EvSent:          outcome,
	EvCommitted:     outcome,
	EvCommitAborted: outcome,
	EvCommitFailed:  outcome,
	EvAborted:       outcome,
	EvAbortFailed:   outcome,
	EvReconnected:   outcome,

	EvSynced:       fromClosing,
	EvAssigned:     fromClosing,
	EvSessionEnded: fromClosing,
	EvRevoked:      fromClosing,
	EvRevokedAll:   fromClosing,
	EvLost:         fromClosing,

	// Everything else is held: EvPolled, EvPollDone, EvRestored,
	// EvRebalanceRequested, EvTick, EvFailed, EvReplace, EvHalt, EvRewire,
	// EvStop, EvKill.
}

// flight is what the driver is carrying out of the core's batches.
type flight struct {
	// open counts the batches handed out and not landed: the one a step
	// began, and one more for each callback of a closing client taken
	// meanwhile.
	open int
	// closing: a batch in flight holds a Reconnect or an Exit, whose
	// client's callbacks are taken while it closes (until Reconnected).
	closing bool
}

// Busy reports whether a batch the core handed out is still being carried
// out: the driver has not landed it.
func (c *Core) Busy() bool { return c.flight.open > 0 }

// Admits reports whether Step would take e now rather than hold it back
// with ErrBusy. It changes nothing. Whether the mode accepts e is a
// separate matter (Accepts).
func (c *Core) Admits(e Event) bool {
	if c.flight.open == 0 {
		return true
	}
	switch inFlight[e.Kind] {
	case outcome:
		return true
	case fromClosing:
		return e.Closing && c.flight.closing
	}
	return false
}

// Connecting puts the making of the thread's first client in flight, as a
// batch of its own, until the driver lands it (Land). The client joins
// the group as soon as it exists, and its callbacks may come before the
// thread is whole; in flight, they are held back like any other event, so
// the driver makes the client, which may wait for the broker, without
// holding the lock it steps the core under. Only a core that has taken no
// event and has nothing in flight may connect.
func (c *Core) Connecting() error {
	if c.flight.open > 0 || !c.now.IsZero() || c.mode != Processing || c.phase != Unassigned || len(c.slots) > 0 {
		return fmt.Errorf("%w: Connecting a core that has taken events", ErrRefused)
	}
	c.flight.open++
	return nil
}

// Land tells the core that the driver has carried out a batch, and
// stepped the outcomes of its actions: the batch a step of an event that
// was not an outcome began, with everything those outcomes added. Events
// held back meanwhile may come in once no batch is in flight.
func (c *Core) Land() error {
	if c.flight.open == 0 {
		return fmt.Errorf("%w: Land with no batch in flight", ErrRefused)
	}
	c.flight.open--
	if c.flight.open == 0 {
		c.flight.closing = false
	}
	return nil
}

// fly records the batch a step answered e with: a step taken while nothing
// is in flight, or of an event that is not an outcome, begins a flight;
// an outcome's batch continues the flight it belongs to. A batch holding a
// Reconnect or an Exit lets the closing client's callbacks in; the
// reconnection's outcome ends that.
func (c *Core) fly(e Event) {
	if e.Kind == EvReconnected {
		c.flight.closing = false
	}
	if len(c.out) == 0 {
		return
	}
	if c.flight.open == 0 || inFlight[e.Kind] != outcome {
		c.flight.open++
	}
	for _, a := range c.out {
		if a.Kind == ActReconnect || a.Kind == ActExit {
			c.flight.closing = true
		}
	}
}
