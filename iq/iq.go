// Package iq is the query side of Eddy ("interactive queries"): reading the
// state an application keeps in its stores, from inside the process or over
// HTTP, from active, restoring, standby and warmup replicas alike.
//
// Every answer says where it came from (host, partition, replica role,
// changelog position and lag), and every caller states how stale an answer it
// accepts (see Staleness). A replica outside the caller's bound refuses with
// a typed error instead of answering, so no caller ever gets older data than
// it asked for without being told.
//
// The package never depends on the runtime: the runtime implements Backend,
// and iq builds the in-process Querier, the HTTP Server and the routing
// Client on top of it.
package iq

import (
	"fmt"
	"strings"
	"time"
)

// sentinel is an error value that also matches a broader parent sentinel
// with errors.Is, so callers may branch on either the precise condition
// (ErrNotStarted) or the family it belongs to (ErrNotRunning).
type sentinel struct {
	msg    string
	parent error
}

func (e *sentinel) Error() string { return e.msg }

func (e *sentinel) Is(target error) bool { return e.parent != nil && target == e.parent }

// Errors a query returns; branch on them with errors.Is. Each message says
// what to do next. Queries usually return them wrapped with the store and
// partition concerned, or as one of the typed errors below (StaleError,
// BehindError, UnavailableError), which match the sentinel too.
var (
	// ErrNotRunning is the family of ErrNotStarted and ErrShuttingDown:
	// the instance cannot serve queries at all right now.
	ErrNotRunning error = &sentinel{msg: "iq: instance is not running (retry later or ask another instance)"}
	// ErrNotStarted: the instance has not received its first assignment,
	// so it knows neither its replicas nor where the others are.
	ErrNotStarted error = &sentinel{msg: "iq: instance has not received its first assignment yet (retry shortly or ask another instance)", parent: ErrNotRunning}
	// ErrShuttingDown: the instance is closing.
	ErrShuttingDown error = &sentinel{msg: "iq: instance is shutting down (ask another instance)", parent: ErrNotRunning}
	// ErrRebalancing: the replica asked for is in transition between
	// owners during a rebalance.
	ErrRebalancing error = &sentinel{msg: "iq: partition is moving in a rebalance (retry shortly, or ask another replica with a looser staleness bound)"}
	// ErrUnknownStore: the topology has no queryable store of that name.
	ErrUnknownStore error = &sentinel{msg: "iq: unknown store (check the store name against the topology's Describe output or /v1/metadata)"}
	// ErrUnknownPartition: the partition number is outside the store's
	// partitions.
	ErrUnknownPartition error = &sentinel{msg: "iq: no such partition (check the partition count in /v1/metadata)"}
	// ErrNotHostedHere: this instance holds no replica, of any role, of the
	// partition. Ask a host that does (KeyMetadata names them).
	ErrNotHostedHere error = &sentinel{msg: "iq: partition is not hosted here (ask the hosts KeyMetadata names, or query with route=true)"}
	// ErrTooStale: the replica is outside the caller's staleness bound.
	// Returned as *StaleError.
	ErrTooStale error = &sentinel{msg: "iq: replica is too stale for the staleness bound (ask the active host, or loosen the bound)"}
	// ErrBehind: the replica's position is below the caller's minimum
	// position (monotonic reads). Returned as *BehindError.
	ErrBehind error = &sentinel{msg: "iq: replica is behind the position the caller already saw (ask another replica or retry shortly)"}
	// ErrNotAvailable: no host can answer for the partition right now:
	// no assignment yet, no host holds it, or every candidate refused.
	// Returned as *UnavailableError.
	ErrNotAvailable error = &sentinel{msg: "iq: no replica can answer right now (retry shortly, or loosen the staleness bound)"}
	// ErrInvalidQuery: a malformed key, staleness bound or parameter.
	ErrInvalidQuery error = &sentinel{msg: "iq: invalid query (fix the request)"}
)

// StaleError is a replica's refusal to answer because it is outside the
// caller's staleness bound. errors.Is(err, ErrTooStale) holds.
type StaleError struct {
	Store     string
	Partition int32
	Host      string
	Role      Role
	Position  int64
	Lag       int64
	// SinceCaughtUp is how long ago the replica last had no lag.
	SinceCaughtUp time.Duration
	// AcceptableRecoveryLag is the near-caught-up limit that applied.
	AcceptableRecoveryLag int64
	Bound                 Staleness
}

// Error names the replica, its lag and the bound it missed, and what to do next.
func (e *StaleError) Error() string {
	var why string
	switch {
	case e.Bound.kind == staleActive:
		why = "only a running active may answer"
	case e.Lag > e.AcceptableRecoveryLag:
		why = fmt.Sprintf("its lag exceeds the acceptable recovery lag %d, so it answers only staleness=any", e.AcceptableRecoveryLag)
	case e.Bound.kind == staleAge:
		why = fmt.Sprintf("last caught up %s ago", e.SinceCaughtUp.Round(time.Millisecond))
	default:
		why = "its lag exceeds the bound"
	}
	return fmt.Sprintf("iq: store %q partition %d: %s replica%s at position %d, lag %d, refuses staleness=%s: %s (ask the active host, or retry with a looser bound such as staleness=any)",
		e.Store, e.Partition, e.Role, onHost(e.Host), e.Position, e.Lag, e.Bound, why)
}

// Is makes errors.Is(err, ErrTooStale) hold.
func (e *StaleError) Is(target error) bool { return target == ErrTooStale }

// BehindError is a replica's refusal to answer because its position is
// below the minimum position the caller asked for: answering would show the
// caller older data than it already saw. errors.Is(err, ErrBehind) holds.
type BehindError struct {
	Store       string
	Partition   int32
	Host        string
	Role        Role
	Position    int64
	MinPosition int64
}

// Error names both positions, and what to do next.
func (e *BehindError) Error() string {
	return fmt.Sprintf("iq: store %q partition %d: %s replica%s at position %d is behind min_position %d (ask another replica, or retry when it has caught up)",
		e.Store, e.Partition, e.Role, onHost(e.Host), e.Position, e.MinPosition)
}

// Is makes errors.Is(err, ErrBehind) hold.
func (e *BehindError) Is(target error) bool { return target == ErrBehind }

// Attempt is one candidate a router tried, and why it did not answer.
type Attempt struct {
	Host string
	Err  error
}

// UnavailableError says no replica could answer for a partition: before the
// first assignment, when no host holds the partition, or when every
// candidate within the bound refused or failed (Tried lists them in the
// order tried). errors.Is(err, ErrNotAvailable) holds, and so does
// errors.Is(err, Cause) when a single cause explains it.
type UnavailableError struct {
	Store string
	// Partition is -1 when it could not be computed.
	Partition int32
	Bound     Staleness
	Cause     error
	Tried     []Attempt
}

// Error lists every attempt, and what to do next.
func (e *UnavailableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "iq: store %q", e.Store)
	if e.Partition >= 0 {
		fmt.Fprintf(&b, " partition %d", e.Partition)
	}
	b.WriteString(": no replica could answer")
	if e.Bound.kind != staleActive || len(e.Tried) > 0 {
		fmt.Fprintf(&b, " within staleness=%s", e.Bound)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, ": %v", e.Cause)
	}
	if len(e.Tried) > 0 {
		b.WriteString(" [tried:")
		for i, a := range e.Tried {
			if i > 0 {
				b.WriteString(";")
			}
			fmt.Fprintf(&b, " %s: %v", a.Host, a.Err)
		}
		b.WriteString("]")
	}
	b.WriteString(" (retry shortly, or loosen the staleness bound)")
	return b.String()
}

// Is makes errors.Is(err, ErrNotAvailable) hold.
func (e *UnavailableError) Is(target error) bool { return target == ErrNotAvailable }

// Unwrap exposes the single cause, if any.
func (e *UnavailableError) Unwrap() error { return e.Cause }

func onHost(h string) string {
	if h == "" {
		return ""
	}
	return " on " + h
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidQuery, fmt.Sprintf(format, args...))
}
