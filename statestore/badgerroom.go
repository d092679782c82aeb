package statestore

import (
	"errors"
	"path/filepath"
)

// checkRoom refuses to let badger write into dir's filesystem when less
// than reserve bytes are free (see BadgerOptions.DiskReserve). The
// directory need not exist yet: its nearest existing parent is measured.
func checkRoom(dir string, reserve int64) error {
	if reserve < 0 {
		return nil
	}
	for d := dir; ; {
		free, ok := freeBytes(d)
		if ok {
			if free < reserve {
				return &DiskFullError{Dir: dir, Free: free, Reserve: reserve}
			}
			return nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return nil
		}
		d = parent
	}
}

// room refuses a write to the store below its reserve, or while its
// preallocator finds the filesystem full, and has the preallocator
// allocate the value log for the write's vlog bytes (see valueLogBytes).
func (s *badgerStore) room(vlog int64) error {
	return roomFor(s.dir, s.opts.DiskReserve, s.alloc, vlog)
}

// roomFor refuses a write to the badger database in dir, kept with
// reserve and alloc, as badgerStore's room describes.
func roomFor(dir string, reserve int64, alloc *preallocator, vlog int64) error {
	if err := checkRoom(dir, reserve); err != nil {
		return err
	}
	if err := alloc.check(); err != nil {
		return err
	}
	if vlog > 0 {
		if err := alloc.ahead(vlog); err != nil {
			return err
		}
	}
	if roomChecked != nil {
		roomChecked(dir)
	}
	return nil
}

// valueLogBytes bounds what entries add to the value log: badger keeps a
// value there, with its key and a header, from threshold bytes on.
func valueLogBytes(entries []Entry, threshold int64) int64 {
	var n int64
	for _, e := range entries {
		if int64(len(e.Value)) >= threshold {
			n += int64(len(e.Key)+len(e.Value)) + vlogEntryOverhead
		}
	}
	return n
}

// vlogEntryOverhead bounds a value-log entry's header, checksum and key
// prefix.
const vlogEntryOverhead = 64

// roomChecked, when set by a test, runs after a write passed the room
// checks and before badger is given it: where another process may fill
// the filesystem.
var roomChecked func(dir string)

// diskError marks err as a full disk if the filesystem said so.
func diskError(dir string, reserve int64, err error) error {
	if err == nil || !isNoSpace(err) || errors.Is(err, ErrDiskFull) {
		return err
	}
	return &DiskFullError{Dir: dir, Free: -1, Reserve: reserve, Err: err}
}
