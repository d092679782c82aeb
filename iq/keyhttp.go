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

// keyLookup is a key lookup as its request asks it.
type keyLookup struct {
	store   string
	c       StoreCodec
	keyText string
	key     []byte
	p       params
	o       queryOptions
	part    int32
}

// parseKeyLookup reads a key lookup of store from its request: the
// store's codec, the parameters, the key and its partition.
func (s *Server) parseKeyLookup(r *http.Request, store, keyText string) (keyLookup, error) {
	c, ok := s.codecs[store]
	if !ok {
		return keyLookup{}, fmt.Errorf("%w: %q is not served over HTTP", ErrUnknownStore, store)
	}
	p, err := parseParams(r.URL.Query(), true, 0)
	if err != nil {
		return keyLookup{}, err
	}
	kb, err := c.EncodeKey(keyText)
	if err != nil {
		return keyLookup{}, invalidf("malformed key %q for store %q: %v", keyText, store, err)
	}
	kl := keyLookup{store: store, c: c, keyText: keyText, key: kb, p: p, o: buildOptions(p.options()), part: p.partition}
	if err := s.q.checkKeyQuery(store, &kl.o); err != nil {
		return keyLookup{}, err
	}
	if !p.hasPartition {
		if kl.part, err = s.b.KeyPartition(store, kb); err != nil {
			return keyLookup{}, err
		}
	}
	return kl, nil
}

func (s *Server) handleKey(w http.ResponseWriter, r *http.Request, keyText string) {
	store := r.PathValue("store")
	kl, err := s.parseKeyLookup(r, store, keyText)
	if err != nil {
		s.refuseKey(w, store, err)
		return
	}
	rep, info, localErr := s.q.replica(store, kl.part, &kl.o)
	local, now := s.localFirst(kl.part, kl.p, info, localErr)
	if now {
		s.answerKeyLocally(w, kl, rep, info, nil)
		return
	}
	if !kl.p.route || !reroutable(localErr) || s.isGlobal(store) {
		s.refuseKey(w, store, localErr)
		return
	}
	release, err := acquire(s.forwards, "forwarded key lookups")
	if err != nil {
		s.refuseKey(w, store, err)
		return
	}
	defer release()
	ch, rep, info, err := routeRechecked(r.Context(), s, store, kl.part, kl.p, &kl.o, local, localErr, keyPath(store, keyText, kl.p.forwardQuery()),
		decodeForwarded(func(k wireKey) (*wireServedBy, int32) { return k.ServedBy, k.Partition }))
	switch {
	case err != nil:
		s.refuseKey(w, store, err)
	case ch.local:
		s.answerKeyLocally(w, kl, rep, info, ch.tried)
	default:
		s.observe(w, KeyQuery{Store: store, ServedBy: ch.prov, Found: ch.val.status == http.StatusOK, Forwarded: true})
		ch.val.write(w)
	}
}

// answerKeyLocally reads a key from the local replica. tried, the
// attempts of a router that fell back on it, make up the refusal if the
// replica moved away meanwhile.
func (s *Server) answerKeyLocally(w http.ResponseWriter, kl keyLookup, rep Replica, info ReplicaInfo, tried []Attempt) {
	res, err := s.q.getFrom(rep, info, kl.o.bound, kl.store, kl.part, kl.key, kl.o.at())
	if err != nil {
		if tried != nil {
			err = &UnavailableError{Store: kl.store, Partition: kl.part, Bound: kl.o.bound, Tried: append(tried, Attempt{Host: s.self(), Err: err})}
		}
		s.refuseKey(w, kl.store, err)
		return
	}
	s.writeKey(w, kl.c, kl.keyText, res)
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
