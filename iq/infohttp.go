package iq

import (
	"fmt"
	"net/http"
)

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if md, err := s.b.Metadata(); err != nil || md.Unassigned {
		if err == nil {
			// Routing through the group, but holding nothing yet.
			err = ErrNotStarted
		}
		writeErr(w, err)
		return
	}
	confirmed, unconfirmed := 0, 0
	for _, i := range s.b.LocalReplicas() {
		switch i.Role {
		case RoleRestoring:
			writeErr(w, fmt.Errorf("%w: store %q partition %d is restoring (lag %d)", ErrRebalancing, i.Store, i.Partition, i.Lag))
			return
		case RoleActive:
			confirmed++
		case RoleUnconfirmed:
			unconfirmed++
		}
	}
	// An instance the group has not confirmed lately (cut off from the
	// broker, or just resumed from a pause) answers for none of its
	// partitions as the active: not ready, so that load balancers send
	// queries elsewhere. Some actives unconfirmed (one stream thread's
	// member among several) leaves it serving the others: degraded.
	switch {
	case unconfirmed > 0 && confirmed == 0:
		writeErr(w, fmt.Errorf("%w: the group has not confirmed this instance lately (cut off from the broker, or paused): its %d active store partitions are unconfirmed",
			ErrRebalancing, unconfirmed))
	case unconfirmed > 0:
		writeJSON(w, http.StatusOK, map[string]any{"status": "degraded", "unconfirmed": unconfirmed})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

func (s *Server) handleMetadata(w http.ResponseWriter, _ *http.Request) {
	m, err := s.b.Metadata()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toWireMetadata(m))
}

func (s *Server) handleStoreMetadata(w http.ResponseWriter, r *http.Request) {
	sm, err := s.q.StoreMetadata(r.PathValue("store"))
	if err != nil {
		writeErr(w, err)
		return
	}
	wm := toWireMetadata(Metadata{Hosts: sm.Hosts})
	writeJSON(w, http.StatusOK, struct {
		Store      string         `json:"store"`
		Partitions int32          `json:"partitions"`
		Instances  []wireInstance `json:"instances"`
		Global     bool           `json:"global,omitempty"`
	}{sm.Store, sm.Partitions, wm.Instances, sm.Global})
}

func (s *Server) handleKeyMetadata(w http.ResponseWriter, r *http.Request, keyText string) {
	store := r.PathValue("store")
	c, ok := s.codec(w, store)
	if !ok {
		return
	}
	kb, err := c.EncodeKey(keyText)
	if err != nil {
		writeErr(w, invalidf("malformed key %q for store %q: %v", keyText, store, err))
		return
	}
	km, err := s.q.KeyMetadata(store, kb)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := wireKeyMetadata{Partition: km.Partition, Standbys: nonNil(km.Standbys), Warmups: nonNil(km.Warmups), Global: km.Global}
	if km.Active != "" {
		out.Active = &km.Active
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleLags(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, lagsOf(s.b.LocalReplicas()))
}
