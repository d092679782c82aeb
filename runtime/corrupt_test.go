package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// A store whose files are garbled on disk does not stop the instance: the
// damaged database alone is deleted, its stores rebuilt from their
// changelogs and counted; the counts come out exact. Per store, that is
// the one store; in the shared layout, every store of the instance (the
// database cannot tell which stores a damaged table held).
func TestUnreadableStoreIsWipedAndRestored(t *testing.T) {
	t.Parallel()
	for _, layout := range []StoreLayout{StoreLayoutShared, StoreLayoutPerStore} {
		t.Run(layout.String(), func(t *testing.T) { testUnreadableStore(t, layout) })
	}
}

func testUnreadableStore(t *testing.T, layout StoreLayout) {
	for _, damage := range []struct {
		name string
		// wiped: whether the database must be deleted, or badger's own
		// crash recovery suffices (a log cut short is what kill -9
		// leaves; the data and its position go back together and the
		// tail is restored).
		wiped bool
		do    func(t *testing.T, dir string)
	}{
		{"garbled manifest", true, func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte("this is not a badger manifest at all"), 0o644))
		}},
		// Badger would open the store with a new manifest, its tables
		// deleted as unlisted.
		{"deleted manifest", true, func(t *testing.T, dir string) {
			tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
			require.NoError(t, err)
			require.NotEmpty(t, tables, "the store has table files to lose")
			require.NoError(t, os.Remove(filepath.Join(dir, "MANIFEST")))
		}},
		{"truncated value log and memtable log", false, func(t *testing.T, dir string) {
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			n := 0
			for _, e := range entries {
				// Table files (.sst) are damaged in the cases below.
				if strings.HasSuffix(e.Name(), ".vlog") || strings.HasSuffix(e.Name(), ".mem") {
					info, err := e.Info()
					require.NoError(t, err)
					require.NoError(t, os.Truncate(filepath.Join(dir, e.Name()), info.Size()/3))
					n++
				}
			}
			require.Positive(t, n, "the store has files to damage")
		}},
		// Badger would panic on a goroutine of its own opening a truncated
		// table, and at the first read of a garbled block; the store checks
		// its tables before badger opens them.
		{"truncated table file", true, func(t *testing.T, dir string) {
			damageTables(t, dir, func(path string, size int64) {
				require.NoError(t, os.Truncate(path, size/2))
			})
		}},
		{"garbled table file", true, func(t *testing.T, dir string) {
			damageTables(t, dir, func(path string, size int64) {
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				require.NoError(t, err)
				defer f.Close()
				_, err = f.WriteAt([]byte("not what badger wrote here, not at all"), size/3)
				require.NoError(t, err)
			})
		}},
	} {
		t.Run(damage.name, func(t *testing.T) {
			c := newEOSCluster(t)
			dir := t.TempDir()
			start := func() *App {
				app, err := New(countTopology(t), Config{ApplicationID: "corrupt", Brokers: c.b.Addrs(), StateDir: dir, SessionTimeout: 2 * time.Second, StoreLayout: layout})
				require.NoError(t, err)
				require.NoError(t, app.Start(context.Background()))
				return app
			}
			app := start()
			want := map[string]int64{}
			c.produce(t, 500, want)
			waitCounts(t, app, want)
			require.NoError(t, app.Close(context.Background()))

			dbDir := filepath.Join(task.Dir(filepath.Join(dir, "corrupt"), task.ID{SubTopology: 0, Partition: 0}), "counts")
			var wiped int64 = 1
			if layout == StoreLayoutShared {
				dbDir = filepath.Join(dir, "corrupt", sharedDirName)
				wiped = 2 // one store per partition
			}
			damage.do(t, dbDir)
			if !damage.wiped {
				wiped = 0
			}

			app = start()
			defer app.Close(context.Background())
			c.produce(t, 100, want)
			waitCounts(t, app, want)
			require.Equal(t, wiped, app.Stats().StoresWiped, "stores wiped")
			require.True(t, app.State().IsRunningOrRebalancing())
		})
	}
}

// damageTables applies damage to every table file (.sst) of the store in dir.
func damageTables(t *testing.T, dir string, damage func(path string, size int64)) {
	t.Helper()
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, tables, "the store has table files to damage")
	for _, path := range tables {
		info, err := os.Stat(path)
		require.NoError(t, err)
		damage(path, info.Size())
	}
}

// More than maxDamagedStores stores found damaged at once stop the
// instance: it deletes the first few, as it would a store damaged alone,
// and keeps the files of the others. The stores are each in a database of
// their own (StoreLayoutPerStore), whose files the test damages one by one;
// in the shared layout they are one database, damaged or not as a whole.
func TestManyDamagedStoresStopTheInstance(t *testing.T) {
	t.Parallel()
	const partitions = 6
	b, err := broker.Start(broker.Config{Partitions: 2})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	_, err = adm.CreateTopics(context.Background(), partitions, -1, nil, "in")
	require.NoError(t, err)
	c := &eosCluster{b: b, adm: adm, cl: cl}

	dir := t.TempDir()
	start := func() *App {
		app, err := New(countTopology(t), Config{ApplicationID: "damaged", Brokers: b.Addrs(), StateDir: dir, SessionTimeout: 2 * time.Second, StoreLayout: StoreLayoutPerStore})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	app := start()
	want := map[string]int64{}
	c.produce(t, 500, want)
	waitCounts(t, app, want)
	require.NoError(t, app.Close(context.Background()))

	garbage := []byte("this is not a badger manifest at all")
	manifests := make([]string, partitions)
	for p := range partitions {
		manifests[p] = filepath.Join(task.Dir(filepath.Join(dir, "damaged"), task.ID{SubTopology: 0, Partition: int32(p)}), "counts", "MANIFEST")
		require.NoError(t, os.WriteFile(manifests[p], garbage, 0o644))
	}

	keptStores := func() int {
		kept := 0
		for _, m := range manifests {
			if b, err := os.ReadFile(m); err == nil && bytes.Equal(b, garbage) {
				kept++
			}
		}
		return kept
	}
	// The instance opens the stores it finds on disk as it starts: Start
	// fails, or the instance stops soon after. Restarted (as a supervisor
	// would), it stops again without deleting more.
	for run := range 2 {
		app, err := New(countTopology(t), Config{ApplicationID: "damaged", Brokers: b.Addrs(), StateDir: dir, SessionTimeout: 2 * time.Second, StoreLayout: StoreLayoutPerStore})
		require.NoError(t, err)
		if err := app.Start(context.Background()); err == nil {
			select {
			case <-app.Done():
			case <-time.After(60 * time.Second):
				t.Fatalf("run %d: the instance did not stop; %d stores deleted", run, app.Stats().StoresWiped)
			}
		}
		require.ErrorIs(t, app.Err(), ErrTooManyDamagedStores, "run %d", run)
		app.Close(context.Background()) // returns the error that stopped it
		if run == 0 {
			require.EqualValues(t, maxDamagedStores, app.Stats().StoresWiped)
		} else {
			require.Zero(t, app.Stats().StoresWiped, "the restart deleted no more")
		}
		require.Equal(t, partitions-maxDamagedStores, keptStores(), "run %d: stores left as they were", run)
	}
}

// A store that cannot be opened for want of file descriptors is never
// deleted, whatever step of the open runs out: the open fails with an error
// naming RLIMIT_NOFILE. Each open runs in a child process, under a lowered
// RLIMIT_NOFILE, because badger exits the process (log.Fatal) when it
// cannot list the store's directory while opening it.
func TestStoreOutOfFilesIsNeverDeleted(t *testing.T) {
	if dir := os.Getenv("EDDY_TEST_NOFILE_DIR"); dir != "" {
		openPersistentUnderFileLimit(t, dir, os.Getenv("EDDY_TEST_NOFILE_SPARE"))
		return
	}
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("counting open files needs /proc/self/fd")
	}
	stateDir := t.TempDir()
	id := task.ID{SubTopology: 0, Partition: 0}
	storeDir := filepath.Join(task.Dir(filepath.Join(stateDir, "nofile"), id), "counts")
	for round := range 4 {
		s, err := statestore.OpenBadger(storeDir, statestore.DefaultBadgerOptions())
		require.NoError(t, err)
		var es []statestore.Entry
		for i := range 2000 {
			es = append(es, statestore.Entry{Key: fmt.Appendf(nil, "k-%d-%05d", round, i), Value: []byte("v")})
		}
		require.NoError(t, s.Write(es, int64(round+1)))
		require.NoError(t, s.Close())
	}

	failed, fatal := 0, 0
	for spare := -2; ; spare++ {
		require.Less(t, spare, 100, "the open never fit")
		cmd := exec.Command(os.Args[0], "-test.run=^TestStoreOutOfFilesIsNeverDeleted$", "-test.count=1")
		cmd.Env = append(os.Environ(), "EDDY_TEST_NOFILE_DIR="+stateDir, "EDDY_TEST_NOFILE_SPARE="+strconv.Itoa(spare))
		out, _ := cmd.CombinedOutput()
		if _, result, ok := strings.Cut(string(out), "nofile-result: "); ok {
			result, _, _ = strings.Cut(result, "\n")
			if result == "opened wiped=0" {
				break
			}
			require.Contains(t, result, "failed wiped=0", "spare %d", spare)
			require.Contains(t, result, "ulimit -n", "spare %d", spare)
			failed++
		} else {
			// Badger's log.Fatal: it could not list the directory.
			require.Contains(t, string(out), "too many open files", "spare %d: %s", spare, out)
			fatal++
		}
		s, err := statestore.OpenBadger(storeDir, statestore.DefaultBadgerOptions())
		require.NoError(t, err, "spare %d", spare)
		_, ok, err := s.Get([]byte("k-0-01234"))
		require.NoError(t, err)
		require.True(t, ok, "spare %d: the store kept its keys", spare)
		require.NoError(t, s.Close())
	}
	t.Logf("%d opens failed, %d ended in badger's log.Fatal, none deleted the store", failed, fatal)
	require.Positive(t, failed)
}

// openPersistentUnderFileLimit opens task 0_0's store "counts" under
// root as an instance would, with RLIMIT_NOFILE set to the files open now
// plus spare, and prints how it went.
func openPersistentUnderFileLimit(t *testing.T, root, spare string) {
	n, err := strconv.Atoi(spare)
	if err != nil {
		panic(err)
	}
	// A database of the store's own, whose opening is what runs out of
	// descriptors here.
	app, err := New(countTopology(t), Config{ApplicationID: "nofile", Brokers: []string{"127.0.0.1:9"}, StateDir: root, StoreLayout: StoreLayoutPerStore})
	if err != nil {
		panic(err)
	}
	app.dir = &stateDir{path: filepath.Join(root, "nofile")}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		panic(err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		panic(err)
	}
	lim.Cur = uint64(len(fds) - 1 + n)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		panic(err)
	}
	s, err := app.openPersistent(task.ID{SubTopology: 0, Partition: 0}, "counts")
	if err != nil {
		fmt.Printf("nofile-result: failed wiped=%d %s\n", app.Stats().StoresWiped, strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	_ = s.Close()
	fmt.Printf("nofile-result: opened wiped=%d\n", app.Stats().StoresWiped)
}
