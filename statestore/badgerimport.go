package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/dgraph-io/badger/v4"
)

// importBatch is how many entries Import copies per badger WriteBatch.
const importBatch = 1000

// Import moves the store in dir, a DB of its own opened with opts (see
// OpenBadger), into d as the store called name, then deletes dir: its keys, position and any
// torn-write marker are copied under a new prefix (a staged Write is
// finished first, as opening it does). It is the migration from one DB
// per store. The store must not be open, in d or in dir. If d already
// holds name, an earlier Import got as far as committing it: dir is only
// deleted. A crash during the copy leaves dir whole and the partial copy
// marked for dropping at the next open. A dir that does not exist is no
// error. An error opening dir (wrapping ErrCorrupt, say) is returned as it
// is: the store can then be deleted and rebuilt from its changelog.
func (d *SharedBadger) Import(name, dir string, opts BadgerOptions) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut {
		return ErrClosed
	}
	if _, ok := d.stores[name]; ok {
		return fmt.Errorf("statestore: import into store %q of shared badger %s: it is open", name, d.dir)
	}
	if _, ok := d.ids[name]; ok {
		return DestroyBadger(dir)
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	opts.ValueLogGCInterval = -1
	old, err := OpenBadger(dir, opts)
	if err != nil {
		return err
	}
	id, err := d.newID()
	marked := false
	if err == nil {
		err = d.update(func(txn *badger.Txn) error { return txn.Set(dropKey(id), nil) })
		marked = err == nil
	}
	if err == nil {
		err = d.copyStore(old.(*badgerStore), d.store(name, id), id)
	}
	switch {
	case err == nil:
		d.ids[name] = id
	case marked:
		d.dropping = append(d.dropping, id)
		d.wakeSweeper()
	}
	err = errors.Join(err, old.Close())
	if err != nil {
		return fmt.Errorf("statestore: import %s into store %q of shared badger %s: %w", dir, name, d.dir, err)
	}
	return DestroyBadger(dir)
}

// copyStore copies from's keys into to, a store of d under id, then, in
// one transaction, its records, to's catalog entry and the removal of
// to's drop record.
func (d *SharedBadger) copyStore(from, to *badgerStore, id uint32) error {
	it, err := from.All()
	if err != nil {
		return err
	}
	defer it.Close()
	batch := make([]Entry, 0, importBatch)
	flush := func() error {
		ops, err := to.plan(batch)
		if err == nil {
			err = to.writeBatch(ops)
		}
		batch = batch[:0]
		return err
	}
	for it.Next() {
		batch = append(batch, Entry{Key: bytes.Clone(it.Key()), Value: bytes.Clone(it.Value())})
		if len(batch) == importBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	pos, err := from.Position()
	if err != nil {
		return err
	}
	torn, isTorn := from.TornUntil()
	return d.update(func(txn *badger.Txn) error {
		if pos != NoPosition {
			if err := txn.Set(to.keys.position, binary.BigEndian.AppendUint64(nil, uint64(pos))); err != nil {
				return err
			}
		}
		if isTorn {
			if err := txn.Set(to.keys.torn, encodeTorn(torn)); err != nil {
				return err
			}
		}
		if err := txn.Set(catalogKey(to.name), binary.BigEndian.AppendUint32(nil, id)); err != nil {
			return err
		}
		return txn.Delete(dropKey(id))
	})
}
