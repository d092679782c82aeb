package iq

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// LocalReader reads serialized keys from an instance's local stores. The
// runtime's App implements it.
type LocalReader interface {
	// LocalGet returns the value of key in store, whether it was found, and
	// the partition the key belongs to.
	LocalGet(store string, key []byte) (value []byte, found bool, partition int32, err error)
	// Ready reports whether the instance is running and has no task
	// restoring.
	Ready() bool
}

// StoreCodec tells the HTTP server how to turn a key given in a URL into a
// store key, and a stored value into JSON.
type StoreCodec struct {
	Name        string
	EncodeKey   func(string) ([]byte, error)
	DecodeValue func([]byte) (any, error)
}

// NewHandler serves:
//
//	GET /v1/stores/{store}/keys/{key}  200 {"key", "value", "partition"}; 404 when absent
//	GET /healthz                       200 once the instance is ready, 503 before
//
// Errors are JSON objects {"error": "..."} with a 4xx or 5xx status.
func NewHandler(r LocalReader, stores ...StoreCodec) http.Handler {
	byName := make(map[string]StoreCodec, len(stores))
	for _, s := range stores {
		byName[s.Name] = s
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "not ready: starting, rebalancing or restoring"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /v1/stores/{store}/keys/{key}", func(w http.ResponseWriter, req *http.Request) {
		name, key := req.PathValue("store"), req.PathValue("key")
		codec, ok := byName[name]
		if !ok {
			writeError(w, fmt.Errorf("%w: %q", ErrUnknownStore, name))
			return
		}
		kb, err := codec.EncodeKey(key)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: fmt.Sprintf("malformed key %q: %v", key, err)})
			return
		}
		vb, found, partition, err := r.LocalGet(name, kb)
		if err != nil {
			writeError(w, err)
			return
		}
		if !found {
			writeJSON(w, http.StatusNotFound, keyBody{Key: key, Partition: partition, Error: "key not found"})
			return
		}
		v, err := codec.DecodeValue(vb)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, errorBody{Error: fmt.Sprintf("decode value: %v", err)})
			return
		}
		writeJSON(w, http.StatusOK, keyBody{Key: key, Value: v, Partition: partition})
	})
	return mux
}

type keyBody struct {
	Key       string `json:"key"`
	Value     any    `json:"value,omitempty"`
	Partition int32  `json:"partition"`
	Error     string `json:"error,omitempty"`
}

type errorBody struct {
	Error string `json:"error"`
}

// StatusFor maps a query error to an HTTP status.
func StatusFor(err error) int {
	switch {
	case errors.Is(err, ErrUnknownStore):
		return http.StatusNotFound
	case errors.Is(err, ErrNotHostedHere):
		return http.StatusMisdirectedRequest
	case errors.Is(err, ErrNotRunning):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

func writeError(w http.ResponseWriter, err error) {
	writeJSON(w, StatusFor(err), errorBody{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}
