package iq

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/eddystreams/eddy/statestore"
)

// KeyQuery describes one key lookup an HTTP server finished, for
// ServerConfig.Observe.
//
// A lookup routed to another instance is observed twice, by two servers:
// the one that forwarded it (Forwarded set, ServedBy naming the other
// host) and the one that answered it locally. Counting only lookups with
// Forwarded unset counts each answer once across a cluster.
type KeyQuery struct {
	// Store is the store named in the request's URL, which may not exist
	// (Reason unknown_store).
	Store string
	// Err is why the lookup was refused; nil when a replica answered,
	// whether or not it found the key.
	Err error
	// Reason is the code the error answer carries in its "reason" field
	// (too_stale, not_available, rebalancing, invalid_query, ...); "" when
	// a replica answered.
	Reason string
	// ServedBy is the replica that answered, when Err is nil.
	ServedBy Provenance
	// Found is whether the answering replica held the key.
	Found bool
	// Forwarded is set when another instance answered and this server
	// passed its answer on.
	Forwarded bool
}

func (s *Server) observe(w http.ResponseWriter, q KeyQuery) {
	if q.Err == nil {
		noteRole(w, q.ServedBy.Role)
	}
	if s.cfg.Observe == nil {
		return
	}
	if q.Err != nil {
		_, q.Reason = classify(q.Err)
	}
	s.cfg.Observe(q)
}

// refuseKey writes err as the answer to a key lookup, observing it.
func (s *Server) refuseKey(w http.ResponseWriter, store string, err error) {
	s.observe(w, KeyQuery{Store: store, Err: err})
	s.writeErr(w, err)
}

func (s *Server) handleKey(w http.ResponseWriter, r *http.Request, keyText string) {
	store := r.PathValue("store")
	v := r.URL.Query()
	c, ok := s.codecs[store]
	if !ok {
		s.refuseKey(w, store, fmt.Errorf("%w: %q is not served over HTTP", ErrUnknownStore, store))
		return
	}
	p, err := parseParams(v, true, 0)
	if err != nil {
		s.refuseKey(w, store, err)
		return
	}
	kb, err := c.EncodeKey(keyText)
	if err != nil {
		s.refuseKey(w, store, invalidf("malformed key %q for store %q: %v", keyText, store, err))
		return
	}
	o := buildOptions(p.options())
	if err := s.q.checkKeyQuery(store, &o); err != nil {
		s.refuseKey(w, store, err)
		return
	}
	part := p.partition
	if !p.hasPartition {
		if part, err = s.b.KeyPartition(store, kb); err != nil {
			s.refuseKey(w, store, err)
			return
		}
	}
	ctx := r.Context()
	rep, info, localErr := s.q.replica(store, part, &o)
	var local *Provenance
	if localErr == nil {
		lp := provenanceOf(s.b.Self(), part, info)
		local = &lp
		if !p.route || lp.Role == RoleGlobal || (p.prefer == PreferFreshest && lp.caughtUp()) {
			s.answerKeyLocally(w, c, keyText, rep, info, part, kb, p.bound, o.at(), nil)
			return
		}
	}
	if !p.route || !reroutable(localErr) || s.isGlobal(store) {
		s.refuseKey(w, store, localErr)
		return
	}
	release, err := acquire(s.forwards, "forwarded key lookups")
	if err != nil {
		s.refuseKey(w, store, err)
		return
	}
	defer release()
	type keyAnswer struct {
		status int
		body   []byte
	}
	ch, rep, info, err := routeRechecked(ctx, s, store, part, p, &o, local, localErr, keyPath(store, keyText, p.forwardQuery()), func(st int, body []byte) (keyAnswer, Provenance, error) {
		if st == http.StatusOK || st == http.StatusNotFound {
			var k wireKey
			if json.Unmarshal(body, &k) == nil && k.ServedBy != nil {
				return keyAnswer{st, body}, k.ServedBy.provenance(k.Partition), nil
			}
		}
		return keyAnswer{}, Provenance{}, decodeErrorAnswer(st, body)
	})
	if err != nil {
		s.refuseKey(w, store, err)
		return
	}
	if ch.local {
		s.answerKeyLocally(w, c, keyText, rep, info, part, kb, p.bound, o.at(), ch.tried)
		return
	}
	s.observe(w, KeyQuery{Store: store, ServedBy: ch.prov, Found: ch.val.status == http.StatusOK, Forwarded: true})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ch.val.status)
	w.Write(ch.val.body)
}

// answerKeyLocally reads a key from the local replica. tried, the
// attempts of a router that fell back on it, make up the refusal if the
// replica moved away meanwhile.
func (s *Server) answerKeyLocally(w http.ResponseWriter, c StoreCodec, keyText string, rep Replica, info ReplicaInfo, part int32, kb []byte, bound Staleness, at int64, tried []Attempt) {
	res, err := s.q.getFrom(rep, info, bound, c.Name, part, kb, at)
	if err != nil {
		if tried != nil {
			err = &UnavailableError{Store: c.Name, Partition: part, Bound: bound, Tried: append(tried, Attempt{Host: s.self(), Err: err})}
		}
		s.refuseKey(w, c.Name, err)
		return
	}
	s.writeKey(w, c, keyText, res)
}

func (s *Server) writeKey(w http.ResponseWriter, c StoreCodec, keyText string, res Result[[]byte]) {
	out := wireKey{Key: keyText, Partition: res.Provenance.Partition, ServedBy: servedBy(res.Provenance)}
	if !res.Found {
		out.Error = "key not found"
		s.observe(w, KeyQuery{Store: c.Name, ServedBy: res.Provenance})
		writeJSON(w, http.StatusNotFound, out)
		return
	}
	if res.ValidFrom != 0 || res.ValidTo != 0 {
		out.ValidFrom = &res.ValidFrom
		if res.ValidTo != statestore.OpenEnded {
			out.ValidTo = &res.ValidTo
		}
	}
	v, err := c.DecodeValue(res.Value)
	if err == nil {
		out.Value, err = json.Marshal(v)
	}
	if err != nil {
		s.refuseKey(w, c.Name, fmt.Errorf("iq: store %q partition %d: decode value: %w", c.Name, res.Provenance.Partition, err))
		return
	}
	out.TimestampMs = res.Timestamp
	s.observe(w, KeyQuery{Store: c.Name, ServedBy: res.Provenance, Found: true})
	writeJSON(w, http.StatusOK, out)
}
