package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

func setOp(txn *badger.Txn, o op, e *badger.Entry) error {
	if o.value == nil {
		return txn.Delete(o.key)
	}
	return txn.SetEntry(e)
}

// Write applies entries and records position.
//
// When the batch fits in one badger transaction (badger caps a transaction
// at 15% of MemTableSize and a matching entry count, 3,275 small entries
// or ~315 KB with the default options), entries and position commit
// together. A larger batch with a position is written torn (see
// badgertorn.go): applied with new reads held back, so atomic for
// readers, then the position; a crash in between leaves the store torn
// until its changelog is replayed past the batch. A larger batch without
// a position is staged (see badgerstage.go), atomic for readers and across
// a crash, at the cost of writing it twice.
func (s *badgerStore) Write(entries []Entry, position int64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	s.wmu.Lock()
	defer s.wmu.Unlock()

	// Checked before anything is written, so a refused Write leaves the
	// store exactly as it was and may simply be retried.
	if err := s.room(valueLogBytes(entries, s.valueThreshold)); err != nil {
		return err
	}
	s.beginChange()
	defer s.endChange()
	ops, err := s.plan(entries)
	if err != nil {
		return diskError(s.dir, s.opts.DiskReserve, fmt.Errorf("statestore: badger write: %w", err))
	}
	return s.writeOps(ops, position)
}

// writeOps writes the planned ops of a Write and its position, between
// beginChange and endChange.
func (s *badgerStore) writeOps(ops []op, position int64) error {
	var pos [8]byte
	binary.BigEndian.PutUint64(pos[:], uint64(position))
	var err error
	big := !s.fitsOneTxn(ops)
	if !big {
		err = s.writeTxn(ops, position)
		big = errors.Is(err, badger.ErrTxnTooBig)
	}
	switch {
	case !big:
	case position == NoPosition:
		// Nothing to replay a torn write from: keep it atomic.
		err = s.writeStaged(ops, pos[:])
	default:
		err = s.writeTorn(ops, position)
	}
	if err != nil {
		return diskError(s.dir, s.opts.DiskReserve, fmt.Errorf("statestore: badger write: %w", err))
	}
	s.position.Store(position)
	return nil
}

// plan turns a batch into badger ops. Short keys, nearly always all of
// them, get their namespaced keys from one allocation; long keys go
// through a planner, which reads their slots. Every write of a batch plans
// it first, so plan shows the batch's keys to the store's filter, before
// badger holds them.
func (s *badgerStore) plan(entries []Entry) ([]op, error) {
	if f := s.absent.Load(); f != nil {
		f.add(entries)
	}
	n, ns, maxRaw := 0, s.keys.ns, s.keys.maxRaw()
	for _, e := range entries {
		if len(e.Key) <= maxRaw {
			n += len(ns) + 1 + len(e.Key)
		}
	}
	buf := make([]byte, n)
	ops := make([]op, 0, len(entries))
	var p *planner
	for i, e := range entries {
		if err := s.check(e); err != nil {
			return nil, &EntryError{Index: i, Err: err}
		}
		if len(e.Key) <= maxRaw {
			n := len(ns) + 1 + len(e.Key)
			k := buf[:n:n]
			copy(k, ns)
			k[len(ns)] = userPrefix
			copy(k[len(ns)+1:], e.Key)
			buf = buf[n:]
			ops = append(ops, op{key: k, value: e.Value})
			continue
		}
		if p == nil {
			p = &planner{txn: s.db.NewTransaction(false), keys: s.keys}
			defer p.txn.Discard()
		}
		var err error
		if ops, err = p.add(ops, e); err != nil {
			return nil, &EntryError{Index: i, Err: err}
		}
	}
	return ops, nil
}

// check refuses, before anything is written, an entry badger cannot hold:
// a value (with the key, for a slot) beyond one value-log file.
func (s *badgerStore) check(e Entry) error {
	n := int64(len(e.Value))
	if len(e.Key) > s.keys.maxRaw() {
		n += int64(len(e.Key)) + binary.MaxVarintLen64
	}
	// Staging adds a few bytes of framing and the badger key.
	if n+3+binary.MaxVarintLen64+maxKeyBytes > s.opts.ValueLogFileSize {
		return fmt.Errorf("%w: key of %d bytes and value of %d bytes exceed the value-log file size of %d bytes (BadgerOptions.ValueLogFileSize)",
			ErrTooLarge, len(e.Key), len(e.Value), s.opts.ValueLogFileSize)
	}
	return nil
}

// fitsOneTxn mirrors badger's transaction size check (Txn.checkSize) so
// that a batch known to be too big skips building a doomed transaction.
// If the two ever disagree, Write still falls back on ErrTxnTooBig.
func (s *badgerStore) fitsOneTxn(ops []op) bool {
	count, size := s.txnCost(ops)
	return count < s.db.MaxBatchCount() && size < s.db.MaxBatchSize()
}

// txnCost is what badger counts against its transaction limits for ops
// and the position written with them.
func (s *badgerStore) txnCost(ops []op) (count, size int64) {
	const perEntry = 2 + 10 // meta bytes and the version suffix
	count = int64(len(ops) + 1)
	size = int64(len(s.keys.position) + 8 + perEntry)
	if s.legacyPos {
		count++
		size += int64(len(s.keys.legacyPosition) + perEntry)
	}
	for _, o := range ops {
		size += int64(len(o.key)) + perEntry
		if v := int64(len(o.value)); v < s.valueThreshold {
			size += v
		} else {
			size += 12 // value pointer
		}
	}
	return count, size
}

func (s *badgerStore) writeTxn(ops []op, position int64) error {
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	es := entries(ops)
	for i, o := range ops {
		if err := setOp(txn, o, &es[i]); err != nil {
			return err
		}
	}
	if err := s.setPosition(txn, position); err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return err
	}
	s.legacyPos = false
	s.mended(position)
	return nil
}

// readPosition reads the position and sets legacyPos. Called while
// opening. When legacyPositionKey exists it wins over positionKey: this
// binary deletes it in the transaction that writes positionKey, so if both
// exist an older binary wrote the legacy record later (a downgrade
// followed by an upgrade) and positionKey is stale.
func (s *badgerStore) readPosition() (int64, error) {
	pos := NoPosition
	var legacy bool
	err := s.db.View(func(txn *badger.Txn) error {
		if _, err := readPositionAt(txn, s.keys.position, &pos); err != nil {
			return err
		}
		var err error
		legacy, err = readPositionAt(txn, s.keys.legacyPosition, &pos)
		return err
	})
	if err != nil {
		return NoPosition, fmt.Errorf("statestore: read position in %s: %w", s.dir, err)
	}
	s.legacyPos = legacy
	return pos, nil
}

// readPositionAt sets *pos to the position stored under key, if any.
func readPositionAt(txn *badger.Txn, key []byte, pos *int64) (bool, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: position record of %d bytes", ErrCorrupt, len(v))
		}
		*pos = int64(binary.BigEndian.Uint64(v))
		return nil
	})
}
