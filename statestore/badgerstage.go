package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// A Write without a position (an unlogged store's) too big for one badger
// transaction (badger caps one at 15% of MemTableSize, ~315 KB or 3,275
// small entries with the defaults) is made atomic by staging it; one with
// a position is written torn instead (see badgertorn.go), as its
// changelog can repair it:
//
//  1. Stage. Every op of the Write is written under stagePrefix, numbered
//     from 0, through a badger WriteBatch (several transactions). Readers
//     never look there.
//  2. Commit. One transaction writes the stage marker: the format, the new
//     position and the number of staged ops. From here on the Write has
//     happened: a crash before this point leaves the old data and old
//     position (the stage is discarded on open), a crash after it is
//     finished on open, before the store is handed out.
//  3. Apply, with new reads held back. The ops go to their real keys
//     through a WriteBatch; one last transaction writes the position and
//     removes the marker. Reads take their badger snapshot under the view
//     gate, which the apply holds exclusively, so a reader's snapshot
//     precedes the whole apply or follows it: queries see a whole Write or
//     none of it. Reads that already hold a snapshot (open iterators) go on
//     undisturbed; new ones wait for the apply.
//  4. Clean up. The staged ops are deleted.
//
// Such a Write is written twice; Writes that fit one transaction are not
// staged and commit their data and position in that one transaction.
//
// If the apply fails (a disk error), the store refuses every further call
// with that error until it is reopened (which finishes the apply from the
// stage) or Reset: readers must not see the half-applied Write.
const stagePrefix byte = 0x02

// stageMarkerKey holds the marker of a committed, not yet applied Write.
var stageMarkerKey = []byte{metaPrefix, 's', 't', 'g'}

// stageFormatV1 is the first byte of a marker and of every staged op.
const stageFormatV1 byte = 1

func (k keyspace) stage(i uint64) []byte {
	return k.prefixed(stagePrefix, binary.BigEndian.AppendUint64(nil, i))
}

// encodeStaged: format, delete flag, UserMeta, uvarint key length, key, value.
func encodeStaged(o op) []byte {
	b := make([]byte, 0, 3+binary.MaxVarintLen64+len(o.key)+len(o.value))
	del := byte(0)
	if o.value == nil {
		del = 1
	}
	b = append(b, stageFormatV1, del, o.meta)
	b = binary.AppendUvarint(b, uint64(len(o.key)))
	b = append(b, o.key...)
	return append(b, o.value...)
}

var errCorruptStage = fmt.Errorf("%w: staged write", ErrCorrupt)

func decodeStaged(v []byte) (op, error) {
	if len(v) < 4 || v[0] != stageFormatV1 || v[1] > 1 {
		return op{}, errCorruptStage
	}
	del, meta := v[1] == 1, v[2]
	n, w := binary.Uvarint(v[3:])
	if w <= 0 || uint64(len(v)-3-w) < n {
		return op{}, errCorruptStage
	}
	rest := v[3+w:]
	o := op{key: append([]byte{}, rest[:n]...), meta: meta}
	if !del {
		o.value = append([]byte{}, rest[n:]...)
	}
	return o, nil
}

func encodeMarker(pos []byte, n int) []byte {
	m := make([]byte, 0, 17)
	m = append(m, stageFormatV1)
	m = append(m, pos...)
	return binary.BigEndian.AppendUint64(m, uint64(n))
}

// writeStaged writes ops and pos atomically in several transactions.
// Called with wmu held.
func (s *badgerStore) writeStaged(ops []op, pos []byte) error {
	if err := s.stage(ops, pos); err != nil {
		return err
	}
	return s.applyStaged(ops, pos)
}

// stage writes ops to the stage and then the marker that commits them.
func (s *badgerStore) stage(ops []op, pos []byte) error {
	wb := s.db.NewWriteBatch()
	for i, o := range ops {
		if err := wb.Set(s.keys.stage(uint64(i)), encodeStaged(o)); err != nil {
			wb.Cancel()
			return fmt.Errorf("stage: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(s.keys.stageMarker, encodeMarker(pos, len(ops))) })
	if err != nil {
		return fmt.Errorf("stage marker: %w", err)
	}
	return nil
}

// applyStaged applies committed staged ops, moves the position, removes
// the marker and then the stage.
func (s *badgerStore) applyStaged(ops []op, pos []byte) error {
	if err := s.applyGated(ops, pos); err != nil {
		err = fmt.Errorf("apply staged write (the store must be reopened to finish it): %w", err)
		s.failed.Store(&err)
		return err
	}
	wb := s.db.NewWriteBatch()
	for i := range ops {
		if err := wb.Delete(s.keys.stage(uint64(i))); err != nil {
			wb.Cancel()
			return s.stageLeft(err)
		}
	}
	if err := wb.Flush(); err != nil {
		return s.stageLeft(err)
	}
	return nil
}

// stageLeft reports a stage left behind: harmless, as the next open
// deletes it and the next staged Write overwrites it.
func (s *badgerStore) stageLeft(err error) error {
	s.opts.Logger.Warn("statestore: cannot delete a staged write after applying it", "dir", s.dir, "err", err)
	return nil
}

func (s *badgerStore) applyGated(ops []op, pos []byte) error {
	s.view.Lock()
	defer s.view.Unlock()
	if err := s.writeBatch(ops); err != nil {
		return err
	}
	err := s.db.Update(func(txn *badger.Txn) error {
		if err := s.putPosition(txn, pos); err != nil {
			return err
		}
		return txn.Delete(s.keys.stageMarker)
	})
	if err == nil {
		s.legacyPos = false
	}
	return err
}

// recoverStage finishes a staged Write that was committed but not applied
// when the store was last closed or crashed, and discards a stage that was
// never committed. It runs before the store is handed out.
func (s *badgerStore) recoverStage() error {
	var (
		marker []byte
		ops    []op
		keys   [][]byte
	)
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(s.keys.stageMarker)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			if marker, err = item.ValueCopy(nil); err != nil {
				return err
			}
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: s.keys.prefixed(stagePrefix, nil)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			keys = append(keys, item.KeyCopy(nil))
			if marker == nil {
				continue // only to be deleted
			}
			if err := item.Value(func(v []byte) error {
				o, err := decodeStaged(v)
				ops = append(ops, o)
				return err
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("statestore: recover staged write in %s: %w", s.dir, err)
	}
	if marker != nil {
		if len(marker) != 17 || marker[0] != stageFormatV1 {
			return fmt.Errorf("statestore: recover staged write in %s: %w: marker of %d bytes", s.dir, ErrCorrupt, len(marker))
		}
		// Ops 0..n-1 are the Write; any beyond are left from an earlier,
		// longer one whose cleanup failed.
		n := binary.BigEndian.Uint64(marker[9:])
		whole := uint64(len(ops)) >= n
		for i := uint64(0); whole && i < n; i++ {
			whole = binary.BigEndian.Uint64(keys[i][len(s.keys.ns)+1:]) == i
		}
		if whole {
			ops = ops[:n]
		}
		if !whole {
			// The marker outlived part of its stage (only an OS crash
			// without SyncWrites can do that): the Write is lost, and the
			// old data and position it left untouched stand.
			s.opts.Logger.Warn("statestore: discarding an incomplete staged write", "dir", s.dir, "staged", len(ops), "want", n)
			if err := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(s.keys.stageMarker) }); err != nil {
				return fmt.Errorf("statestore: recover staged write in %s: %w", s.dir, err)
			}
		} else if err := s.applyGated(ops, marker[1:9]); err != nil {
			return fmt.Errorf("statestore: recover staged write in %s: %w", s.dir, err)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	wb := s.db.NewWriteBatch()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			wb.Cancel()
			return fmt.Errorf("statestore: recover staged write in %s: %w", s.dir, err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("statestore: recover staged write in %s: %w", s.dir, err)
	}
	return nil
}
