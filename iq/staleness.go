package iq

import (
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
// A running active (RoleActive) satisfies every bound. Any other replica
// (restoring, standby, warmup) satisfies:
//
//   - ActiveOnly: never;
//   - MaxLag(n): when its lag is at most n and at most the acceptable
//     recovery lag;
//   - MaxAge(d): when it was last caught up at most d ago and its lag is at
//     most the acceptable recovery lag;
//   - AnyStaleness: always.
//
// The acceptable-recovery-lag clause is the near-caught-up gate: a replica
// rebuilding from scratch, far behind, answers only callers that accept any
// staleness, whatever number they put in their bound.
type Staleness struct {
	kind   staleKind
	maxLag int64
	maxAge time.Duration
}

// ActiveOnly accepts only running actives.
func ActiveOnly() Staleness { return Staleness{} }

// AnyStaleness accepts any replica, however far behind.
func AnyStaleness() Staleness { return Staleness{kind: staleAny} }

// MaxLag accepts replicas at most n records behind the changelog end (and
// within the acceptable recovery lag). A negative n counts as 0.
func MaxLag(n int64) Staleness { return Staleness{kind: staleLag, maxLag: max(n, 0)} }

// MaxAge accepts replicas that were fully caught up at most d ago (and are
// within the acceptable recovery lag). A negative d counts as 0.
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

// Allows reports whether a replica described by info satisfies the bound,
// given the acceptable recovery lag.
func (s Staleness) Allows(info ReplicaInfo, acceptableRecoveryLag int64) bool {
	if info.Role == RoleActive {
		return true
	}
	switch s.kind {
	case staleAny:
		return true
	case staleLag:
		return info.Lag <= s.maxLag && info.Lag <= acceptableRecoveryLag
	case staleAge:
		age, ok := info.Age()
		return ok && age <= s.maxAge && info.Lag <= acceptableRecoveryLag
	default:
		return false
	}
}

// Check is Allows returning the refusal: nil, or a *StaleError carrying the
// replica's role, position and lag.
func (s Staleness) Check(info ReplicaInfo, acceptableRecoveryLag int64) error {
	if s.Allows(info, acceptableRecoveryLag) {
		return nil
	}
	return &StaleError{
		Store:                 info.Store,
		Partition:             info.Partition,
		Role:                  info.Role,
		Position:              info.Position,
		Lag:                   info.Lag,
		SinceCaughtUp:         info.CaughtUpAgo,
		AcceptableRecoveryLag: acceptableRecoveryLag,
		Bound:                 s,
	}
}
