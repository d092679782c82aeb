package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// The persistent stores of an instance's tasks lie on disk in one of two
// layouts (Config.StoreLayout). Per store, each is a badger database of
// its own, STATE/APP/TASK/STORE: each holds its own files, memory maps,
// memtables and goroutines, which for thousands of stores makes tens of
// thousands of descriptors and half a core of idle background work.
// Shared, they are all prefixes of one database, STATE/APP/stores
// (statestore.SharedBadger), named TASK/STORE there, opened by Start
// before any store and closed after every other. A task's directory then
// holds only what lies beside its stores (window layout files), and marks
// the task as having state on disk, as it does per store: it is made
// before a store of the task enters the database and deleted after the
// task's stores are dropped from it, so the database holds no store of a
// task without a directory. Global stores keep a database each in either
// layout: there are few, and their options differ (globalBadgerOptions).
//
// Start moves stores found in the other layout. Per-store databases are
// imported into the shared one with their data and positions, so an
// upgrade restores nothing. A shared database found by an instance
// configured per store is deleted: its stores are rebuilt from their
// changelogs.

// StoreLayout is how the persistent stores of an instance's tasks lie on
// disk (Config.StoreLayout).
type StoreLayout int

const (
	// StoreLayoutDefault selects StoreLayoutShared.
	StoreLayoutDefault StoreLayout = iota
	// StoreLayoutShared keeps every task store of the instance in one
	// badger database.
	StoreLayoutShared
	// StoreLayoutPerStore gives every task store a badger database of
	// its own.
	StoreLayoutPerStore
)

func (l StoreLayout) String() string {
	switch l {
	case StoreLayoutDefault:
		return "default"
	case StoreLayoutShared:
		return "shared"
	case StoreLayoutPerStore:
		return "per-store"
	}
	return fmt.Sprintf("StoreLayout(%d)", int(l))
}

// ParseStoreLayout parses "shared" or "per-store".
func ParseStoreLayout(s string) (StoreLayout, error) {
	for _, l := range []StoreLayout{StoreLayoutShared, StoreLayoutPerStore} {
		if l.String() == s {
			return l, nil
		}
	}
	return 0, fmt.Errorf("unknown store layout %q (want shared or per-store)", s)
}

// sharedDirName is the state directory's folder holding the shared
// database.
const sharedDirName = "stores"

func (a *App) sharedDir() string { return filepath.Join(a.appDir(), sharedDirName) }

// sharedName is a task store's name in the shared database.
func sharedName(id task.ID, store string) string { return id.String() + "/" + store }

// storeDir is a task store's directory in the per-store layout.
func (a *App) storeDir(id task.ID, store string) string {
	return filepath.Join(task.Dir(a.appDir(), id), store)
}

// openLayout readies the configured layout before any task store opens:
// it opens the shared database, importing the per-store databases it
// finds, or deletes a shared database the per-store layout does not use.
func (a *App) openLayout() error {
	dir := a.sharedDir()
	if a.cfg.StoreLayout == StoreLayoutPerStore {
		if _, err := os.Stat(dir); err != nil {
			return nil
		}
		a.log.Warn("the state directory holds a shared store database, and StoreLayout is per store: deleting it; its stores are rebuilt from their changelogs", "dir", dir)
		if err := statestore.DestroyBadger(dir); err != nil {
			return fmt.Errorf("runtime: delete shared store database %s: %w", dir, err)
		}
		return nil
	}
	open := func() error {
		var err error
		a.shared, err = statestore.OpenSharedBadger(dir, statestore.BadgerOptions{})
		return err
	}
	err := a.waitForSpace(dir, open)
	if errors.Is(err, statestore.ErrCorrupt) {
		// The database cannot say which stores a damaged table held, so
		// every store in it is rebuilt (see statestore.SharedBadger).
		if err := a.admitDamaged(dir, err); err != nil {
			return err
		}
		n := a.taskStoresOnDisk()
		a.log.Warn("shared store database is damaged; deleting it to rebuild every store in it", "dir", dir, "stores", n, "err", err)
		if derr := statestore.DestroyBadger(dir); derr != nil {
			return fmt.Errorf("runtime: delete damaged shared store database %s: %w (opening it failed with: %v)", dir, derr, err)
		}
		a.storesWiped.Add(n)
		err = a.waitForSpace(dir, open)
	}
	if err != nil {
		return fmt.Errorf("runtime: open shared store database: %w", err)
	}
	if err := a.importStores(); err != nil {
		return err
	}
	return a.dropStrayStores()
}

// closeLayout closes the shared database, once every store is closed.
func (a *App) closeLayout() {
	if a.shared == nil {
		return
	}
	if err := a.shared.Close(); err != nil {
		a.log.Warn("cannot close the shared store database", "dir", a.shared.Dir(), "err", err)
	}
}

// persistentStores lists the persistent stores of a task.
func (a *App) persistentStores(id task.ID) []graph.StoreInfo {
	var out []graph.StoreInfo
	for _, info := range graph.Of(a.topo).SubTopologies()[id.SubTopology].Stores {
		if info.Persistent {
			out = append(out, info)
		}
	}
	return out
}

// taskDirs lists the task directories in the state directory that belong
// to the topology, as scanDisk counts them.
func (a *App) taskDirs() ([]task.ID, error) {
	entries, err := os.ReadDir(a.appDir())
	if err != nil {
		return nil, fmt.Errorf("runtime: read state directory: %w", err)
	}
	subs := len(graph.Of(a.topo).SubTopologies())
	var ids []task.ID
	for _, e := range entries {
		id, err := task.ParseID(e.Name())
		if e.IsDir() && err == nil && id.SubTopology < subs && id.Partition < a.plan.subPartitions[id.SubTopology] {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// taskStoresOnDisk counts the persistent stores of the tasks with a
// directory: what a damaged shared database held, as far as can be told.
func (a *App) taskStoresOnDisk() int64 {
	ids, _ := a.taskDirs()
	var n int64
	for _, id := range ids {
		n += int64(len(a.persistentStores(id)))
	}
	return n
}

// importStores moves the per-store databases of the state directory into
// the shared one.
func (a *App) importStores() error {
	ids, err := a.taskDirs()
	if err != nil {
		return err
	}
	began := time.Now()
	moved := 0
	for _, id := range ids {
		for _, info := range a.persistentStores(id) {
			dir := a.storeDir(id, info.Name)
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			if err := a.importStore(id, info.Name, dir); err != nil {
				return err
			}
			moved++
		}
	}
	if moved > 0 {
		a.log.Info("moved stores of their own databases into the shared store database", "stores", moved, "took", time.Since(began).Round(time.Millisecond))
	}
	return nil
}

// importStore moves one per-store database into the shared one. One whose
// files are proven damaged is deleted, as its opening would delete it
// (openBadgerOrRebuild), for its changelog to rebuild it.
func (a *App) importStore(id task.ID, store, dir string) error {
	name := sharedName(id, store)
	imp := func() error { return a.shared.Import(name, dir, statestore.DefaultBadgerOptions()) }
	err := a.waitForSpace(dir, imp)
	if err == nil {
		return nil
	}
	if !errors.Is(err, statestore.ErrCorrupt) {
		return fmt.Errorf("runtime: move store %s of task %s into the shared store database: %w", store, id, err)
	}
	if err := a.admitDamaged(dir, err); err != nil {
		return err
	}
	a.log.Warn("store files are damaged; deleting the store to rebuild it", "task", id, "store", store, "dir", dir, "err", err)
	if derr := statestore.DestroyBadger(dir); derr != nil {
		return fmt.Errorf("runtime: delete damaged store %s: %w (moving it failed with: %v)", dir, derr, err)
	}
	a.storesWiped.Add(1)
	return nil
}

// dropStrayStores drops the shared database's stores that no task
// directory accounts for: those of a directory deleted by hand, or of
// stores the topology no longer has.
func (a *App) dropStrayStores() error {
	ids, err := a.taskDirs()
	if err != nil {
		return err
	}
	want := make(map[string]bool)
	for _, id := range ids {
		for _, info := range a.persistentStores(id) {
			want[sharedName(id, info.Name)] = true
		}
	}
	var stray []string
	for _, name := range a.shared.Stores() {
		if !want[name] {
			stray = append(stray, name)
		}
	}
	if len(stray) == 0 {
		return nil
	}
	a.log.Info("dropping stores of the shared store database that no task directory holds", "stores", len(stray), "first", stray[0])
	if err := a.shared.Drop(stray...); err != nil {
		return fmt.Errorf("runtime: drop stray stores of the shared store database: %w", err)
	}
	return nil
}

// openShared opens a task's store in the shared database. One whose
// records are proven damaged (statestore.ErrCorrupt from its opening; a
// damaged table fails the database's own opening, see openLayout) is
// dropped and opened empty for its changelog to rebuild it, unless too
// many were found at once (admitDamaged); the database's other stores
// are untouched.
func (a *App) openShared(id task.ID, store string) (statestore.Store, error) {
	if err := os.MkdirAll(task.Dir(a.appDir(), id), 0o755); err != nil {
		return nil, fmt.Errorf("runtime: create directory of task %s: %w", id, err)
	}
	name := sharedName(id, store)
	var s statestore.Store
	open := func() error {
		var err error
		s, err = a.shared.Open(name)
		return err
	}
	err := a.waitForSpace(a.sharedDir(), open)
	if err == nil || !errors.Is(err, statestore.ErrCorrupt) {
		return s, err
	}
	if err := a.admitDamaged(filepath.Join(a.sharedDir(), name), err); err != nil {
		return nil, err
	}
	a.log.Warn("store records are damaged; deleting the store to rebuild it", "task", id, "store", store, "db", a.sharedDir(), "err", err)
	if derr := a.shared.Drop(name); derr != nil {
		return nil, fmt.Errorf("runtime: drop damaged store %s: %w (opening it failed with: %v)", name, derr, err)
	}
	a.storesWiped.Add(1)
	err = a.waitForSpace(a.sharedDir(), open)
	return s, err
}

// hasStore reports whether a task's store is on disk.
func (a *App) hasStore(id task.ID, store string) bool {
	if a.shared != nil {
		return a.shared.Has(sharedName(id, store))
	}
	_, err := os.Stat(a.storeDir(id, store))
	return err == nil
}

// deleteStore deletes a task's store, which must be closed.
func (a *App) deleteStore(id task.ID, store string) error {
	if a.shared != nil {
		return a.shared.Drop(sharedName(id, store))
	}
	return statestore.DestroyBadger(a.storeDir(id, store))
}

// removeTaskState deletes a task's stores and directory; none of its
// stores may be open.
func (a *App) removeTaskState(id task.ID) error {
	if a.shared != nil {
		var names []string
		for _, info := range a.persistentStores(id) {
			names = append(names, sharedName(id, info.Name))
		}
		if err := a.shared.Drop(names...); err != nil {
			return err
		}
	}
	err := os.RemoveAll(task.Dir(a.appDir(), id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
