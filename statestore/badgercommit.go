package statestore

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// StoreWrite is one store's part of a Commit: what its Write would apply.
type StoreWrite struct {
	Store    Store
	Entries  []Entry
	Position int64
}

// Commit applies groups of writes, each write to a distinct store of d, as
// the stores' Writes would. A group (a task's stores, say) commits in one
// badger transaction, so a crash keeps all of it or none, unless it is too
// big for one (more than about 15% of MemTableSize): then each write in
// it is written as its store's Write would write it. The groups'
// transactions go to badger's write loop together, which writes them to
// its log at once, and Commit waits for all of them: committing a
// thread's tasks in one call costs less than one Write after another.
//
// Groups are not merged into one transaction: badger applies a
// transaction's entries to its memtable in no particular order (a map's),
// and the entries of thousands of stores, scattered that way over the
// memtable, cost markedly more to insert than the same entries store by
// store.
func (d *SharedBadger) Commit(groups ...[]StoreWrite) error {
	ss, err := d.commitStores(groups)
	if err != nil {
		return err
	}
	order, err := d.lockStores(ss)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range order {
			s.wmu.Unlock()
			s.exit()
		}
	}()
	var vlog int64
	for _, g := range groups {
		for _, w := range g {
			vlog += valueLogBytes(w.Entries, d.opts.ValueThreshold)
		}
	}
	if err := roomFor(d.dir, d.opts.DiskReserve, d.alloc, vlog); err != nil {
		return err
	}
	for _, s := range order {
		s.beginChange()
		defer s.endChange()
	}
	txns, ops, err := d.groupTxns(ss, groups)
	if err != nil {
		return err
	}
	return d.finishGroups(ss, groups, txns, ops, sendTxns(txns))
}

// commitStores returns the store of every write of groups, in order, each
// one of d's.
func (d *SharedBadger) commitStores(groups [][]StoreWrite) ([]*badgerStore, error) {
	var ss []*badgerStore
	for _, g := range groups {
		for _, w := range g {
			s, ok := w.Store.(*badgerStore)
			if !ok || s.home != d {
				return nil, fmt.Errorf("statestore: commit to shared badger %s: a store that is not one of its stores", d.dir)
			}
			ss = append(ss, s)
		}
	}
	return ss, nil
}

// lockStores enters and write-locks every store of ss and returns them in
// the order locked; a store named twice is an error.
func (d *SharedBadger) lockStores(ss []*badgerStore) ([]*badgerStore, error) {
	// Stores are locked in name order, so commits of overlapping sets of
	// stores cannot deadlock.
	order := slices.Clone(ss)
	slices.SortFunc(order, func(a, b *badgerStore) int { return cmp.Compare(a.name, b.name) })
	for i := 1; i < len(order); i++ {
		if order[i] == order[i-1] {
			return nil, fmt.Errorf("statestore: commit to shared badger %s: store %q written twice", d.dir, order[i].name)
		}
	}
	for i, s := range order {
		if err := s.enter(); err != nil {
			for _, s := range order[:i] {
				s.wmu.Unlock()
				s.exit()
			}
			return nil, err
		}
		s.wmu.Lock()
	}
	return order, nil
}

// groupTxns makes every group's transaction (groupTxn), discarding them
// all on an error.
func (d *SharedBadger) groupTxns(ss []*badgerStore, groups [][]StoreWrite) ([]*badger.Txn, [][][]op, error) {
	// Every group's transaction is made before the first is sent: badger
	// makes a new transaction wait until every one sent before it has
	// been applied, so making them one after another's commit would send
	// them one trip of the write loop apart.
	txns := make([]*badger.Txn, len(groups))
	ops := make([][][]op, len(groups))
	var err error
	first := 0 // of the group's stores in ss
	for i, g := range groups {
		gs := ss[first : first+len(g)]
		first += len(g)
		if txns[i], ops[i], err = d.groupTxn(gs, g); err != nil {
			break
		}
	}
	if err != nil {
		for _, txn := range txns {
			if txn != nil {
				txn.Discard()
			}
		}
		return nil, nil, err
	}
	return txns, ops, nil
}

// sendTxns sends every transaction of txns (nil ones aside) to badger's
// write loop and returns, once all are written, each one's error.
func sendTxns(txns []*badger.Txn) []error {
	var (
		wg   sync.WaitGroup
		errs = make([]error, len(txns))
	)
	for i, txn := range txns {
		if txn == nil {
			continue
		}
		wg.Add(1)
		txn.CommitWith(func(err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	return errs
}

// finishGroups writes the groups too big for one transaction store by
// store and sets the positions of the groups committed; errs holds each
// group's transaction's error.
func (d *SharedBadger) finishGroups(ss []*badgerStore, groups [][]StoreWrite, txns []*badger.Txn, ops [][][]op, errs []error) error {
	var err error
	first := 0
	for i, g := range groups {
		gs := ss[first : first+len(g)]
		first += len(g)
		if txns[i] == nil {
			// Too big for one transaction: each store's write as its
			// Write would make it.
			for j, w := range g {
				err = cmp.Or(err, gs[j].writeOps(ops[i][j], w.Position))
			}
			continue
		}
		if errs[i] != nil {
			err = cmp.Or(err, diskError(d.dir, d.opts.DiskReserve, fmt.Errorf("statestore: badger write: %w", errs[i])))
			continue
		}
		for j, w := range g {
			gs[j].mended(w.Position)
			gs[j].position.Store(w.Position)
		}
	}
	return err
}

// groupTxn plans a group's writes and returns a transaction holding them,
// to commit, or none if they do not fit in one.
func (d *SharedBadger) groupTxn(ss []*badgerStore, g []StoreWrite) (*badger.Txn, [][]op, error) {
	ops := make([][]op, len(g))
	var count, size int64
	for i, w := range g {
		var err error
		if ops[i], err = ss[i].plan(w.Entries); err != nil {
			return nil, nil, diskError(d.dir, d.opts.DiskReserve, fmt.Errorf("statestore: badger write: %w", err))
		}
		c, s := ss[i].txnCost(ops[i])
		count, size = count+c, size+s
	}
	if count >= d.db.MaxBatchCount() || size >= d.db.MaxBatchSize() {
		return nil, ops, nil
	}
	txn := d.db.NewTransaction(true)
	for i, w := range g {
		es := entries(ops[i])
		err := ss[i].setPosition(txn, w.Position)
		for j := 0; j < len(ops[i]) && err == nil; j++ {
			err = setOp(txn, ops[i][j], &es[j])
		}
		if err != nil {
			txn.Discard()
			if errors.Is(err, badger.ErrTxnTooBig) {
				// The estimate fell short of badger's count.
				return nil, ops, nil
			}
			return nil, nil, fmt.Errorf("statestore: badger write: %w", err)
		}
	}
	return txn, ops, nil
}
