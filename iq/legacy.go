package iq

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// LocalReader reads serialized keys from an instance's local active stores.
//
// Deprecated: implement Backend and use NewServer. LocalReader and
// NewHandler remain only until the runtime and the demo move over.
type LocalReader interface {
	// LocalGet returns the value of key in store, whether it was found, and
	// the partition the key belongs to.
	LocalGet(store string, key []byte) (value []byte, found bool, partition int32, err error)
	// Ready reports whether the instance is running and has no task
	// restoring.
	Ready() bool
}

// NewHandler serves key lookups from a LocalReader:
//
//	GET /v1/stores/{store}/keys/{key}  200 {"key", "value", "partition"}; 404 when absent
//	GET /healthz                       200 once the instance is ready, 503 before
//
// Deprecated: use NewServer, which adds provenance, staleness bounds,
// routing and metadata.
func NewHandler(r LocalReader, stores ...StoreCodec) http.Handler {
	byName := make(map[string]StoreCodec, len(stores))
	for _, s := range stores {
		byName[s.Name] = s
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Ready() {
			writeErr(w, fmt.Errorf("%w: starting, rebalancing or restoring", ErrNotStarted))
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /v1/stores/{store}/keys/{key}", func(w http.ResponseWriter, req *http.Request) {
		name, key := req.PathValue("store"), req.PathValue("key")
		codec, ok := byName[name]
		if !ok {
			writeErr(w, fmt.Errorf("%w: %q", ErrUnknownStore, name))
			return
		}
		kb, err := codec.EncodeKey(key)
		if err != nil {
			writeErr(w, invalidf("malformed key %q: %v", key, err))
			return
		}
		vb, found, partition, err := r.LocalGet(name, kb)
		if err != nil {
			writeErr(w, err)
			return
		}
		out := wireKey{Key: key, Partition: partition}
		if !found {
			out.Error = "key not found"
			writeJSON(w, http.StatusNotFound, out)
			return
		}
		v, err := codec.DecodeValue(vb)
		if err == nil {
			out.Value, err = json.Marshal(v)
		}
		if err != nil {
			writeErr(w, fmt.Errorf("iq: decode value: %w", err))
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
	return mux
}
