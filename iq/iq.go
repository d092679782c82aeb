// Package iq is the query side of Eddy: typed errors a caller can branch on,
// and the HTTP server that answers key lookups against an instance's local
// state. The runtime hands it what it needs through small interfaces, so iq
// never depends on the runtime.
package iq

import "errors"

// Errors a query returns; branch on them with errors.Is. Each message says
// what to do next.
var (
	// ErrUnknownStore: the topology has no store of that name. Check the
	// store name against the topology's Describe output.
	ErrUnknownStore = errors.New("iq: unknown store (check the store name against the topology)")
	// ErrNotRunning: the instance is not running (not started yet, or
	// shutting down). Retry later or ask another instance.
	ErrNotRunning = errors.New("iq: instance is not running (retry later or ask another instance)")
	// ErrNotHostedHere: this instance does not hold the key's partition as
	// a running active task. Ask the instance that does.
	ErrNotHostedHere = errors.New("iq: partition is not hosted here as a running active (ask the instance that hosts it)")
)
