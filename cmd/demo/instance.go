package main

// STUB — the lead replaces this file. It holds the two commands that need
// the runtime: `demo instance` and the no-argument demo. Keep the
// signatures (they are what main.go dispatches to) or change both files
// together.

import (
	"context"
	"errors"
)

// runInstance is `demo instance`: one word-count instance.
func runInstance(ctx context.Context, args []string, s stdio) error {
	return errors.New("instance: not yet implemented")
}

// runDefault is the no-argument demo: embedded broker, instances and
// producer in one process. args holds its flags, if any.
func runDefault(ctx context.Context, args []string, s stdio) error {
	return errors.New("the in-process demo is not yet implemented; see `demo help`")
}
