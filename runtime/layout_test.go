package runtime

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// openStoreOnDisk opens a task's store as a closed instance left it in
// appDir, in whichever layout it is; the test closes it.
func openStoreOnDisk(t *testing.T, appDir string, id task.ID, store string) statestore.Store {
	t.Helper()
	shared := filepath.Join(appDir, sharedDirName)
	if _, err := os.Stat(shared); err != nil {
		s, err := statestore.OpenBadger(filepath.Join(task.Dir(appDir, id), store), statestore.DefaultBadgerOptions())
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	db, err := statestore.OpenSharedBadger(shared, statestore.BadgerOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.True(t, db.Has(sharedName(id, store)), "the shared database holds %s", sharedName(id, store))
	s, err := db.Open(sharedName(id, store))
	require.NoError(t, err)
	return s
}

// restoredByTask returns the changelog records each task of app restored.
func restoredByTask(app *App) map[task.ID]int64 {
	out := make(map[task.ID]int64)
	for _, ti := range app.Tasks() {
		out[ti.ID] = ti.Restored
	}
	return out
}

// startCounting starts the count topology as application id over c,
// with its state in dir and cfg's other settings, and returns it running.
func startCounting(t *testing.T, c *eosCluster, id, dir string, cfg Config) *App {
	t.Helper()
	cfg.ApplicationID, cfg.Brokers, cfg.StateDir, cfg.SessionTimeout = id, c.b.Addrs(), dir, 2*time.Second
	app, err := New(countTopology(t), cfg)
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	return app
}

// waitRunning waits for app to run both tasks of the count topology.
func waitRunning(t *testing.T, app *App) {
	t.Helper()
	waitFor(t, 30*time.Second, "both tasks running", func() bool {
		n := 0
		for _, ti := range app.Tasks() {
			if ti.State == task.Running {
				n++
			}
		}
		return n == 2
	})
}

// State kept in databases of their own (StoreLayoutPerStore) is moved into
// the shared database by the next start in the shared layout: nothing is
// restored, the counts carry on exactly, and no per-store database is
// left. Restarting in the shared layout again restores nothing either.
func TestPerStoreStateMovesIntoSharedLayout(t *testing.T) {
	t.Parallel()
	c := newEOSCluster(t)
	dir := t.TempDir()
	appDir := filepath.Join(dir, "upgrade")
	start := func(layout StoreLayout) *App {
		return startCounting(t, c, "upgrade", dir, Config{StoreLayout: layout})
	}
	app := start(StoreLayoutPerStore)
	want := map[string]int64{}
	c.produce(t, 500, want)
	waitCounts(t, app, want)
	require.NoError(t, app.Close(context.Background()))
	for p := range int32(2) {
		require.DirExists(t, filepath.Join(task.Dir(appDir, task.ID{Partition: p}), "counts"))
	}
	require.NoDirExists(t, filepath.Join(appDir, sharedDirName))

	for run := range 2 {
		app = start(StoreLayoutShared)
		waitRunning(t, app)
		require.Zero(t, app.Stats().RestoredRecords, "run %d: the stores' state came along; nothing was restored", run)
		c.produce(t, 100, want)
		waitCounts(t, app, want)
		require.Zero(t, app.Stats().StoresWiped)
		require.NoError(t, app.Close(context.Background()))
		for p := range int32(2) {
			require.NoDirExists(t, filepath.Join(task.Dir(appDir, task.ID{Partition: p}), "counts"), "run %d", run)
		}
		require.DirExists(t, filepath.Join(appDir, sharedDirName))
	}
}

// An instance configured per store that finds a shared database deletes
// it and rebuilds its stores from their changelogs: the counts carry on
// exactly.
func TestSharedStateRebuiltInPerStoreLayout(t *testing.T) {
	t.Parallel()
	c := newEOSCluster(t)
	dir := t.TempDir()
	start := func(layout StoreLayout) *App {
		return startCounting(t, c, "downgrade", dir, Config{StoreLayout: layout})
	}
	app := start(StoreLayoutShared)
	want := map[string]int64{}
	c.produce(t, 300, want)
	waitCounts(t, app, want)
	require.NoError(t, app.Close(context.Background()))

	app = start(StoreLayoutPerStore)
	defer app.Close(context.Background())
	require.NoDirExists(t, filepath.Join(dir, "downgrade", sharedDirName))
	c.produce(t, 100, want)
	waitCounts(t, app, want)
	require.Positive(t, app.Stats().RestoredRecords, "the stores were rebuilt from their changelogs")
}

// A store of the shared database whose own records are damaged (here, its
// position) is deleted alone and rebuilt from its changelog: the other
// stores of the database keep their state and restore nothing.
func TestSharedStoreDamagedRecordRebuildsThatStoreAlone(t *testing.T) {
	t.Parallel()
	c := newEOSCluster(t)
	dir := t.TempDir()
	start := func() *App { return startCounting(t, c, "record", dir, Config{StoreLayout: StoreLayoutShared}) }
	app := start()
	want := map[string]int64{}
	c.produce(t, 500, want)
	waitCounts(t, app, want)
	require.NoError(t, app.Close(context.Background()))

	damaged, kept := task.ID{Partition: 0}, task.ID{Partition: 1}
	damagePosition(t, filepath.Join(dir, "record", sharedDirName), sharedName(damaged, "counts"))

	app = start()
	defer app.Close(context.Background())
	c.produce(t, 100, want)
	waitCounts(t, app, want)
	require.EqualValues(t, 1, app.Stats().StoresWiped)
	restored := restoredByTask(app)
	require.Positive(t, restored[damaged], "the damaged store was rebuilt")
	require.Zero(t, restored[kept], "the other store kept its state")
}

// damagePosition overwrites the position record of the store called name
// in the shared database in dir with bytes no position has, writing with
// badger directly, by the key layout of statestore/badgershared.go: the
// catalog maps 0x00 'c' name to the store's id; the store's keys start
// with 0x01 and the id, its position key is 0xff "pos" after that.
func damagePosition(t *testing.T, dir, name string) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.NoError(t, db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(append([]byte{0x00, 'c'}, name...))
		if err != nil {
			return err
		}
		id, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		require.Len(t, id, 4)
		key := binary.BigEndian.AppendUint32([]byte{0x01}, binary.BigEndian.Uint32(id))
		return txn.Set(append(key, 0xff, 'p', 'o', 's'), []byte("bad"))
	}))
}

// A shared database deleted while its instance was down (an operator's
// rm, a lost volume) leaves the task directories beside it: the next start
// rebuilds every store from its changelog, under either guarantee, and the
// counts carry on exactly.
func TestSharedDatabaseDeletedIsRebuilt(t *testing.T) {
	t.Parallel()
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			c := newEOSCluster(t)
			dir := t.TempDir()
			start := func() *App { return startCounting(t, c, "rmshared", dir, Config{ProcessingGuarantee: g}) }
			app := start()
			want := map[string]int64{}
			c.produce(t, 300, want)
			waitCounts(t, app, want)
			if g == ExactlyOnce {
				// As a crash leaves it: no final commit, no leave.
				app.Kill()
			} else {
				require.NoError(t, app.Close(context.Background()))
			}
			require.NoError(t, os.RemoveAll(filepath.Join(dir, "rmshared", sharedDirName)))

			app = start()
			defer app.Close(context.Background())
			c.produce(t, 100, want)
			waitCounts(t, app, want)
			require.Positive(t, app.Stats().RestoredRecords, "the stores were rebuilt from their changelogs")
		})
	}
}
