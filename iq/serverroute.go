package iq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// localFirst reads what the local replica of a key-like query's partition
// (a key lookup, a key's windows or sessions) said about itself: its
// provenance when it may answer within the bound, a fallback for routing,
// and whether it answers at once: when the query is not routed, when it is
// a global store's, or, preferring the freshest, when nothing is fresher.
func (s *Server) localFirst(part int32, p params, info ReplicaInfo, localErr error) (local *Provenance, now bool) {
	if localErr != nil {
		return nil, false
	}
	lp := provenanceOf(s.b.Self(), part, info)
	return &lp, !p.route || lp.Role == RoleGlobal || (p.prefer == PreferFreshest && lp.caughtUp())
}

// forwarded is another instance's answer to a key-like query, passed on
// as it came.
type forwarded struct {
	status int
	body   []byte
}

// decodeForwarded reads another instance's answer to a key-like query,
// whose wire form W carries who served it (servedBy): a 200 or 404 that
// names its replica is kept as it came, anything else is the refusal it
// carries.
func decodeForwarded[W any](servedBy func(W) (*wireServedBy, int32)) decodeFn[forwarded] {
	return func(st int, body []byte) (forwarded, Provenance, error) {
		if st == http.StatusOK || st == http.StatusNotFound {
			var a W
			if json.Unmarshal(body, &a) == nil {
				if sb, part := servedBy(a); sb != nil {
					return forwarded{st, body}, sb.provenance(part), nil
				}
			}
		}
		return forwarded{}, Provenance{}, decodeErrorAnswer(st, body)
	}
}

func (f forwarded) write(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	w.Write(f.body)
}

// routed is what routeFor settled on, with the attempts that failed on the
// way (they explain a later failure of the local replica).
type routed[T any] struct {
	choice[T]
	tried []Attempt
}

// routeFor asks the other replicas of a partition for a query the local
// replica did not answer at once: local is that replica when it may
// answer within the bound (a fallback), localErr why it may not. It
// returns the answer chosen, or the *UnavailableError listing every
// attempt. While nobody holds the partition now (moving), it asks again
// every movingRetryPause for up to RebalanceWait, rereading the routing
// table and the local replica.
func routeFor[T any](ctx context.Context, s *Server, store string, part int32, p params, local *Provenance, localErr error, pathQuery string, decode decodeFn[T]) (routed[T], error) {
	until := time.Now().Add(s.cfg.RebalanceWait)
	var first error
	for {
		r, err, moving := routeOnce(ctx, s, store, part, p, local, localErr, pathQuery, decode)
		if first == nil {
			first = err
		}
		if err == nil || !moving {
			return r, err
		}
		if !time.Now().Before(until) || ctx.Err() != nil {
			// Later rounds skip the hosts the first found unreachable:
			// its attempts say more then.
			var ue *UnavailableError
			if errors.As(err, &ue) && len(ue.Tried) > 0 && allSuspect(ue.Tried) {
				err = first
			}
			return r, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(movingRetryPause):
		}
		o := buildOptions(p.options())
		local = nil
		_, info, lerr := s.q.replica(store, part, &o)
		if localErr = lerr; lerr == nil {
			lp := provenanceOf(s.b.Self(), part, info)
			local = &lp
		}
	}
}

// routeRechecked is routeFor, checking again a local replica it settles
// on, which it returns: routing can take a while, and the replica may have
// changed meanwhile (a standby promoted to a restoring active knows no lag
// until the broker confirms its changelog's end). If that replica no longer
// answers within the bound, the other replicas are asked instead, once.
func routeRechecked[T any](ctx context.Context, s *Server, store string, part int32, p params, o *queryOptions, local *Provenance, localErr error, pathQuery string, decode decodeFn[T]) (routed[T], Replica, ReplicaInfo, error) {
	for again := true; ; again = false {
		ch, err := routeFor(ctx, s, store, part, p, local, localErr, pathQuery, decode)
		if err != nil || !ch.local {
			return ch, nil, ReplicaInfo{}, err
		}
		rep, info, lerr := s.q.replica(store, part, o)
		if lerr == nil {
			return ch, rep, info, nil
		}
		if !again || !reroutable(lerr) {
			return ch, nil, ReplicaInfo{}, &UnavailableError{Store: store, Partition: part, Bound: p.bound, Tried: append(ch.tried, Attempt{Host: s.self(), Err: lerr})}
		}
		local, localErr = nil, lerr
	}
}

// routeOnce is one round of routeFor. moving reports a failure because
// nobody holds the partition now: no host the table names within the
// bound, or every one asked (the local replica included) not hosting it,
// rebalancing or not answering.
func routeOnce[T any](ctx context.Context, s *Server, store string, part int32, p params, local *Provenance, localErr error, pathQuery string, decode decodeFn[T]) (_ routed[T], _ error, moving bool) {
	ue := &UnavailableError{Store: store, Partition: part, Bound: p.bound}
	if localErr != nil && !errors.Is(localErr, ErrNotHostedHere) {
		ue.Tried = append(ue.Tried, Attempt{Host: s.self(), Err: localErr})
	}
	var km KeyQueryMetadata
	m, err := s.b.Metadata()
	if err == nil {
		km, err = locate(m, store, part)
		var inner *UnavailableError
		if errors.As(err, &inner) {
			err = inner.Cause
		}
	}
	if err != nil {
		if local != nil {
			// Nobody else is known: the local replica is the freshest.
			return routed[T]{choice: choice[T]{local: true, prov: *local}}, nil, false
		}
		ue.Cause = err
		// The table names no host at all for the partition.
		return routed[T]{}, ue, errors.Is(err, errNoHost) && partitionMoving(ue.Tried, s.self(), p.bound)
	}
	pl := newRoutePlan(km, p.bound, s.b.Self(), local, s.cfg.ActiveFirstTimeout, memoFingerprint(m))
	ch, tried, ok := routeBy(ctx, s.rt, p.prefer, pl, pathQuery, decode)
	if ok {
		return routed[T]{choice: ch, tried: append(ue.Tried, tried...)}, nil, false
	}
	ue.Tried = append(ue.Tried, tried...)
	if err := ctx.Err(); err != nil {
		ue.Cause = err
		return routed[T]{}, ue, false
	} else if len(ue.Tried) == 0 {
		ue.Cause = fmt.Errorf("no host within staleness=%s holds the partition (active %q)", p.bound, km.Active)
	}
	return routed[T]{}, ue, partitionMoving(ue.Tried, s.self(), p.bound)
}

func allSuspect(tried []Attempt) bool {
	for _, a := range tried {
		if !errors.Is(a.Err, errSuspect) {
			return false
		}
	}
	return true
}

// decodeOnePartition reads another instance's answer to a routed
// range-like query asked of one partition (range, all keys' windows): the
// partition's entries and who served them, or the error the answer carries.
func decodeOnePartition[P any](part int32, servedBy func(P) *wireServedBy) decodeFn[P] {
	return func(st int, body []byte) (P, Provenance, error) {
		var zero P
		if st == http.StatusOK {
			var wr struct {
				Partitions []P                  `json:"partitions"`
				Failed     []wirePartitionError `json:"failed"`
			}
			if json.Unmarshal(body, &wr) == nil && len(wr.Partitions) == 1 {
				if sb := servedBy(wr.Partitions[0]); sb != nil {
					return wr.Partitions[0], sb.provenance(part), nil
				}
			}
			if len(wr.Failed) == 1 {
				return zero, Provenance{}, fromWireError(st, wr.Failed[0].wireError)
			}
		}
		return zero, Provenance{}, decodeErrorAnswer(st, body)
	}
}

// routePartition answers one partition of a routed range-like query
// (range, all keys' windows; p names the partition), choosing the replica
// as a routed key lookup does: readLocal reads the local one, pathQuery
// asks another instance, and servedBy finds who served its answer.
func routePartition[P any](ctx context.Context, s *Server, store string, part int32, p params, pathQuery string, readLocal func() (P, error), servedBy func(P) *wireServedBy) (P, error) {
	var zero P
	o := buildOptions(p.options())
	_, info, localErr := s.q.replica(store, part, &o)
	var local *Provenance
	if localErr == nil {
		lp := provenanceOf(s.b.Self(), part, info)
		local = &lp
		if p.prefer == PreferFreshest && lp.caughtUp() {
			return readLocal()
		}
	}
	if !reroutable(localErr) {
		return zero, localErr
	}
	ch, err := routeFor(ctx, s, store, part, p, local, localErr, pathQuery, decodeOnePartition(part, servedBy))
	if err != nil {
		return zero, err
	}
	if ch.local {
		return readLocal()
	}
	return ch.val, nil
}
