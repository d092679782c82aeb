package iq

import (
	"net/http"
	"strings"
	"time"
)

// Request describes one request the HTTP server finished, for
// ServerConfig.ObserveRequest.
type Request struct {
	// Endpoint is the kind of request, one of Endpoints.
	Endpoint string
	// Role is the role of the replica that answered a key lookup (on
	// another instance, for a forwarded one); 0 for every other request
	// and for a refused lookup.
	Role Role
	// Outcome is OutcomeOK for an answer (a key lookup's "key not found"
	// included), else the reason code of the error answer (too_stale,
	// not_available, unauthorized, ...).
	Outcome string
	// Elapsed is how long the server took, from the request's arrival
	// to the answer's last byte handed to the connection.
	Elapsed time.Duration
}

// OutcomeOK is Request.Outcome for a request that was answered.
const OutcomeOK = "ok"

// Endpoint kinds of Request.Endpoint.
const (
	EndpointKey      = "key"      // GET /v1/stores/{store}/keys/{key}, ?key=
	EndpointRange    = "range"    // GET /v1/stores/{store}/range
	EndpointWindows  = "windows"  // a key's windows, or every key's
	EndpointSessions = "sessions" // a key's sessions, or every key's
	EndpointMetadata = "metadata" // GET /v1/metadata and below
	EndpointLags     = "lags"     // GET /v1/lags
	EndpointTasks    = "tasks"    // GET /v1/tasks
	EndpointHealth   = "health"   // GET /healthz
	EndpointOther    = "other"    // no endpoint of the API, or refused before routing
)

// Endpoints lists every value of Request.Endpoint.
var Endpoints = []string{EndpointKey, EndpointRange, EndpointWindows, EndpointSessions, EndpointMetadata,
	EndpointLags, EndpointTasks, EndpointHealth, EndpointOther}

// endpointOf names the kind of endpoint a ServeMux pattern routes to.
func endpointOf(pattern string) string {
	path := strings.TrimPrefix(pattern, "GET ")
	switch {
	case path == "/healthz":
		return EndpointHealth
	case path == "/v1/lags":
		return EndpointLags
	case path == "/v1/tasks":
		return EndpointTasks
	case strings.HasPrefix(path, "/v1/metadata"):
		return EndpointMetadata
	case strings.HasSuffix(path, "/windows"):
		return EndpointWindows
	case strings.HasSuffix(path, "/sessions"):
		return EndpointSessions
	case strings.HasSuffix(path, "/range"):
		return EndpointRange
	case strings.HasPrefix(path, "/v1/stores/") && strings.Contains(path, "/keys"):
		return EndpointKey
	}
	return EndpointOther
}

// recorder is the ResponseWriter the handlers of an observed request
// write to: it keeps what the answer said for ObserveRequest.
type recorder struct {
	http.ResponseWriter
	role   Role
	reason string
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// noteRole records the role of the replica that answered.
func noteRole(w http.ResponseWriter, role Role) {
	if r, ok := w.(*recorder); ok {
		r.role = role
	}
}

// noteReason records the reason code of an error answer.
func noteReason(w http.ResponseWriter, reason string) {
	if r, ok := w.(*recorder); ok {
		r.reason = reason
	}
}

// observed serves r through serve, reporting it to ObserveRequest.
func (s *Server) observed(w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter, *http.Request)) {
	if s.cfg.ObserveRequest == nil {
		serve(w, r)
		return
	}
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	serve(rec, r)
	req := Request{Endpoint: endpointOf(r.Pattern), Outcome: OutcomeOK, Elapsed: time.Since(start)}
	if rec.reason != "" {
		req.Outcome = rec.reason
	} else {
		req.Role = rec.role
	}
	s.cfg.ObserveRequest(req)
}
