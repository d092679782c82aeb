package statestore

import (
	"errors"
	"fmt"
)

var errNilValue = errors.New("statestore: nil value (use Delete to remove a key)")

// ErrTooLarge is the cause of an EntryError for an entry bigger than the
// store can hold. The badger store holds any key and a key plus value of up
// to ValueLogFileSize bytes (16 MiB by default, far above Kafka's default
// record limit of ~1 MB); the memory store has no limit.
var ErrTooLarge = errors.New("statestore: entry too large for the store")

// EntryError reports the entry of a Write (by its index in the batch) that
// the store cannot hold. The Write applied nothing. Callers that know where
// the entry came from, such as a changelog restoration, name it from Index.
type EntryError struct {
	Index int
	Err   error
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("statestore: entry %d of the write: %v", e.Index, e.Err)
}

func (e *EntryError) Unwrap() error { return e.Err }
