package statestore

import (
	"bytes"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// deleteKeys deletes every key with prefix, in batches of sweepBatch keys,
// and reports whether it got to the end: it stops early once stop is
// closed. Given a stop (the sweeper), it waits for room before each batch
// (waitRoom).
func (d *SharedBadger) deleteKeys(prefix []byte, stop <-chan struct{}) (bool, error) {
	// Each batch starts after the last key deleted: from the prefix, it
	// would read every tombstone written so far again.
	from := prefix
	for {
		select {
		case <-stop:
			return false, nil
		default:
		}
		if stop != nil && !d.waitRoom(stop) {
			return false, nil
		}
		var keys [][]byte
		err := d.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
			defer it.Close()
			for it.Seek(from); it.Valid() && len(keys) < sweepBatch; it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return err == nil, err
		}
		from = append(bytes.Clone(keys[len(keys)-1]), 0)
		wb := d.db.NewWriteBatch()
		for _, k := range keys {
			if err := wb.Delete(k); err != nil {
				wb.Cancel()
				return false, err
			}
		}
		if err := wb.Flush(); err != nil {
			return false, err
		}
	}
}

// waitRoom waits until the DB may be written (roomFor), or stop is closed,
// and reports which. The sweeper's tombstones are writes like any other:
// on a full filesystem they would fill the memtable, whose next log and
// flushed table badger writes through maps of unallocated files.
func (d *SharedBadger) waitRoom(stop <-chan struct{}) bool {
	var logged time.Time
	for wait := closeWaitFirst; ; wait = min(2*wait, closeWaitMax) {
		err := roomFor(d.dir, d.opts.DiskReserve, d.alloc, 0)
		if err == nil {
			return true
		}
		if time.Since(logged) >= diskFullLogEvery {
			logged = time.Now()
			d.opts.Logger.Warn("disk full: the deletion of a dropped store's keys waits for space", "dir", d.dir, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-stop:
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// sweepBatch is how many keys of a dropped store one WriteBatch deletes.
const sweepBatch = 10_000

// wakeSweeper has the sweeper look for work.
func (d *SharedBadger) wakeSweeper() {
	select {
	case d.sweepWake <- struct{}{}:
	default:
	}
}

// sweepLoop deletes the keys of dropped stores and then their drop
// records, until Close.
func (d *SharedBadger) sweepLoop() {
	defer close(d.sweepDone)
	for {
		select {
		case <-d.stop:
			return
		case <-d.sweepWake:
		}
		for {
			d.mu.Lock()
			if len(d.dropping) == 0 {
				d.mu.Unlock()
				break
			}
			id := d.dropping[0]
			d.mu.Unlock()
			done, err := d.deleteKeys(storeNS(id), d.stop)
			if err == nil && done {
				err = d.update(func(txn *badger.Txn) error { return txn.Delete(dropKey(id)) })
			}
			if err != nil {
				// The record stays: the next open retries.
				d.opts.Logger.Warn("statestore: cannot delete the keys of a dropped store", "dir", d.dir, "err", err)
				return
			}
			if !done {
				return
			}
			d.mu.Lock()
			d.dropping = d.dropping[1:]
			d.mu.Unlock()
		}
	}
}
