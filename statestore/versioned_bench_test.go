package statestore

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// BenchmarkVersionedRestoreRatio measures a versioned store's restoration
// against the bare badger batch (BenchmarkBadgerWriteBatch's workload),
// the two taking turns in one run so that both see the same machine. A
// round restores restoreRatioRecords changelog records of 10,000 keys
// (in-order versions, as BenchmarkVersionedRestore's) into a new badger
// store through VersionedChangelog, in batches of 2,000, and writes as
// many records through one WriteBatch into a new badger DB; the order of
// the two alternates from round to round. One op is one round. It reports
// the median of the rounds' ratios (versioned records/s over bare
// records/s) with their least and greatest, the ratio of the two sides'
// process CPU time (bare over versioned, badger's own goroutines
// included), and logs each side's rates and CPU time per record. Run
// several rounds: -benchtime 10x.
func BenchmarkVersionedRestoreRatio(b *testing.B) {
	fetched := encodeRecords(inOrderVersions(restoreRatioRecords, 10000))
	var bare, versioned, ratios []float64
	var bareCPU, versionedCPU time.Duration
	for round := range b.N {
		var bareRate, versionedRate float64
		for side := range 2 {
			if (side+round)%2 == 0 {
				rate, cpu := benchBareBatch(b, restoreRatioRecords)
				bareRate, bareCPU = rate, bareCPU+cpu
			} else {
				rate, cpu := benchVersionedReplay(b, fetched, restoreRatioRecords)
				versionedRate, versionedCPU = rate, versionedCPU+cpu
			}
		}
		bare = append(bare, bareRate)
		versioned = append(versioned, versionedRate)
		ratios = append(ratios, versionedRate/bareRate)
	}
	perRecord := func(d time.Duration) float64 {
		return float64(d.Nanoseconds()) / float64(b.N*restoreRatioRecords)
	}
	b.Logf("%d rounds of %d records; records/s median (min–max): bare %s, versioned %s; ratio %s; CPU ns/record: bare %.0f, versioned %.0f",
		b.N, restoreRatioRecords, spread(bare, "%.0f"), spread(versioned, "%.0f"), spread(ratios, "%.3f"),
		perRecord(bareCPU), perRecord(versionedCPU))
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(slices.Min(ratios), "ratio-min")
	b.ReportMetric(slices.Max(ratios), "ratio-max")
	// On a machine others share, the wall-clock ratio moves with their
	// load; the ratio of CPU time per record moves much less.
	b.ReportMetric(float64(bareCPU)/float64(versionedCPU), "cpu-ratio")
}

// restoreRatioRecords is how many records each side of a round writes.
const restoreRatioRecords = 200_000

// inOrderVersions returns the changelog records of n in-order puts, as
// a versioned store logs them: record i versions key i%keys at time i.
func inOrderVersions(n, keys int) []Entry {
	out := make([]Entry, n)
	val := make([]byte, 8)
	for i := range out {
		binary.BigEndian.PutUint64(val, uint64(i))
		out[i] = VersionRecord(fmt.Appendf(nil, "%010d", i%keys), val, int64(i))
	}
	return out
}

// benchBareBatch writes n records through one WriteBatch of a new badger
// DB, as BenchmarkBadgerWriteBatch does, and returns the records/s and
// the process CPU time it took.
func benchBareBatch(b *testing.B, n int) (float64, time.Duration) {
	o := DefaultBadgerOptions()
	o.Logger = discardLogger()
	db, err := badger.Open(o.withDefaults().badger(b.TempDir()))
	require.NoError(b, err)
	defer db.Close()
	key, val := make([]byte, 10), make([]byte, 8)
	start, cpu := time.Now(), cpuTime(b)
	wb := db.NewWriteBatch()
	for i := range n {
		benchRecord(i, key, val)
		// WriteBatch keeps the slices until its transaction commits.
		if err := wb.Set(append([]byte{}, key...), append([]byte{}, val...)); err != nil {
			b.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds(), cpuTime(b) - cpu
}

// benchVersionedReplay restores the n records encoded in fetched into a
// new badger store through VersionedChangelog, in batches of 2,000 read
// from fetched as a changelog reader's point into what it fetched, each
// written as the reader writes it (after Restoring), and returns the records/s and the process CPU time it took.
func benchVersionedReplay(b *testing.B, fetched []byte, n int) (float64, time.Duration) {
	o := DefaultBadgerOptions()
	o.Logger = discardLogger()
	st, err := OpenBadger(b.TempDir(), o)
	require.NoError(b, err)
	defer st.Close()
	vs := NewVersionedChangelog(st, VersionedOptions{HistoryRetention: 1 << 40})
	batch := make([]Entry, 0, 2000)
	start, cpu := time.Now(), cpuTime(b)
	for i := 0; i < n; i += len(batch) {
		batch, fetched = decodeRecords(batch[:0], fetched, min(2000, n-i))
		Restoring(vs)
		if err := vs.Write(batch, int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds(), cpuTime(b) - cpu
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread formats xs as "median (min–max)".
func spread(xs []float64, format string) string {
	return fmt.Sprintf(format+" ("+format+"–"+format+")", median(xs), slices.Min(xs), slices.Max(xs))
}
