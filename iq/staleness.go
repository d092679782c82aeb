package iq

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

type staleKind uint8

const (
	staleActive staleKind = iota
	staleAny
	staleLag
	staleAge
)

// Staleness is how stale an answer a caller accepts. The zero value is
// ActiveOnly, the default.
//
// A running active whose group membership was confirmed recently
// (RoleActive) satisfies every bound: it is the partition's writer, so its
// lag and age are 0 by definition. Any other replica (restoring, standby,
// warmup, and an active the group has not confirmed lately,
// RoleUnconfirmed) satisfies:
//
//   - ActiveOnly: never;
//   - MaxLag(n) ("lag:N"): when it is not rebuilding and its lag is known
//     and at most n records. The lag is the number of changelog records
//     between the replica's position and the changelog end the broker
//     confirmed recently; a lag the broker has not confirmed within the
//     backend's confirmation window (the replica may be cut off from the
//     broker) is unknown, and an unknown lag fails every lag bound;
//   - MaxAge(d) ("age:D"): when its age (ReplicaInfo.Age) is known and at
//     most d. The age is the longer of how long ago the replica last had a
//     confirmed lag of 0 and how long ago the partition's active last
//     committed all the input it had. So a standby that has never caught
//     up since it was opened has no age and fails every age bound, and a
//     standby of a dead or stalled active, whose changelog no longer moves
//     and so shows no lag, stops passing age:D once its active's last
//     commit is more than d old;
//   - AnyStaleness ("any"): always, a rebuilding replica included.
//
// An unconfirmed active has no known lag, and its age counts from its last
// confirmed contact with the group (ReplicaInfo.ContactAgo): what it holds
// is what it had processed then, and whatever arrived since may be going
// to another instance.
//
// A global store (RoleGlobal), which has no active, satisfies ActiveOnly
// once it is restored (not rebuilding), and the other bounds as above; its
// partition's "active" is its topic's writers, so its InputCommittedAgo
// is 0 and its age is how long ago it last caught up with the topic.
//
// A replica rebuilding its store from empty (ReplicaInfo.Rebuilding) holds
// no consistent snapshot of any changelog offset until it reaches the end
// offset taken when it began, so it passes only AnyStaleness, whatever
// number a bound carries.
//
// The bound is the caller's to choose, as KIP-535 leaves it: the
// instance's acceptable recovery lag (the assignor's near-caught-up
// threshold) does not cap it, so lag:50000 accepts a standby 40000 records
// behind.
type Staleness struct {
	kind   staleKind
	maxLag int64
	maxAge time.Duration
}

// ActiveOnly accepts only running actives.
func ActiveOnly() Staleness { return Staleness{} }

// AnyStaleness accepts any replica, however far behind.
func AnyStaleness() Staleness { return Staleness{kind: staleAny} }

// MaxLag accepts replicas whose confirmed lag is at most n records (see
// Staleness). A negative n counts as 0.
func MaxLag(n int64) Staleness { return Staleness{kind: staleLag, maxLag: max(n, 0)} }

// MaxAge accepts replicas whose known age is at most d: caught up with
// their changelog at most d ago, and of a partition whose active committed
// its input at most d ago (see Staleness). A negative d counts as 0.
func MaxAge(d time.Duration) Staleness { return Staleness{kind: staleAge, maxAge: max(d, 0)} }

// ParseStaleness parses "active", "any", "lag:N" or "age:DURATION" (a Go
// duration such as 500ms or 2m). The empty string is "active". Errors match
// ErrInvalidQuery.
func ParseStaleness(s string) (Staleness, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", "active":
		return ActiveOnly(), nil
	case "any":
		return AnyStaleness(), nil
	}
	kind, arg, ok := strings.Cut(s, ":")
	switch {
	case ok && kind == "lag":
		n, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || n < 0 {
			return Staleness{}, invalidf("staleness %q: lag:N needs a non-negative record count", s)
		}
		return MaxLag(n), nil
	case ok && kind == "age":
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 {
			return Staleness{}, invalidf("staleness %q: age:D needs a non-negative Go duration such as 500ms or 2m", s)
		}
		return MaxAge(d), nil
	}
	return Staleness{}, invalidf("staleness %q: want active, any, lag:N or age:DURATION", s)
}

// String renders the bound as ParseStaleness reads it.
func (s Staleness) String() string {
	switch s.kind {
	case staleAny:
		return "any"
	case staleLag:
		return "lag:" + strconv.FormatInt(s.maxLag, 10)
	case staleAge:
		return "age:" + s.maxAge.String()
	default:
		return "active"
	}
}

// MarshalText encodes the bound as String does.
func (s Staleness) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses the bound as ParseStaleness does.
func (s *Staleness) UnmarshalText(b []byte) error {
	v, err := ParseStaleness(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// AllowsNonActive reports whether any replica other than a running active
// could satisfy the bound; routers use it to decide whether standbys are
// candidates at all.
func (s Staleness) AllowsNonActive() bool { return s.kind != staleActive }

// Allows reports whether a replica described by info satisfies the bound.
func (s Staleness) Allows(info ReplicaInfo) bool { return s.refusal(info) == "" }

// refusal says why info fails the bound, or "" if it passes.
func (s Staleness) refusal(info ReplicaInfo) string {
	if info.Role == RoleActive || s.kind == staleAny {
		return ""
	}
	switch {
	case s.kind == staleActive && info.Role == RoleGlobal && !info.Rebuilding:
		// A global store has no active: restored, it is the answer.
		return ""
	case s.kind == staleActive && info.Role == RoleUnconfirmed:
		return fmt.Sprintf("only a running active may answer, and the group last confirmed this one %s ago (cut off from the broker, or paused)", ms(info.ContactAgo))
	case s.kind == staleActive:
		return "only a running active may answer"
	case info.Rebuilding:
		return "it is rebuilding its store from empty and holds no consistent snapshot yet, so only the any bound accepts it"
	case s.kind == staleLag && info.Lag < 0 && info.Role == RoleUnconfirmed:
		return fmt.Sprintf("its lag is unknown: the group last confirmed it as the partition's active %s ago", ms(info.ContactAgo))
	case s.kind == staleLag && info.Lag < 0:
		if info.LagConfirmedAgo < 0 {
			return "its lag is unknown: the broker never confirmed its changelog's end"
		}
		return fmt.Sprintf("its lag is unknown: the broker last confirmed its changelog's end %s ago", ms(info.LagConfirmedAgo))
	case s.kind == staleLag && info.Lag > s.maxLag:
		return fmt.Sprintf("its lag %d exceeds %d", info.Lag, s.maxLag)
	case s.kind == staleLag:
		return ""
	}
	// staleAge
	switch {
	case info.CaughtUpAgo < 0:
		return "its age is unknown: it has never caught up with its changelog since it was opened"
	case info.InputCommittedAgo < 0:
		return "its age is unknown: its partition's active was never seen committing its input"
	}
	age, _ := info.Age()
	if age <= s.maxAge {
		return ""
	}
	return fmt.Sprintf("its age %s exceeds %s (last caught up %s ago; the partition's active last committed its input %s ago)",
		ms(age), s.maxAge, ms(info.CaughtUpAgo), ms(info.InputCommittedAgo))
}

// ms renders a duration to the millisecond, as answers report them.
func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// Check is Allows returning the refusal: nil, or a *StaleError carrying
// what the replica said about itself and why it fails the bound.
func (s Staleness) Check(info ReplicaInfo) error {
	why := s.refusal(info)
	if why == "" {
		return nil
	}
	return &StaleError{
		Store:             info.Store,
		Partition:         info.Partition,
		Role:              info.Role,
		Position:          info.Position,
		Lag:               info.Lag,
		Rebuilding:        info.Rebuilding,
		LagConfirmedAgo:   info.LagConfirmedAgo,
		SinceCaughtUp:     info.CaughtUpAgo,
		InputCommittedAgo: info.InputCommittedAgo,
		ContactAgo:        info.ContactAgo,
		Bound:             s,
	}
}
