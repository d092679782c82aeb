package statestore

import (
	"errors"
	"fmt"
	"syscall"
)

// ErrNilValue is what Put returns for a nil value: a nil value is how a
// changelog marks a deletion, so deleting takes Delete.
var ErrNilValue = errors.New("statestore: nil value (use Delete to remove a key)")

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

// ErrDiskFull is the cause of an error from a store that refused, or
// failed, to write because the filesystem holding it is full, or nearly so
// (see BadgerOptions.DiskReserve). The store is left as it was: readable,
// its data and position still in step. A write refused this way may be
// retried as it is once space has been freed; nothing needs reopening.
var ErrDiskFull = errors.New("statestore: disk full")

// DiskFullError reports a store that could not write for lack of disk
// space. errors.Is(err, ErrDiskFull) holds for it, and errors.Is also finds
// the system's error (ENOSPC) when the filesystem itself refused a write.
type DiskFullError struct {
	// Dir is the store's directory.
	Dir string
	// Free is the space available in Dir's filesystem when the store
	// looked, and Reserve the space the store keeps free (both in bytes);
	// Free is -1 when the filesystem reported the error itself.
	Free, Reserve int64
	// Err is the filesystem's error, if it reported one.
	Err error
}

func (e *DiskFullError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("statestore: disk full: store %s: %v", e.Dir, e.Err)
	}
	return fmt.Sprintf("statestore: disk full: store %s: %d bytes free, below the %d bytes the store keeps free for its database's own work (BadgerOptions.DiskReserve); free space to resume",
		e.Dir, e.Free, e.Reserve)
}

// Unwrap returns ErrDiskFull and the filesystem's error, if any.
func (e *DiskFullError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrDiskFull, e.Err}
	}
	return []error{ErrDiskFull}
}

// ErrCorrupt marks a store that failed to open because its files are
// damaged, on positive evidence: a checksum or a manifest that does not
// hold, a table the manifest lists missing or unreadable, data files with no
// manifest beside them, a record of the store's own (its position, a
// torn-write marker, a staged write) that does not parse. Such a store can
// only be deleted and rebuilt from its changelog. An open that fails for any
// other reason, known or not, does not wrap ErrCorrupt: deleting a store
// takes proof that its files are the problem.
var ErrCorrupt = errors.New("statestore: store files are damaged")

// MachineError reports a store that could not be opened because of the
// machine it runs on (a limit reached, a permission, a failing disk), not
// because of its files: deleting the store would not help, and its files
// are left as they are. errors.Is(err, Errno) holds, including where badger
// reported the system's error only in its message.
type MachineError struct {
	// Dir is the store's directory.
	Dir string
	// Errno is the system's error.
	Errno syscall.Errno
	// Err is the error the open failed with.
	Err error
}

func (e *MachineError) Error() string {
	return fmt.Sprintf("statestore: open badger %s: %s; the store's files are left as they are: %v", e.Dir, machineHint(e.Errno), e.Err)
}

// Unwrap returns the system's error and the error the open failed with.
func (e *MachineError) Unwrap() []error { return []error{e.Errno, e.Err} }
