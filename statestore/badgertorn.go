package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// A Write with a position that is too big for one badger transaction (a
// commit of tens of thousands of keys) is not staged, which would write
// every entry three times (see badgerstage.go), but written once, torn:
//
//  1. One transaction writes the torn marker: the position the store must
//     reach before it is consistent again (the Write's position).
//  2. The entries go to their keys in several transactions (writeBatch)
//     with new reads held back, as a staged apply is, so readers of the
//     running store see the whole Write or none of it.
//  3. One transaction writes the position and removes the marker.
//
// A crash between 1 and 3 leaves some of the entries applied under the old
// position, with the marker. That is repaired by what restoration does
// anyway, replaying the changelog from the store's position: a Write with a
// position holds what the changelog holds from the old position to the new
// one (the runtime writes a store only once its changelog records are
// acknowledged, under exactly-once only once their transaction has
// committed, so no torn Write holds a record a reader of the changelog
// will not see), and its records are final values per key. Replaying them
// over entries already applied sets each key to its latest value in the
// changelog, as replaying them over the old contents would; keys the
// Write did not touch are left alone by both. Until the replay passes the
// marker's position the store is no snapshot of any offset, which it
// reports through TornUntil (the changelog reader treats it like a store
// being rebuilt, and checks the marker's position, not the old one,
// against the changelog's end).
//
// A Write without a position (an unlogged store) has no changelog to
// repair it from and is staged as before. Small Writes commit data and
// position in one transaction, which also removes the marker once the
// position reaches it.
//
// Like a staged Write's marker, the order of these transactions holds
// across a crash of the process; an operating-system crash without
// SyncWrites can lose any of badger's recent writes (see
// BadgerOptions.SyncWrites).
var tornKey = []byte{metaPrefix, 't', 'r', 'n'}

// tornFormatV1 is the first byte of the torn marker.
const tornFormatV1 byte = 1

// writeTorn writes ops and then position as described above. Called with
// wmu held.
func (s *badgerStore) writeTorn(ops []op, position int64) error {
	if err := s.markTorn(position); err != nil {
		return err
	}
	if err := s.applyTorn(ops, position); err != nil {
		err = fmt.Errorf("torn write (the store must be reopened and restored from its changelog, or reset): %w", err)
		s.failed.Store(&err)
		return err
	}
	s.legacyPos = false
	s.mended(position)
	return nil
}

// markTorn writes the marker of a torn Write up to position.
func (s *badgerStore) markTorn(position int64) error {
	target := max(s.torn.Load(), position)
	marker := encodeTorn(target)
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(s.keys.torn, marker) }); err != nil {
		return fmt.Errorf("torn-write marker: %w", err)
	}
	s.torn.Store(target)
	return nil
}

func encodeTorn(target int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{tornFormatV1}, uint64(target))
}

func (s *badgerStore) applyTorn(ops []op, position int64) error {
	s.view.Lock()
	defer s.view.Unlock()
	if err := s.writeBatch(ops); err != nil {
		return err
	}
	return s.db.Update(func(txn *badger.Txn) error { return s.setPosition(txn, position) })
}

// writeBatch writes ops in as many badger transactions as they need,
// committed in order, and waits for them all. The transactions are all
// made before the first is committed: badger makes every new transaction
// wait until each transaction committed before it has been applied, so a
// transaction begun after one was sent (as a badger WriteBatch begins
// each) waits a whole trip through the write loop, and in a shared DB
// that trip carries the commits of every other store too.
func (s *badgerStore) writeBatch(ops []op) error {
	txns, err := batchTxns(s.db, ops)
	if err != nil {
		return err
	}
	return commitAll(txns)
}

// batchTxns puts ops into transactions of db, in order, starting a new one
// whenever badger finds the current one full.
func batchTxns(db *badger.DB, ops []op) ([]*badger.Txn, error) {
	es := entries(ops)
	txn := db.NewTransaction(true)
	txns := []*badger.Txn{txn}
	for i := 0; i < len(ops); i++ {
		err := setOp(txn, ops[i], &es[i])
		if errors.Is(err, badger.ErrTxnTooBig) {
			txn = db.NewTransaction(true)
			txns = append(txns, txn)
			err = setOp(txn, ops[i], &es[i])
		}
		if err != nil {
			for _, t := range txns {
				t.Discard()
			}
			return nil, err
		}
	}
	return txns, nil
}

// commitAll commits txns in order without waiting for one before sending
// the next, waits for them all and returns their errors. Badger writes
// them to its log in that order, as their commit timestamps are.
func commitAll(txns []*badger.Txn) error {
	var wg sync.WaitGroup
	errs := make([]error, len(txns))
	for i, txn := range txns {
		wg.Add(1)
		txn.CommitWith(func(err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// setPosition writes position in txn and, if it reaches the torn
// marker's, removes the marker with it.
func (s *badgerStore) setPosition(txn *badger.Txn, position int64) error {
	if err := s.putPosition(txn, binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(position))); err != nil {
		return err
	}
	if t := s.torn.Load(); t != NoPosition && position >= t {
		return txn.Delete(s.keys.torn)
	}
	return nil
}

// putPosition writes an encoded position in txn, deleting the legacy
// position record if there is one. The caller clears legacyPos once txn
// has committed.
func (s *badgerStore) putPosition(txn *badger.Txn, pos []byte) error {
	if err := txn.Set(s.keys.position, pos); err != nil {
		return err
	}
	if s.legacyPos {
		return txn.Delete(s.keys.legacyPosition)
	}
	return nil
}

// mended clears the in-memory marker once a committed position reaches it.
func (s *badgerStore) mended(position int64) {
	if t := s.torn.Load(); t != NoPosition && position >= t {
		s.torn.Store(NoPosition)
	}
}

func (s *badgerStore) readTorn() (int64, error) {
	torn := NoPosition
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(s.keys.torn)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 9 || v[0] != tornFormatV1 {
				return fmt.Errorf("%w: torn-write marker of %d bytes", ErrCorrupt, len(v))
			}
			torn = int64(binary.BigEndian.Uint64(v[1:]))
			return nil
		})
	})
	if err != nil {
		return NoPosition, fmt.Errorf("statestore: read torn-write marker in %s: %w", s.dir, err)
	}
	return torn, nil
}

// TornUntil implements TornStore.
func (s *badgerStore) TornUntil() (int64, bool) {
	t := s.torn.Load()
	return t, t != NoPosition
}
