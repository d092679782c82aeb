package threadcore

// Failure is what the driver observed of a commit or abort that failed,
// as facts about its error; CauseOf decides what the core makes of them.
type Failure struct {
	// MovedOn: the group refused the offset commit as from an old
	// generation (a task migration).
	MovedOn bool
	// Crashed: the thread was stopped in a way that must not be retried
	// (a simulated crash).
	Crashed bool
	// Fenced: the producer was fenced by a newer one with the same
	// transactional ID.
	Fenced bool
	// SessionGone: the records were failed because the member's session
	// had expired (the thread reset its connections).
	SessionGone bool
	// CannotBegin: the next transaction could not begin.
	CannotBegin bool
	// TimedOut: the commit or abort did not finish in time.
	TimedOut bool
	// LostBroker: the broker stopped answering, or the connection to it
	// was lost.
	LostBroker bool
	// Transient: neither a stop nor a kill of the instance caused it, so
	// the thread may go on once it reconnects.
	Transient bool
	// Transactional: the thread has a transactional session.
	Transactional bool
}

// CauseOf classifies a failed commit or abort. A transaction that cannot
// end in time belongs to a member the group has most likely dropped while
// it was cut off (the session waits for a heartbeat that a blocked
// rebalance never delivers): it is treated like fencing, and reconnecting
// with the same transactional ID aborts it; so is one whose end never got
// an answer, which may have committed or not (the group's committed
// offsets and the changelogs say which). Under at-least-once, a commit
// that could not reach the broker in time, or whose records were failed
// because the session had expired, is treated like a task migration: the
// changelog records it sent are at worst applied again, and the input
// since the last commit is processed again, which at-least-once allows.
// Anything else is fatal.
func CauseOf(f Failure, g Guarantee) Cause {
	alo := g != ExactlyOnce
	switch {
	case f.MovedOn:
		return CauseRefused
	case f.Crashed:
		return CauseFatal
	case f.Fenced:
		return CauseFenced
	case f.SessionGone && alo && f.Transient:
		return CauseRefused
	case f.CannotBegin && f.Transient:
		return CauseFenced
	case alo && f.Transient && (f.TimedOut || f.LostBroker):
		return CauseRefused
	case (f.TimedOut || f.LostBroker) && f.Transient && f.Transactional:
		return CauseFenced
	}
	return CauseFatal
}
