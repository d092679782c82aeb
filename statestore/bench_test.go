package statestore

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// benchRecord fills a 10-byte key and an 8-byte value for record i.
func benchRecord(i int, key, val []byte) {
	copy(key, fmt.Appendf(key[:0], "%010d", i))
	binary.BigEndian.PutUint64(val, uint64(i))
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkBadgerWriteBatch is the baseline: b.N records through one plain
// badger WriteBatch on a DB tuned like the store's. One op is one record.
func BenchmarkBadgerWriteBatch(b *testing.B) {
	o := DefaultBadgerOptions()
	o.Logger = discardLogger()
	db, err := badger.Open(o.withDefaults().badger(b.TempDir()))
	require.NoError(b, err)
	defer db.Close()
	key, val := make([]byte, 10), make([]byte, 8)
	b.ReportAllocs()
	b.ResetTimer()
	wb := db.NewWriteBatch()
	for i := 0; i < b.N; i++ {
		benchRecord(i, key, val)
		// WriteBatch keeps the slices until its transaction commits.
		if err := wb.Set(append([]byte{}, key...), append([]byte{}, val...)); err != nil {
			b.Fatal(err)
		}
	}
	require.NoError(b, wb.Flush())
	b.StopTimer()
	reportRate(b)
}

// BenchmarkBadgerStoreWrite writes the same records through Store.Write in
// batches, the restoration path. One op is one record. batch=2000 commits
// one transaction per batch; batch=20000 exceeds a transaction and takes
// the WriteBatch path.
func BenchmarkBadgerStoreWrite(b *testing.B) {
	for _, size := range []int{2000, 20000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			o := DefaultBadgerOptions()
			o.Logger = discardLogger()
			s, err := OpenBadger(b.TempDir(), o)
			require.NoError(b, err)
			defer s.Close()
			benchStoreWrite(b, s, size)
		})
	}
}

// BenchmarkMemoryStoreWrite is the same workload on the in-memory store.
func BenchmarkMemoryStoreWrite(b *testing.B) {
	s := NewMemory()
	defer s.Close()
	benchStoreWrite(b, s, 2000)
}

func benchStoreWrite(b *testing.B, s Store, size int) {
	buf := make([]byte, size*18)
	batch := make([]Entry, 0, size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec := buf[len(batch)*18 : len(batch)*18+18]
		benchRecord(i, rec[:10], rec[10:])
		batch = append(batch, Entry{Key: rec[:10], Value: rec[10:]})
		if len(batch) == size || i == b.N-1 {
			if err := s.Write(batch, int64(i+1)); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	b.StopTimer()
	reportRate(b)
}

// TestBadgerMemoryFootprint opens 12 badger stores, writes 1,000,000 keys
// in total through Store.Write (restoration-sized batches) and reports the
// process RSS. Opt in with EDDY_STATESTORE_RSS=1; it writes ~100 MB and
// takes a few seconds. EDDY_STATESTORE_RSS_STORES and
// EDDY_STATESTORE_RSS_KEYS change the number of stores and keys, to
// compare one shared database against one per task for the same keys.
func TestBadgerMemoryFootprint(t *testing.T) {
	if os.Getenv("EDDY_STATESTORE_RSS") == "" {
		t.Skip("set EDDY_STATESTORE_RSS=1 to run")
	}
	envInt := func(name string, def int) int {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		require.NoError(t, err, name)
		return n
	}
	stores := envInt("EDDY_STATESTORE_RSS_STORES", 12)
	total := envInt("EDDY_STATESTORE_RSS_KEYS", 1_000_000)
	batch := envInt("EDDY_STATESTORE_RSS_BATCH", 2000)
	dir := t.TempDir()
	rssBefore := procStatus(t, "VmRSS")
	o := DefaultBadgerOptions()
	o.Logger = discardLogger()
	// Experiments: EDDY_STATESTORE_RSS_OPTS="memtable=3072,table=1024,level=4096,l0=3"
	// (sizes in KiB) overrides the corresponding default options.
	if v := os.Getenv("EDDY_STATESTORE_RSS_OPTS"); v != "" {
		for _, kv := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(kv, "=")
			n, err := strconv.Atoi(val)
			require.NoError(t, err, kv)
			switch k {
			case "memtable":
				o.MemTableSize = int64(n) << 10
			case "table":
				o.BaseTableSize = int64(n) << 10
			case "level":
				o.BaseLevelSize = int64(n) << 10
			case "l0":
				o.NumLevelZeroTables = n
			case "memtables":
				o.NumMemtables = n
			default:
				t.Fatalf("EDDY_STATESTORE_RSS_OPTS: unknown option %q", k)
			}
		}
	}
	ss := make([]Store, stores)
	for i := range ss {
		s, err := OpenBadger(filepath.Join(dir, fmt.Sprintf("0_%d", i)), o)
		require.NoError(t, err)
		ss[i] = s
	}
	rssOpen := procStatus(t, "VmRSS")

	start := time.Now()
	per := total / stores
	buf := make([]byte, batch*18)
	entries := make([]Entry, 0, batch)
	written := 0
	// Round-robin, one batch per store at a time, as concurrent restores
	// of several tasks would interleave.
	for off := 0; off < per; off += batch {
		for si, s := range ss {
			entries = entries[:0]
			for j := off; j < min(off+batch, per); j++ {
				rec := buf[len(entries)*18 : len(entries)*18+18]
				benchRecord(si*per+j, rec[:10], rec[10:])
				entries = append(entries, Entry{Key: rec[:10], Value: rec[10:]})
			}
			require.NoError(t, s.Write(entries, int64(off+len(entries))))
			written += len(entries)
		}
	}
	elapsed := time.Since(start)
	rssWritten := procStatus(t, "VmRSS")

	var counted int64
	countStart := time.Now()
	for _, s := range ss {
		n, err := s.ApproximateCount()
		require.NoError(t, err)
		counted += n
	}
	require.Equal(t, int64(written), counted)
	countTook := time.Since(countStart)
	rssRead := procStatus(t, "VmRSS")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	hwm := procStatus(t, "VmHWM")
	runtime.GC()
	var live runtime.MemStats
	runtime.ReadMemStats(&live)
	debug.FreeOSMemory()
	rssFreed := procStatus(t, "VmRSS")
	for _, s := range ss {
		require.NoError(t, s.Close())
	}
	t.Logf("%d stores, %d keys in %v (%.0f records/s)", stores, written, elapsed.Round(time.Millisecond), float64(written)/elapsed.Seconds())
	t.Logf("ApproximateCount over all stores: %v (%.0f ns/key)", countTook.Round(time.Millisecond), float64(countTook.Nanoseconds())/float64(counted))
	t.Logf("VmRSS: start %d MiB, 12 open %d MiB, after writes %d MiB, after counting (full key scans) %d MiB; VmHWM %d MiB",
		rssBefore>>10, rssOpen>>10, rssWritten>>10, rssRead>>10, hwm>>10)
	t.Logf("Go heap: HeapInuse %d MiB, Sys %d MiB; live after GC %d MiB; VmRSS after returning free memory to the OS %d MiB",
		ms.HeapInuse>>20, ms.Sys>>20, live.HeapAlloc>>20, rssFreed>>10)
	if total <= 1_000_000 {
		require.Less(t, hwm, int64(512<<10), "peak RSS must stay under 512 MiB")
	}
}

// procStatus returns a kB field of /proc/self/status.
func procStatus(t testing.TB, field string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			var kb int64
			_, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb)
			require.NoError(t, err)
			return kb
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// BenchmarkBadgerCountNewKeys is the store's share of counting distinct
// keys (eddybench mode m): every record reads a key that does not exist
// yet, and every batch of them is written with a position, as a commit
// does. One op is one record.
func BenchmarkBadgerCountNewKeys(b *testing.B) {
	for _, size := range []int{2000, 20000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			o := DefaultBadgerOptions()
			o.Logger = discardLogger()
			s, err := OpenBadger(b.TempDir(), o)
			require.NoError(b, err)
			defer s.Close()
			buf := make([]byte, size*18)
			batch := make([]Entry, 0, size)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rec := buf[len(batch)*18 : len(batch)*18+18]
				benchRecord(i, rec[:10], rec[10:])
				if _, found, err := s.Get(rec[:10]); err != nil || found {
					b.Fatalf("get %q: found %v, %v", rec[:10], found, err)
				}
				batch = append(batch, Entry{Key: rec[:10], Value: rec[10:]})
				if len(batch) == size || i == b.N-1 {
					if err := s.Write(batch, int64(i+1)); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			b.StopTimer()
			reportRate(b)
		})
	}
}

// BenchmarkVersionedGet reads a badger versioned store of 10,000 keys with
// 20 versions each within retention: the latest value of a random key, and
// its value as of a random time within the kept history. One op is one
// read; p99-ns is the 99th percentile of the reads' latencies.
func BenchmarkVersionedGet(b *testing.B) {
	o := DefaultBadgerOptions()
	o.Logger = discardLogger()
	st, err := OpenBadger(b.TempDir(), o)
	require.NoError(b, err)
	defer st.Close()
	const keys, versions = 10000, 20
	s, err := NewVersionedStore(st, VersionedOptions{HistoryRetention: versions * 100})
	require.NoError(b, err)
	val := make([]byte, 8)
	for v := range versions {
		for k := range keys {
			binary.BigEndian.PutUint64(val, uint64(v))
			_, _, err := s.Put(fmt.Appendf(nil, "%010d", k), val, int64(v*100+k%100))
			require.NoError(b, err)
		}
	}
	for _, mode := range []string{"latest", "asof"} {
		b.Run(mode, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				key := fmt.Appendf(nil, "%010d", r.IntN(keys))
				start := time.Now()
				var found bool
				if mode == "latest" {
					_, found, err = s.Get(key)
				} else {
					_, found, err = s.GetAsOf(key, 100+r.Int64N(versions*100-100))
				}
				lat = append(lat, time.Since(start))
				if err != nil || !found {
					b.Fatal(err, found)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// BenchmarkVersionedRestore restores a versioned store's changelog
// (b.N versions of 10,000 keys, as logged by in-order puts) into badger:
// the records are put again through VersionedChangelog in
// restoration-sized batches, to compare with BenchmarkBadgerWriteBatch.
// As a changelog reader's, each batch's records point into the bytes
// they were read from, here one array holding the whole log. One op is
// one changelog record.
func BenchmarkVersionedRestore(b *testing.B) {
	log := &versionLog{ReadWriter: NewMemory()}
	s, err := NewVersionedStore(log, VersionedOptions{HistoryRetention: 1 << 40})
	require.NoError(b, err)
	val := make([]byte, 8)
	for i := 0; len(log.records) < b.N; i++ {
		binary.BigEndian.PutUint64(val, uint64(i))
		_, _, err := s.Put(fmt.Appendf(nil, "%010d", i%10000), val, int64(i))
		require.NoError(b, err)
	}
	fetched := encodeRecords(log.records[:b.N])
	o := DefaultBadgerOptions()
	o.Logger = discardLogger()
	st, err := OpenBadger(b.TempDir(), o)
	require.NoError(b, err)
	defer st.Close()
	vs := NewVersionedChangelog(st, VersionedOptions{HistoryRetention: 1 << 40})
	// The store the records were made with is no part of a restoration:
	// let it go before the clock starts, rather than have the collector
	// walk it while the restoration runs.
	log, s = nil, nil
	runtime.GC()
	batch := make([]Entry, 0, 2000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(batch) {
		batch, fetched = decodeRecords(batch[:0], fetched, min(2000, b.N-i))
		if err := vs.Write(batch, int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRate(b)
}

// encodeRecords lays timed records out in one array: per record, the
// key's and the value's lengths (a value of length -1 is a tombstone),
// the time, the key and the value.
func encodeRecords(records []Entry) []byte {
	var out []byte
	for _, e := range records {
		vlen := int64(len(e.Value))
		if e.Value == nil {
			vlen = -1
		}
		out = binary.AppendVarint(out, int64(len(e.Key)))
		out = binary.AppendVarint(out, vlen)
		out = binary.AppendVarint(out, e.Time)
		out = append(append(out, e.Key...), e.Value...)
	}
	return out
}

// decodeRecords appends the next n records of buf to into, pointing
// into buf, and returns buf's rest.
func decodeRecords(into []Entry, buf []byte, n int) ([]Entry, []byte) {
	for range n {
		klen, w := binary.Varint(buf)
		buf = buf[w:]
		vlen, w := binary.Varint(buf)
		buf = buf[w:]
		ts, w := binary.Varint(buf)
		buf = buf[w:]
		e := Entry{Key: buf[:klen:klen], Time: ts, Origin: TimedRecord}
		buf = buf[klen:]
		if vlen >= 0 {
			e.Value = buf[:vlen:vlen]
			buf = buf[vlen:]
		}
		into = append(into, e)
	}
	return into, buf
}
