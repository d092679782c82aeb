package iq

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"
)

// The JSON shapes of the HTTP API. Server and Client share them, so the two
// cannot drift apart.

// wireServedBy is an answer's provenance. What the replica cannot vouch
// for is null: position while rebuilding, lag when unknown, the ages when
// not known.
type wireServedBy struct {
	Host       string `json:"host"`
	Role       Role   `json:"role"`
	Position   *int64 `json:"position"`
	Lag        *int64 `json:"lag"`
	Rebuilding bool   `json:"rebuilding"`
	// LagConfirmedMsAgo is how long ago the broker confirmed the end the
	// lag is counted from: with a null lag, how long ago it was last known.
	LagConfirmedMsAgo   *int64 `json:"lag_confirmed_ms_ago"`
	AgeMs               *int64 `json:"age_ms"`
	InputCommittedMsAgo *int64 `json:"input_committed_ms_ago"`
	// ContactMsAgo is how long ago the group last confirmed the
	// replica's member; null for a global store. Added after the
	// other fields: a reader that lacks it takes every active for
	// confirmed, which is what it did before there were unconfirmed ones.
	ContactMsAgo *int64 `json:"contact_ms_ago"`
}

// orNull encodes a count that is unknown when negative.
func orNull(n int64) *int64 {
	if n < 0 {
		return nil
	}
	return &n
}

// fromNull decodes what orNull encoded.
func fromNull(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// msOrNull encodes a duration, Unknown when negative, in milliseconds
// (rounded, as answers' messages render them).
func msOrNull(d time.Duration) *int64 {
	if d < 0 {
		return nil
	}
	n := int64(d.Round(time.Millisecond) / time.Millisecond)
	return &n
}

// msFromNull decodes what msOrNull encoded.
func msFromNull(p *int64) time.Duration {
	if p == nil || *p < 0 {
		return Unknown
	}
	return time.Duration(*p) * time.Millisecond
}

func servedBy(p Provenance) *wireServedBy {
	return &wireServedBy{Host: p.Host, Role: p.Role, Position: orNull(p.Position), Lag: orNull(p.Lag), Rebuilding: p.Rebuilding,
		LagConfirmedMsAgo: msOrNull(p.LagConfirmedAgo), AgeMs: msOrNull(p.Age), InputCommittedMsAgo: msOrNull(p.InputCommittedAgo),
		ContactMsAgo: msOrNull(p.ContactAgo)}
}

func (s *wireServedBy) provenance(partition int32) Provenance {
	return Provenance{Host: s.Host, Partition: partition, Role: s.Role, Position: fromNull(s.Position), Lag: fromNull(s.Lag), Rebuilding: s.Rebuilding,
		LagConfirmedAgo: msFromNull(s.LagConfirmedMsAgo), Age: msFromNull(s.AgeMs), InputCommittedAgo: msFromNull(s.InputCommittedMsAgo),
		ContactAgo: msFromNull(s.ContactMsAgo)}
}

// wireKey is the 200 and 404 answer of a key lookup.
type wireKey struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value,omitempty"`
	// TimestampMs is Result.Timestamp, left out when 0.
	TimestampMs int64 `json:"timestamp_ms,omitempty"`
	// ValidFrom and ValidTo bound the version a versioned store answered
	// with.
	ValidFrom *int64        `json:"valid_from,omitempty"`
	ValidTo   *int64        `json:"valid_to,omitempty"`
	Partition int32         `json:"partition"`
	ServedBy  *wireServedBy `json:"served_by,omitempty"`
	Error     string        `json:"error,omitempty"`
}

type wireEntry struct {
	Key   json.RawMessage `json:"key"`
	Value json.RawMessage `json:"value"`
	// TimestampMs is KeyValue.Timestamp, left out when 0.
	TimestampMs int64 `json:"timestamp_ms,omitempty"`
}

type wirePartitionRange struct {
	Partition int32         `json:"partition"`
	ServedBy  *wireServedBy `json:"served_by"`
	Entries   []wireEntry   `json:"entries"`
	Truncated bool          `json:"truncated,omitempty"`
}

type wireRange struct {
	Store      string               `json:"store"`
	Partitions []wirePartitionRange `json:"partitions"`
	Failed     []wirePartitionError `json:"failed,omitempty"`
}

type wirePartitionError struct {
	Partition int32 `json:"partition"`
	wireError
}

type wireKeyMetadata struct {
	Partition int32    `json:"partition"`
	Active    *string  `json:"active"`
	Standbys  []string `json:"standbys"`
	Warmups   []string `json:"warmups"`
	Global    bool     `json:"global,omitempty"`
}

type wireInstance struct {
	Host    string           `json:"host"`
	Active  []StorePartition `json:"active"`
	Standby []StorePartition `json:"standby"`
	Warmup  []StorePartition `json:"warmup"`
}

type wireMetadata struct {
	Instances  []wireInstance   `json:"instances"`
	Partitions map[string]int32 `json:"partitions"`
	Global     []string         `json:"global,omitempty"`
	Unassigned bool             `json:"unassigned,omitempty"`
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func toWireMetadata(m Metadata) wireMetadata {
	w := wireMetadata{Instances: []wireInstance{}, Partitions: m.Partitions, Global: m.Global, Unassigned: m.Unassigned}
	if w.Partitions == nil {
		w.Partitions = map[string]int32{}
	}
	for _, h := range m.Hosts {
		w.Instances = append(w.Instances, wireInstance{Host: h.Host, Active: nonNil(h.Active), Standby: nonNil(h.Standby), Warmup: nonNil(h.Warmup)})
	}
	return w
}

func (w wireMetadata) metadata() Metadata {
	m := Metadata{Partitions: w.Partitions, Global: w.Global, Unassigned: w.Unassigned}
	for _, in := range w.Instances {
		m.Hosts = append(m.Hosts, HostMetadata{Host: in.Host, Active: in.Active, Standby: in.Standby, Warmup: in.Warmup})
	}
	sort.Slice(m.Hosts, func(i, j int) bool { return m.Hosts[i].Host < m.Hosts[j].Host })
	return m
}

// wireLag is one local replica in /v1/lags. Unknown figures are null.
type wireLag struct {
	Store               string `json:"store"`
	Partition           int32  `json:"partition"`
	Role                Role   `json:"role"`
	Position            *int64 `json:"position"`
	End                 *int64 `json:"end"`
	Lag                 *int64 `json:"lag"`
	Rebuilding          bool   `json:"rebuilding"`
	Restored            int64  `json:"restored"`
	LagConfirmedMsAgo   *int64 `json:"lag_confirmed_ms_ago"`
	SinceCaughtUpMs     *int64 `json:"since_caught_up_ms"`
	InputCommittedMsAgo *int64 `json:"input_committed_ms_ago"`
	AgeMs               *int64 `json:"age_ms"`
	ContactMsAgo        *int64 `json:"contact_ms_ago"`
}

func toWireLag(i ReplicaInfo) wireLag {
	age, ok := i.Age()
	if !ok {
		age = Unknown
	}
	return wireLag{
		Store: i.Store, Partition: i.Partition, Role: i.Role, Position: orNull(i.Position), End: orNull(i.End),
		Lag: orNull(i.Lag), Rebuilding: i.Rebuilding, Restored: i.Restored, LagConfirmedMsAgo: msOrNull(i.LagConfirmedAgo),
		SinceCaughtUpMs: msOrNull(i.CaughtUpAgo), InputCommittedMsAgo: msOrNull(i.InputCommittedAgo), AgeMs: msOrNull(age),
		ContactMsAgo: msOrNull(i.ContactAgo),
	}
}

func (w wireLag) info() ReplicaInfo {
	return ReplicaInfo{Store: w.Store, Partition: w.Partition, Role: w.Role, Position: fromNull(w.Position), End: fromNull(w.End),
		Lag: fromNull(w.Lag), Rebuilding: w.Rebuilding, Restored: w.Restored, LagConfirmedAgo: msFromNull(w.LagConfirmedMsAgo),
		CaughtUpAgo: msFromNull(w.SinceCaughtUpMs), InputCommittedAgo: msFromNull(w.InputCommittedMsAgo), ContactAgo: msFromNull(w.ContactMsAgo)}
}

// wireError is every error answer. Reason is a stable code a program can
// branch on; the optional fields carry what the typed errors carry.
type wireError struct {
	Error       string `json:"error"`
	Reason      string `json:"reason"`
	Store       string `json:"store,omitempty"`
	Partition   *int32 `json:"partition,omitempty"`
	Role        *Role  `json:"role,omitempty"`
	Position    *int64 `json:"position,omitempty"`
	Lag         *int64 `json:"lag,omitempty"`
	MinPosition *int64 `json:"min_position,omitempty"`
	Host        string `json:"host,omitempty"`
	// The rest of what a too-stale replica said about itself; an absent
	// position or lag there is unknown.
	Rebuilding          bool          `json:"rebuilding,omitempty"`
	LagConfirmedMsAgo   *int64        `json:"lag_confirmed_ms_ago,omitempty"`
	SinceCaughtUpMs     *int64        `json:"since_caught_up_ms,omitempty"`
	InputCommittedMsAgo *int64        `json:"input_committed_ms_ago,omitempty"`
	ContactMsAgo        *int64        `json:"contact_ms_ago,omitempty"`
	Bound               string        `json:"staleness,omitempty"`
	Tried               []wireAttempt `json:"tried,omitempty"`
}

type wireAttempt struct {
	Host   string `json:"host"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// Reason codes of error answers.
const (
	reasonUnknownStore     = "unknown_store"
	reasonUnknownPartition = "unknown_partition"
	reasonInvalid          = "invalid_query"
	reasonNotStarted       = "not_started"
	reasonShuttingDown     = "shutting_down"
	reasonNotRunning       = "not_running"
	reasonRebalancing      = "rebalancing"
	reasonNotHosted        = "not_hosted_here"
	reasonTooStale         = "too_stale"
	reasonBehind           = "behind"
	reasonNotAvailable     = "not_available"
	reasonUnreachable      = "unreachable"
	reasonSuspect          = "suspect"
	reasonInternal         = "internal"
	reasonOverloaded       = "overloaded"
	reasonUnauthorized     = "unauthorized"
)

// classify maps an error to its HTTP status and reason code. Order matters:
// typed errors first (an *UnavailableError before the refusals it may
// carry), then the specific sentinels before their families.
func classify(err error) (int, string) {
	var (
		se *StaleError
		be *BehindError
		ue *UnavailableError
	)
	switch {
	case errors.As(err, &ue):
		return http.StatusServiceUnavailable, reasonNotAvailable
	case errors.As(err, &se):
		return http.StatusServiceUnavailable, reasonTooStale
	case errors.As(err, &be):
		return http.StatusConflict, reasonBehind
	case errors.Is(err, ErrInvalidQuery):
		return http.StatusBadRequest, reasonInvalid
	case errors.Is(err, ErrOverloaded):
		return http.StatusTooManyRequests, reasonOverloaded
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, reasonUnauthorized
	case errors.Is(err, ErrUnknownStore):
		return http.StatusNotFound, reasonUnknownStore
	case errors.Is(err, ErrUnknownPartition):
		return http.StatusBadRequest, reasonUnknownPartition
	case errors.Is(err, ErrNotHostedHere):
		return http.StatusMisdirectedRequest, reasonNotHosted
	case errors.Is(err, ErrNotStarted):
		return http.StatusServiceUnavailable, reasonNotStarted
	case errors.Is(err, ErrShuttingDown):
		return http.StatusServiceUnavailable, reasonShuttingDown
	case errors.Is(err, ErrNotRunning):
		return http.StatusServiceUnavailable, reasonNotRunning
	case errors.Is(err, ErrRebalancing):
		return http.StatusServiceUnavailable, reasonRebalancing
	case errors.Is(err, ErrNotAvailable):
		return http.StatusServiceUnavailable, reasonNotAvailable
	default:
		return http.StatusInternalServerError, reasonInternal
	}
}

// httpHint says, for an error answer, what to do next in the HTTP API's
// own terms; the errors themselves speak Go.
func httpHint(reason string, err error) string {
	switch reason {
	case reasonNotHosted:
		return " (over HTTP, route=true sends the query to a host that holds the partition)"
	case reasonUnknownStore, reasonUnknownPartition:
		return " (GET /v1/metadata lists the stores and their partition counts)"
	case reasonTooStale:
		return " (over HTTP, retry with a looser staleness= parameter such as staleness=any)"
	case reasonBehind:
		var be *BehindError
		if errors.As(err, &be) {
			return fmt.Sprintf(" (the request's min_position %d)", be.MinPosition)
		}
	case reasonOverloaded:
		return " (retry after the Retry-After delay)"
	}
	return ""
}

// StatusFor maps a query error to the HTTP status the server answers it
// with: 400 invalid query or partition, 401 unauthorized, 404 unknown store,
// 409 behind the minimum position, 421 not hosted here, 429 overloaded, 503
// too stale, not
// started, shutting down, rebalancing or no replica available, 500
// otherwise.
func StatusFor(err error) int {
	s, _ := classify(err)
	return s
}

func ptr[T any](v T) *T { return &v }

// validRole leaves an invalid role out of an error answer rather than fail
// to encode the answer.
func validRole(r Role) *Role {
	if r < RoleActive || r > lastRole {
		return nil
	}
	return &r
}

func toWireError(err error) (int, wireError) {
	status, reason := classify(err)
	w := wireError{Error: err.Error() + httpHint(reason, err), Reason: reason}
	var (
		se *StaleError
		be *BehindError
		ue *UnavailableError
	)
	switch {
	case reason == reasonTooStale && errors.As(err, &se):
		w.Store, w.Partition, w.Role = se.Store, ptr(se.Partition), validRole(se.Role)
		w.Position, w.Lag, w.Bound = orNull(se.Position), orNull(se.Lag), se.Bound.String()
		w.Host, w.Rebuilding = se.Host, se.Rebuilding
		w.LagConfirmedMsAgo, w.SinceCaughtUpMs, w.InputCommittedMsAgo = msOrNull(se.LagConfirmedAgo), msOrNull(se.SinceCaughtUp), msOrNull(se.InputCommittedAgo)
		w.ContactMsAgo = msOrNull(se.ContactAgo)
	case reason == reasonBehind && errors.As(err, &be):
		w.Store, w.Partition, w.Role, w.Host = be.Store, ptr(be.Partition), validRole(be.Role), be.Host
		w.Position, w.MinPosition = ptr(be.Position), ptr(be.MinPosition)
	case reason == reasonNotAvailable && errors.As(err, &ue):
		w.Store, w.Bound = ue.Store, ue.Bound.String()
		if ue.Partition >= 0 {
			w.Partition = ptr(ue.Partition)
		}
		w.Tried = []wireAttempt{}
		for _, a := range ue.Tried {
			_, r := classify(a.Err)
			var ta *transportError
			if errors.As(a.Err, &ta) {
				r = reasonUnreachable
			} else if errors.Is(a.Err, errSuspect) {
				r = reasonSuspect
			}
			w.Tried = append(w.Tried, wireAttempt{Host: a.Host, Error: a.Err.Error(), Reason: r})
		}
	}
	return status, w
}

// remoteError is an error answer from another instance, turned back into an
// error that matches the same sentinels and typed errors as the original.
type remoteError struct {
	status int
	msg    string
	kind   error
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Unwrap() error { return e.kind }

// fromWireError rebuilds a typed error from an error answer.
func fromWireError(status int, w wireError) error {
	msg := w.Error
	if msg == "" {
		msg = fmt.Sprintf("iq: HTTP %d %s", status, http.StatusText(status))
	}
	deref := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	part := int32(-1)
	if w.Partition != nil {
		part = *w.Partition
	}
	var role Role
	if w.Role != nil {
		role = *w.Role
	}
	switch w.Reason {
	case reasonTooStale:
		b, _ := ParseStaleness(w.Bound)
		return &StaleError{Store: w.Store, Partition: part, Host: w.Host, Role: role, Position: fromNull(w.Position), Lag: fromNull(w.Lag),
			Rebuilding: w.Rebuilding, LagConfirmedAgo: msFromNull(w.LagConfirmedMsAgo), SinceCaughtUp: msFromNull(w.SinceCaughtUpMs),
			InputCommittedAgo: msFromNull(w.InputCommittedMsAgo), ContactAgo: msFromNull(w.ContactMsAgo), Bound: b}
	case reasonBehind:
		return &BehindError{Store: w.Store, Partition: part, Host: w.Host, Role: role, Position: deref(w.Position), MinPosition: deref(w.MinPosition)}
	case reasonNotAvailable:
		b, _ := ParseStaleness(w.Bound)
		ue := &UnavailableError{Store: w.Store, Partition: part, Bound: b}
		for _, a := range w.Tried {
			ue.Tried = append(ue.Tried, Attempt{Host: a.Host, Err: &remoteError{msg: a.Error, kind: kindOf(a.Reason)}})
		}
		if len(w.Tried) == 0 {
			ue.Cause = &remoteError{status: status, msg: msg}
		}
		return ue
	}
	kind := kindOf(w.Reason)
	if kind == nil && w.Reason == "" {
		kind = kindOfStatus(status)
	}
	return &remoteError{status: status, msg: msg, kind: kind}
}

// kindOfStatus is the sentinel an error answer's status alone stands for,
// for answers that carry no reason (a proxy in between, an older server).
// 400 and 404 are left out: any HTTP server asked at a wrong address
// answers them, and taking them for a bad query or an unknown store would
// stop a Client from asking the next host. 503 says too little to pick
// one cause and maps to ErrNotAvailable.
func kindOfStatus(status int) error {
	switch status {
	case http.StatusConflict:
		return ErrBehind
	case http.StatusMisdirectedRequest:
		return ErrNotHostedHere
	case http.StatusTooManyRequests:
		return ErrOverloaded
	case http.StatusServiceUnavailable:
		return ErrNotAvailable
	}
	return nil
}

func kindOf(reason string) error {
	switch reason {
	case reasonUnknownStore:
		return ErrUnknownStore
	case reasonUnknownPartition:
		return ErrUnknownPartition
	case reasonInvalid:
		return ErrInvalidQuery
	case reasonUnauthorized:
		return ErrUnauthorized
	case reasonNotStarted:
		return ErrNotStarted
	case reasonShuttingDown:
		return ErrShuttingDown
	case reasonNotRunning:
		return ErrNotRunning
	case reasonRebalancing:
		return ErrRebalancing
	case reasonNotHosted:
		return ErrNotHostedHere
	case reasonTooStale:
		return ErrTooStale
	case reasonBehind:
		return ErrBehind
	case reasonNotAvailable:
		return ErrNotAvailable
	case reasonOverloaded:
		return ErrOverloaded
	case reasonSuspect:
		return errSuspect
	}
	return nil
}

// transportError is a forward that got no HTTP answer at all: the host is
// down, unreachable or too slow. It is what marks a host suspect.
type transportError struct {
	host string
	err  error
}

func (e *transportError) Error() string {
	return fmt.Sprintf("iq: %s unreachable: %v", e.host, e.err)
}

func (e *transportError) Unwrap() error { return e.err }

var errSuspect = errors.New("iq: skipped: host failed recently and is suspect until the next assignment or its suspicion expires")

func writeJSON(w http.ResponseWriter, status int, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(wireError{Error: fmt.Sprintf("iq: encode answer: %v", err), Reason: reasonInternal})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeErr(w http.ResponseWriter, err error) {
	status, body := toWireError(err)
	noteReason(w, body.Reason)
	writeJSON(w, status, body)
}

func lagsOf(infos []ReplicaInfo) []wireLag {
	out := make([]wireLag, 0, len(infos))
	for _, i := range infos {
		out = append(out, toWireLag(i))
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Store != out[b].Store {
			return out[a].Store < out[b].Store
		}
		return out[a].Partition < out[b].Partition
	})
	return out
}
