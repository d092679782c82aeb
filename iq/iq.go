// Package iq is the query side of Eddy ("interactive queries"): reading the
// state an application keeps in its stores, from inside the process or over
// HTTP, from active, restoring, standby and warmup replicas alike.
//
// Every answer says where it came from (host, partition, replica role,
// changelog position, lag, age, and how long ago the partition's active last
// committed its input), and every caller states how stale an answer it
// accepts (see Staleness). A replica outside the caller's bound refuses with
// a typed error instead of answering, so no caller ever gets older data than
// it asked for without being told.
//
// # Staleness bounds
//
//   - "active" (ActiveOnly, the default): only the partition's running
//     active answers.
//   - "lag:N" (MaxLag): a replica that is not rebuilding and whose lag, the
//     changelog records between its position and the end offset the broker
//     confirmed recently, is known and at most N. A lag not confirmed
//     recently is unknown and fails.
//   - "age:D" (MaxAge): a replica whose age is known and at most D. The age
//     is the longer of the time since the replica last had a confirmed lag
//     of 0 and the time since the partition's active last committed all its
//     input. A replica never caught up since it was opened, a rebuilding
//     one, or one whose active was never seen committing, has no age and
//     fails; a standby of a dead active fails D after the active's last
//     commit, though its changelog, no longer written, shows no lag.
//   - "any" (AnyStaleness): any replica, a rebuilding one included.
//
// A running active passes every bound. The caller's bound is not capped by
// the instance's acceptable recovery lag (the assignor's threshold): as in
// KIP-535, the caller chooses.
//
// # Routing
//
// With routing on (the HTTP server's route=true, and the Client always), a
// lookup is answered by the freshest replica that can answer within the
// bound: an instance answers from its own replica at once only when it is the
// running active or caught up (a confirmed lag of 0, not rebuilding);
// otherwise the partition's active is asked first, for a short while
// (ServerConfig.ActiveFirstTimeout) when the bound lets others answer, and
// then every other replica within the bound, the local one included; the
// answer of the replica at the highest changelog position wins (ties go to
// the smaller confirmed lag). PreferSpread instead spreads lookups at random
// over every replica within the bound.
//
// # Window and session stores
//
// Window and session stores (statestore.WindowStore, SessionStore; the
// stores of windowed and session aggregations) are read through the same
// replicas, bounds and routing: WindowFetch returns a key's windows
// starting in a time range, WindowFetchAll every key's in a range per
// local partition (bounded by WithLimit), SessionFetch a key's live
// sessions; ClientWindowFetch and ClientSessionFetch ask through a Client.
// Every answer carries its Provenance. The Backend says which stores are
// windowed by implementing LayoutBackend; a window query of a key-value
// store, or a key lookup or range of a window store, fails with
// ErrInvalidQuery. Over HTTP:
//
//	GET /v1/stores/{store}/windows?key=K&from=&to=   (or /keys/{key}/windows) a key's windows, routed as a key lookup;
//	    from and to are RFC 3339 or epoch milliseconds, both optional, both included
//	GET /v1/stores/{store}/windows?from=&to=         every key's windows, bounded and routed as ranges
//	GET /v1/stores/{store}/sessions?key=K            (or /keys/{key}/sessions) a key's sessions
//
// A key with no window in the range is answered 404 with its provenance,
// as an absent key is. A window store is read one segment at a time, each
// segment a snapshot of its own, and a reader may show windows its writer
// has just expired but not yet removed.
//
// # Errors
//
// Queries fail with Go values that errors.Is and errors.As recognise: the
// sentinels below, and *StaleError, *BehindError and *UnavailableError.
// The Querier and the Client report the same condition with the same
// values; a router's *UnavailableError unwraps to its cause and to every
// attempt's error. Their messages speak Go; HTTP status codes, and hints in
// HTTP terms, are added only where the Server encodes an error (StatusFor),
// and the Client decodes an answer back into the same values.
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
	ErrUnknownStore error = &sentinel{msg: "iq: unknown store (check the store name against the topology's Describe output)"}
	// ErrUnknownPartition: the partition number is outside the store's
	// partitions.
	ErrUnknownPartition error = &sentinel{msg: "iq: no such partition (check the store's partition count in the routing metadata)"}
	// ErrNotHostedHere: this instance holds no replica, of any role, of the
	// partition. Ask a host that does (KeyMetadata names them).
	ErrNotHostedHere error = &sentinel{msg: "iq: partition is not hosted here (ask a host KeyMetadata names, or query through a routing Client)"}
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
	// ErrOverloaded: the instance is at its limit of concurrent range
	// queries or forwarded lookups (see ServerConfig).
	ErrOverloaded error = &sentinel{msg: "iq: instance is at its concurrency limit (retry shortly, or ask another instance)"}
	// ErrUnauthorized: the server requires a bearer token (ServerConfig
	// Token) and the request carried none or another.
	ErrUnauthorized error = &sentinel{msg: "iq: the query server refused the request's credentials (set the bearer token it was configured with)"}
)

// StaleError is a replica's refusal to answer because it is outside the
// caller's staleness bound. It carries what the replica said about itself,
// and its message says which rule of Staleness it failed.
// errors.Is(err, ErrTooStale) holds.
type StaleError struct {
	Store     string
	Partition int32
	Host      string
	Role      Role
	// Position is -1 while the replica is rebuilding.
	Position int64
	// Lag is -1 when unknown.
	Lag        int64
	Rebuilding bool
	// LagConfirmedAgo is how long ago the broker last confirmed the
	// changelog end, Unknown if never.
	LagConfirmedAgo time.Duration
	// SinceCaughtUp is how long ago the replica last had no lag, Unknown
	// if never.
	SinceCaughtUp time.Duration
	// InputCommittedAgo is how long ago the partition's active last
	// committed its input, Unknown if never observed.
	InputCommittedAgo time.Duration
	// ContactAgo is how long ago the group last confirmed the replica's
	// member (ReplicaInfo.ContactAgo); Unknown if never.
	ContactAgo time.Duration
	Bound      Staleness
}

func (e *StaleError) info() ReplicaInfo {
	return ReplicaInfo{Store: e.Store, Partition: e.Partition, Role: e.Role, Position: e.Position, Lag: e.Lag, Rebuilding: e.Rebuilding,
		LagConfirmedAgo: e.LagConfirmedAgo, CaughtUpAgo: e.SinceCaughtUp, InputCommittedAgo: e.InputCommittedAgo, ContactAgo: e.ContactAgo}
}

// Error names the replica, what it vouches for, the bound it missed and
// why, and what to do next.
func (e *StaleError) Error() string {
	why := e.Bound.refusal(e.info())
	if why == "" {
		why = "it is outside the bound"
	}
	at := fmt.Sprintf("at position %d", e.Position)
	if e.Rebuilding || e.Position < 0 {
		at = "rebuilding (no consistent position yet)"
	}
	lag := fmt.Sprintf("lag %d", e.Lag)
	if e.Lag < 0 {
		lag = "lag unknown"
	}
	return fmt.Sprintf("iq: store %q partition %d: %s replica%s %s, %s, refuses staleness bound %s: %s (ask the active host, or retry with a looser bound such as any)",
		e.Store, e.Partition, e.Role, onHost(e.Host), at, lag, e.Bound, why)
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
	return fmt.Sprintf("iq: store %q partition %d: %s replica%s at position %d is behind the minimum position %d (ask another replica, or retry when it has caught up)",
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
// order tried). errors.Is(err, ErrNotAvailable) holds, and errors.Is and
// errors.As also see the Cause and every attempt's error: a caller finds
// the *StaleError of a replica that refused, or ErrNotStarted when the
// instances asked had no assignment yet.
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
		fmt.Fprintf(&b, " within staleness bound %s", e.Bound)
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

// Unwrap exposes the cause and the attempts' errors.
func (e *UnavailableError) Unwrap() []error {
	errs := make([]error, 0, 1+len(e.Tried))
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	for _, a := range e.Tried {
		if a.Err != nil {
			errs = append(errs, a.Err)
		}
	}
	return errs
}

func onHost(h string) string {
	if h == "" {
		return ""
	}
	return " on " + h
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidQuery, fmt.Sprintf(format, args...))
}
