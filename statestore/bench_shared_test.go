package statestore

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// benchLayout opens n stores in dir: each in a badger DB of its own, as
// the runtime does today, or all in one shared DB.
type benchLayout struct {
	name string
	open func(b *testing.B, dir string, n int) ([]Store, func() error)
}

func benchLayouts() []benchLayout {
	return []benchLayout{
		{"own", func(b *testing.B, dir string, n int) ([]Store, func() error) {
			o := DefaultBadgerOptions()
			o.Logger = discardLogger()
			ss := make([]Store, n)
			for i := range ss {
				s, err := OpenBadger(filepath.Join(dir, fmt.Sprintf("0_%d", i), "counts"), o)
				require.NoError(b, err)
				ss[i] = s
			}
			return ss, func() error {
				for _, s := range ss {
					if err := s.Close(); err != nil {
						return err
					}
				}
				return nil
			}
		}},
		{"shared", func(b *testing.B, dir string, n int) ([]Store, func() error) {
			d, err := OpenSharedBadger(dir, BadgerOptions{Logger: discardLogger()})
			require.NoError(b, err)
			ss := make([]Store, n)
			for i := range ss {
				s, err := d.Open(fmt.Sprintf("0_%d/counts", i))
				require.NoError(b, err)
				ss[i] = s
			}
			return ss, d.Close
		}},
	}
}

// benchStores is the number of stores the many-store benchmarks open:
// EDDY_STATESTORE_STORES, or 2,048 (one count store per task of an
// instance holding 2,048 tasks).
func benchStores(b *testing.B) int {
	if v := os.Getenv("EDDY_STATESTORE_STORES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		return n
	}
	return 2048
}

func openFDs(b *testing.B) int {
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(b, err)
	return len(fds)
}

func cpuTime(b testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkManyStoresIdle opens benchStores stores in each layout, writes
// one count to each (a task's first commit) and reports what they cost:
// the time to open them, the file descriptors, goroutines and RSS they
// add, the CPU the process spends while they sit idle for 5 s, the time
// to close them, and to open them again (a restart). Run one layout at a
// time (-run '^$' -bench 'ManyStoresIdle/layout=own' -benchtime 1x) so
// that the RSS of one does not count in the other's.
func BenchmarkManyStoresIdle(b *testing.B) {
	n := benchStores(b)
	for _, l := range benchLayouts() {
		b.Run("layout="+l.name, func(b *testing.B) {
			for range b.N {
				dir := b.TempDir()
				runtime.GC()
				fds, goroutines, rss := openFDs(b), runtime.NumGoroutine(), procStatus(b, "VmRSS")
				start := time.Now()
				ss, closeAll := l.open(b, dir, n)
				opened := time.Since(start)
				for i, s := range ss {
					require.NoError(b, s.Write([]Entry{{Key: fmt.Appendf(nil, "%010d", i), Value: []byte{0, 0, 0, 0, 0, 0, 0, 1}}}, 1))
				}
				fdsOpen, goroutinesOpen := openFDs(b)-fds, runtime.NumGoroutine()-goroutines

				const idle = 5 * time.Second
				cpu := cpuTime(b)
				time.Sleep(idle)
				idleCPU := cpuTime(b) - cpu
				rssOpen := procStatus(b, "VmRSS") - rss

				start = time.Now()
				require.NoError(b, closeAll())
				closed := time.Since(start)
				start = time.Now()
				ss, closeAll = l.open(b, dir, n)
				reopened := time.Since(start)
				pos, err := ss[n-1].Position()
				require.NoError(b, err)
				require.Equal(b, int64(1), pos)
				require.NoError(b, closeAll())

				b.ReportMetric(opened.Seconds(), "open-s")
				b.ReportMetric(reopened.Seconds(), "reopen-s")
				b.ReportMetric(closed.Seconds(), "close-s")
				b.ReportMetric(float64(fdsOpen), "fds")
				b.ReportMetric(float64(goroutinesOpen), "goroutines")
				b.ReportMetric(100*idleCPU.Seconds()/idle.Seconds(), "idle-cpu-%")
				b.ReportMetric(float64(rssOpen)/1024, "rss-MiB")
				b.ReportMetric(float64(procStatus(b, "VmHWM"))/1024, "peak-rss-MiB")
			}
		})
	}
}

// BenchmarkManyStoresWrite has two writers, each with half of the stores,
// write rounds of batch new keys to each of its stores with a position,
// as two stream threads committing their tasks do: each store's Write in
// turn, or, in the shared DB, all of a writer's stores (as tasks of one
// store each) in one Commit. One
// op is one record. Keep b.N fixed (-benchtime 1000000x): each run opens
// the stores anew.
func BenchmarkManyStoresWrite(b *testing.B) {
	for _, c := range []struct{ stores, batch int }{{64, 1000}, {benchStores(b), 10}} {
		for _, l := range append(benchLayouts(), benchLayout{name: "shared-commit"}) {
			b.Run(fmt.Sprintf("stores=%d/batch=%d/layout=%s", c.stores, c.batch, l.name), func(b *testing.B) {
				commit, open := l.open == nil, l.open
				if commit {
					open = benchLayouts()[1].open
				}
				ss, closeAll := open(b, b.TempDir(), c.stores)
				defer func() { require.NoError(b, closeAll()) }()
				var home *SharedBadger
				if commit {
					home = ss[0].(*badgerStore).home
				}
				b.ResetTimer()
				cpu := cpuTime(b)
				errs := make(chan error, 2)
				var (
					wg      sync.WaitGroup
					written atomic.Int64
				)
				for w := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						n, err := benchWriter(ss[w*len(ss)/2:(w+1)*len(ss)/2], home, c.batch, b.N/2)
						written.Add(int64(n))
						errs <- err
					}()
				}
				wg.Wait()
				b.StopTimer()
				cpu = cpuTime(b) - cpu
				close(errs)
				for err := range errs {
					require.NoError(b, err)
				}
				// Writers write whole rounds, b.N records or more.
				b.ReportMetric(float64(written.Load())/b.Elapsed().Seconds(), "records/s")
				// The process's CPU, badger's flushes and compactions
				// included: less sensitive than the rate to a loaded
				// machine.
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(written.Load()), "cpu-ns/record")
			})
		}
	}
}

// benchWriter writes at least records new keys to ss in rounds of batch
// keys per store, through home's Commit if home is set, and returns how
// many it wrote.
func benchWriter(ss []Store, home *SharedBadger, batch, records int) (int, error) {
	buf := make([]byte, len(ss)*batch*18)
	writes := make([]StoreWrite, len(ss))
	groups := make([][]StoreWrite, len(ss))
	for i := range writes {
		writes[i] = StoreWrite{Store: ss[i], Entries: make([]Entry, batch)}
		// A task of one store.
		groups[i] = writes[i : i+1]
	}
	done := 0
	for pos := int64(1); done < records; pos++ {
		for i := range writes {
			for j := range batch {
				rec := buf[(i*batch+j)*18:][:18]
				benchRecord(done+i*batch+j, rec[:10], rec[10:])
				writes[i].Entries[j] = Entry{Key: rec[:10], Value: rec[10:]}
			}
			writes[i].Position = pos
			if home == nil {
				if err := ss[i].Write(writes[i].Entries, pos); err != nil {
					return done, err
				}
			}
		}
		if home != nil {
			if err := home.Commit(groups...); err != nil {
				return done, err
			}
		}
		done += len(ss) * batch
	}
	return done, nil
}

// BenchmarkSharedDrop measures Drop of one store of 500 keys from a
// shared DB holding benchStores stores of 500 keys each, while a writer
// keeps writing another store: one op is one drop until its keys are
// deleted, drop-ms the Drop call alone, and max-stall-ms the longest
// that writer's Write took meanwhile.
func BenchmarkSharedDrop(b *testing.B) {
	d, err := OpenSharedBadger(b.TempDir(), BadgerOptions{Logger: discardLogger()})
	require.NoError(b, err)
	defer d.Close()
	const keys = 500
	n := benchStores(b)
	for i := range n {
		s, err := d.Open(fmt.Sprintf("0_%d/counts", i))
		require.NoError(b, err)
		require.NoError(b, s.Write(words(keys, "v"), 1))
		require.NoError(b, s.Close())
	}
	w, err := d.Open("writer")
	require.NoError(b, err)
	stop, done := make(chan struct{}), make(chan error)
	var maxStall atomic.Int64
	go func() {
		for pos := int64(0); ; pos++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			start := time.Now()
			if err := w.Write([]Entry{{Key: fmt.Appendf(nil, "k%d", pos), Value: []byte("v")}}, pos); err != nil {
				done <- err
				return
			}
			took := int64(time.Since(start))
			for old := maxStall.Load(); took > old && !maxStall.CompareAndSwap(old, took); old = maxStall.Load() {
			}
		}
	}()
	var dropping time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		name := fmt.Sprintf("victim-%d", i)
		s, err := d.Open(name)
		require.NoError(b, err)
		require.NoError(b, s.Write(words(keys, "v"), 1))
		require.NoError(b, s.Close())
		b.StartTimer()
		start := time.Now()
		require.NoError(b, d.Drop(name))
		dropping += time.Since(start)
		for swept := false; !swept; {
			d.mu.Lock()
			swept = len(d.dropping) == 0
			d.mu.Unlock()
			runtime.Gosched()
		}
	}
	b.StopTimer()
	close(stop)
	require.NoError(b, <-done)
	b.ReportMetric(float64(dropping.Microseconds())/1e3/float64(b.N), "drop-ms")
	b.ReportMetric(float64(maxStall.Load())/1e6, "max-stall-ms")
}

// BenchmarkSharedCountNewKeys is the shared DB's share of counting
// distinct keys (eddybench mode m): two writers, as two stream threads,
// each commit six tasks of one store, every commit 3,000 keys per store
// that the store never held, increasing within a store as a partition's
// keys do there. One op is one record; cpu-ns/record is the process's CPU,
// flushes and compactions included, and tables the tables badger made
// (flushes and compactions). Keep b.N fixed (-benchtime 1000000x, or
// 4000000x for eddybench (c)'s keys): each run starts from an empty DB.
func BenchmarkSharedCountNewKeys(b *testing.B) {
	const (
		writers = 2
		tasks   = 6 // per writer
		batch   = 3000
	)
	d, err := OpenSharedBadger(b.TempDir(), BadgerOptions{Logger: discardLogger()})
	require.NoError(b, err)
	ss := make([]Store, writers*tasks)
	for i := range ss {
		ss[i], err = d.Open(fmt.Sprintf("0_%d/counts", i))
		require.NoError(b, err)
	}
	value := []byte{0, 0, 0, 0, 0, 0, 0, 1}
	runtime.GC()
	b.ResetTimer()
	cpu := cpuTime(b)
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			mine := ss[w*tasks : (w+1)*tasks]
			groups := make([][]StoreWrite, len(mine))
			for round, pos := 0, int64(1); round*len(mine)*batch < b.N/writers; pos++ {
				for i, s := range mine {
					es := make([]Entry, batch)
					for j := range es {
						// Store s holds every len(ss)-th key, as a
						// partition of a keyed topic does.
						k := (round*batch+j)*len(ss) + w*tasks + i
						es[j] = Entry{Key: fmt.Appendf(nil, "k%09d", k), Value: value}
					}
					groups[i] = []StoreWrite{{Store: s, Entries: es, Position: pos}}
				}
				if errs[w] = d.Commit(groups...); errs[w] != nil {
					return
				}
				round++
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu = cpuTime(b) - cpu
	for _, err := range errs {
		require.NoError(b, err)
	}
	var made uint64
	for _, t := range d.db.Tables() {
		made = max(made, t.ID)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
	b.ReportMetric(float64(made), "tables")
	b.ReportMetric(float64(procStatus(b, "VmHWM"))/1024, "peak-rss-MiB")
	require.NoError(b, d.Close())
}
