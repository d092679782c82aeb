package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddystreams/eddy/iq"
)

// The instance's mux must not redirect a query path to its cleaned form
// (another question); the query server refuses it instead.
func TestInstanceHandlerLeavesQueryPathsUncleaned(t *testing.T) {
	s := iq.NewServer(nil, iq.ServerConfig{})
	t.Cleanup(s.Close)
	in := &instance{iq: s, metrics: &instanceMetrics{reg: prometheus.NewRegistry()}}
	h := in.handler()
	for _, path := range []string{
		"/v1/stores/counts-per-minute/keys/../windows",
		"/v1/stores/counts/keys//windows",
		"/v1/stores/counts/keys/./x",
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"reason":"invalid_query"`) {
			t.Errorf("GET %s: %d %s (Location %q), want 400 invalid_query", path, rec.Code, rec.Body, rec.Header().Get("Location"))
		}
	}
}
