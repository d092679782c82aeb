package threadcore

import (
	"errors"
	"testing"

	"github.com/eddystreams/eddy/task"
)

// landed steps c as a driver that carries a batch out at once would: the
// flight the step began lands before the next event.
func landed(c *Core, e Event) ([]Action, error) {
	out, err := c.Step(e)
	if err == nil && c.Busy() {
		if lerr := c.Land(); lerr != nil {
			return out, lerr
		}
	}
	return out, err
}

// While a batch is in flight, the core takes the outcomes of its actions,
// and holds back with ErrBusy, changing nothing, every event another
// goroutine brings: a callback, a poll, a tick, a stop, a failure. Once
// the driver lands the batch, the held event comes in.
func TestFlightHoldsOtherEvents(t *testing.T) {
	c := New(aloCoop)
	script(t, c, step{ev: evTasks(EvSynced, t0)})
	out, err := c.Step(evTasks(EvAssigned, t0))
	if err != nil || acts(out) != "OpenAhead[0_0] Claim(0_0) TakeShare" {
		t.Fatalf("assigned: %s %v", acts(out), err)
	}
	if !c.Busy() {
		t.Fatal("a batch handed out is not in flight")
	}
	before := c.clone().key()
	for _, e := range []Event{ev(EvPolled), ev(EvPollDone), tick(0, CommitClock{}), ev(EvStop), ev(EvKill), ev(EvFailed),
		ev(EvRewire), ev(EvSessionEnded), evTasks(EvRevoked, t0), ev(EvLost), evTasks(EvSynced, t0),
		// A callback marked as the closing client's, with no client closing.
		{Kind: EvRevoked, Tasks: []task.ID{t0}, Closing: true}} {
		if _, err := c.Step(e); !errors.Is(err, ErrBusy) {
			t.Fatalf("%s in flight: %v", e, err)
		}
		if c.Admits(e) {
			t.Fatalf("%s admitted in flight", e)
		}
		if k := c.key(); k != before {
			t.Fatalf("held %s changed %s to %s", e, before, k)
		}
	}
	// The claim's outcome and a send are the batch's own.
	if !c.Admits(ev(EvSent)) {
		t.Fatal("a send is held in flight")
	}
	if out, err := c.Step(evTask(EvClaimed, t0)); err != nil || acts(out) != "" {
		t.Fatalf("claimed: %s %v", acts(out), err)
	}
	if err := c.Land(); err != nil {
		t.Fatal(err)
	}
	if c.Busy() {
		t.Fatal("busy after landing")
	}
	if err := c.Land(); !errors.Is(err, ErrRefused) {
		t.Fatalf("land with nothing in flight: %v", err)
	}
	script(t, c, step{ev: ev(EvSessionEnded), want: "Unsettle"})
}

// A Reconnect or an Exit in flight closes the group client, which waits
// for the client's callbacks: those (and only those, Event.Closing) come
// in while it is in flight, each as a flight of its own, until the
// reconnection's outcome.
func TestFlightTakesTheClosingClientsCallbacks(t *testing.T) {
	c := New(aloCoop)
	script(t, c,
		step{ev: Event{Kind: EvSynced, Tasks: []task.ID{t0}, At: base}},
		step{ev: evTasks(EvAssigned, t0), want: "OpenAhead[0_0] Claim(0_0) TakeShare"},
		step{ev: evTask(EvClaimed, t0)},
		step{ev: evTask(EvRestored, t0), want: "Resume(0_0)"},
		step{ev: tick(commitInterval, CommitClock{}), want: "Flush[0_0] Commit[0_0]"},
	)
	out, err := c.Step(failed(EvCommitFailed, CauseRefused))
	if err != nil || acts(out) != "Close[0_0](clean=false) Reconnect(refused)" {
		t.Fatalf("commit refused: %s %v", acts(out), err)
	}
	if !c.Busy() {
		t.Fatal("reconnection not in flight")
	}
	// The new client's callbacks wait for the reconnection.
	if _, err := c.Step(evTasks(EvAssigned, t0)); !errors.Is(err, ErrBusy) {
		t.Fatalf("new client's assignment in flight: %v", err)
	}
	closing := func(e Event) Event { e.Closing = true; return e }
	out, err = c.Step(closing(ev(EvSessionEnded)))
	if err != nil || acts(out) != "Unsettle" {
		t.Fatalf("closing client's callback: %s %v", acts(out), err)
	}
	// Its batch flies on its own, and lands on its own.
	if err := c.Land(); err != nil || !c.Busy() {
		t.Fatalf("after the callback's batch landed: busy %t, %v", c.Busy(), err)
	}
	if out, err := c.Step(ev(EvReconnected)); err != nil || len(out) != 0 {
		t.Fatalf("reconnected: %s %v", acts(out), err)
	}
	if _, err := c.Step(closing(evTasks(EvRevoked, t0))); !errors.Is(err, ErrBusy) {
		t.Fatalf("a closing callback after the reconnection: %v", err)
	}
	if err := c.Land(); err != nil || c.Busy() {
		t.Fatalf("busy %t, %v", c.Busy(), err)
	}
	script(t, c, step{ev: evTasks(EvSynced, t0)}, step{ev: evTasks(EvAssigned, t0), want: "OpenAhead[0_0] Claim(0_0) TakeShare"})
}

// An outcome stepped with nothing in flight (a test driving the core one
// event at a time) begins a flight of its own; one stepped in flight
// continues it.
func TestOutcomesContinueTheirFlight(t *testing.T) {
	c := New(aloCoop)
	script(t, c, step{ev: evTasks(EvSynced, t0)})
	if _, err := c.Step(evTasks(EvAssigned, t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Step(evTask(EvHeld, t0)); err != nil {
		t.Fatal(err)
	}
	if err := c.Land(); err != nil || c.Busy() {
		t.Fatalf("one flight: busy %t, %v", c.Busy(), err)
	}
}

// While the thread makes its first client (Connecting), the client's
// callbacks are held back as in any flight, changing nothing; once the
// driver lands it they come in. A core that took events cannot connect.
func TestConnectingHoldsTheFirstClientsCallbacks(t *testing.T) {
	c := New(aloCoop)
	if err := c.Connecting(); err != nil {
		t.Fatal(err)
	}
	if !c.Busy() {
		t.Fatal("connecting is not in flight")
	}
	if err := c.Connecting(); !errors.Is(err, ErrRefused) {
		t.Fatalf("connecting twice: %v", err)
	}
	before := c.clone().key()
	for _, e := range []Event{evTasks(EvSynced, t0), evTasks(EvAssigned, t0), ev(EvSessionEnded), evTasks(EvRevoked, t0),
		ev(EvLost), ev(EvPolled), ev(EvStop), ev(EvKill), ev(EvRebalanceRequested)} {
		if _, err := c.Step(e); !errors.Is(err, ErrBusy) {
			t.Fatalf("%s while connecting: %v", e, err)
		}
		if k := c.key(); k != before {
			t.Fatalf("held %s changed %s to %s", e, before, k)
		}
	}
	if err := c.Land(); err != nil || c.Busy() {
		t.Fatalf("landed: busy %t, %v", c.Busy(), err)
	}
	script(t, c, step{ev: evTasks(EvSynced, t0)}, step{ev: evTasks(EvAssigned, t0), want: "OpenAhead[0_0] Claim(0_0) TakeShare"})
	if err := c.Connecting(); !errors.Is(err, ErrRefused) {
		t.Fatalf("connecting a core that took events: %v", err)
	}
}
