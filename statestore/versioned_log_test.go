package statestore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// versionLog is a task's store as a versioned store's processor sees it:
// writes go to the store, and every version put is recorded as the
// changelog record it becomes.
type versionLog struct {
	ReadWriter
	records []Entry
}

func (l *versionLog) LogVersion(key, value []byte, ts int64) {
	l.records = append(l.records, VersionRecord(key, value, ts))
}

// replayAll writes records into s in batches of the given size, with the
// positions a changelog reader gives them.
func replayAll(t *testing.T, s Store, records []Entry, batch int) {
	t.Helper()
	for i := 0; i < len(records); i += batch {
		end := min(i+batch, len(records))
		require.NoError(t, s.Write(records[i:end], int64(end)))
	}
}

// randomPuts puts n random versions of five keys into s, out of order
// and with tombstones, starting at time from.
func randomPuts(t *testing.T, s *VersionedStore, r *rand.Rand, n int, from int64) {
	t.Helper()
	for i := range n {
		var v any = fmt.Sprint(from + int64(i))
		if r.IntN(7) == 0 {
			v = nil
		}
		vput(t, s, fmt.Sprint(r.IntN(5)), v, from+int64(i)-r.Int64N(40))
	}
}

func TestVersionedChangelog(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			t.Run("Records", func(t *testing.T) { testVersionedChangelogRecords(t) })
			t.Run("Replay", func(t *testing.T) { testVersionedChangelogReplay(t, b) })
			t.Run("PlainRecords", func(t *testing.T) { testVersionedChangelogPlainRecords(t, b) })
			t.Run("ReadByPlainStore", func(t *testing.T) { testVersionedChangelogReadByPlain(t, b) })
		})
	}
}

// A version put is logged as Kafka Streams logs it: the record key, the
// value (timestamped, as a plain table's store holds it) or a tombstone,
// and the version's time; an out-of-order put is followed by the key's
// latest version again.
func testVersionedChangelogRecords(t *testing.T) {
	log := &versionLog{ReadWriter: NewMemory()}
	s := openVersioned(t, log, 100)
	vput(t, s, "k", "a", 10)
	vput(t, s, "k", nil, 20)
	vput(t, s, "k", "b", 15)
	_, put := vput(t, s, "k", "old", -500)
	require.False(t, put)
	type rec struct {
		key, value string
		null       bool
		ts         int64
	}
	var got []rec
	for _, e := range log.records {
		require.Equal(t, TimedRecord, e.Origin)
		v, ts := SplitTimestamped(e.Value)
		if e.Value != nil {
			require.Equal(t, e.Time, ts, "the value carries the record's time")
		}
		got = append(got, rec{string(e.Key), string(v), e.Value == nil, e.Time})
	}
	require.Equal(t, []rec{
		{"k", "a", false, 10},
		{"k", "", true, 20},
		{"k", "b", false, 15},
		{"k", "", true, 20},
	}, got)
}

// Putting the changelog's records again, in order and in batches of any
// size, rebuilds the store the active holds: the same entries, so the
// same versions, observed time and expirations.
func testVersionedChangelogReplay(t *testing.T, b backend) {
	for _, batch := range []int{1, 7, 64, 100000} {
		log := &versionLog{ReadWriter: b.open(t)}
		s := openVersioned(t, log, 30)
		randomPuts(t, s, rand.New(rand.NewPCG(3, 4)), 500, 0)
		restored := NewVersionedChangelog(b.open(t), VersionedOptions{HistoryRetention: 30})
		replayAll(t, restored, log.records, batch)
		require.Equal(t, collectAll(t, log), collectAll(t, restored), "batches of %d", batch)
		pos, err := restored.Position()
		require.NoError(t, err)
		require.Equal(t, int64(len(log.records)), pos)
	}
}

// A plain table's changelog (timestamped values, deletes without a time)
// restores into a versioned store with each key's latest value, each
// value at its own time, and each delete after the key's versions.
func testVersionedChangelogPlainRecords(t *testing.T, b backend) {
	plain := []Entry{
		{Key: []byte("a"), Value: AppendTimestamped(nil, 10, []byte("a10")), Time: 1e12, Origin: LoggedRecord},
		{Key: []byte("b"), Value: AppendTimestamped(nil, 12, []byte("b12")), Time: 1e12, Origin: LoggedRecord},
		{Key: []byte("a"), Value: AppendTimestamped(nil, 30, []byte("a30")), Time: 1e12, Origin: LoggedRecord},
		{Key: []byte("b"), Time: 1e12, Origin: LoggedRecord},
		{Key: []byte("c"), Value: []byte("bare"), Time: 40, Origin: LoggedRecord},
		{Key: []byte{0, 0}, Value: AppendTimestamped(nil, 41, []byte("zero")), Time: 1e12, Origin: LoggedRecord},
	}
	restored := NewVersionedChangelog(b.open(t), VersionedOptions{HistoryRetention: 100})
	replayAll(t, restored, plain, 2)
	rs := openVersioned(t, restored, 100)
	require.Equal(t, "a30[30,∞)", asOf(t, rs, "a", math.MaxInt64))
	require.Equal(t, "a10[10,30)", asOf(t, rs, "a", 20))
	require.Equal(t, "-", asOf(t, rs, "b", math.MaxInt64))
	require.Equal(t, "b12[12,30)", asOf(t, rs, "b", 29), "the delete is dated at the observed time then")
	require.Equal(t, "bare[40,∞)", asOf(t, rs, "c", math.MaxInt64))
	require.Equal(t, "zero[41,∞)", asOf(t, rs, "\x00\x00", math.MaxInt64))
	obs, err := rs.ObservedTime()
	require.NoError(t, err)
	require.Equal(t, int64(41), obs, "a produce time never becomes a version's")
}

// A plain table's store restored from a versioned store's changelog
// holds each key's latest value with its time, out-of-order puts
// included.
func testVersionedChangelogReadByPlain(t *testing.T, b backend) {
	log := &versionLog{ReadWriter: NewMemory()}
	s := openVersioned(t, log, 30)
	randomPuts(t, s, rand.New(rand.NewPCG(7, 8)), 400, 0)
	plain := b.open(t)
	replayAll(t, plain, log.records, 64)
	for k := range 5 {
		key := fmt.Sprint(k)
		want, found, err := s.Get([]byte(key))
		require.NoError(t, err)
		got, ok, err := plain.Get([]byte(key))
		require.NoError(t, err)
		require.Equal(t, found, ok, key)
		if found {
			v, ts := SplitTimestamped(got)
			require.Equal(t, string(want.Value), string(v), key)
			require.Equal(t, want.ValidFrom, ts, key)
		}
	}
}

// The store's own writes (a record cache's commit) pass through as they
// are, in the one write of the inner store.
func TestVersionedChangelogOwnWrites(t *testing.T) {
	inner := NewMemory()
	via := NewVersionedChangelog(inner, VersionedOptions{HistoryRetention: 10})
	log := &changeLog{ReadWriter: NewMemory()}
	s := openVersioned(t, log, 10)
	vput(t, s, "k", "a", 5)
	vput(t, s, "k", "b", 30)
	require.NoError(t, via.Write(log.entries, 9))
	require.Equal(t, collectAll(t, log), collectAll(t, inner))
	pos, err := inner.Position()
	require.NoError(t, err)
	require.Equal(t, int64(9), pos)
}

// What replay has read of the store between writes is forgotten when
// the store is written otherwise (an active task's puts, through its
// record cache or not) or reset, so replay after them sees the store as
// it is.
func TestVersionedChangelogReplayAfterOtherWrites(t *testing.T) {
	log := &versionLog{ReadWriter: NewMemory()}
	s := openVersioned(t, log, 30)
	r := rand.New(rand.NewPCG(9, 10))
	randomPuts(t, s, r, 200, 0)
	part1 := len(log.records)

	restored := NewVersionedChangelog(NewMemory(), VersionedOptions{HistoryRetention: 30})
	replayAll(t, restored, log.records[:part1], 16)
	// The store becomes an active's for a while: its puts go to the
	// store directly, or, as a record cache commits them, as its own
	// entries through Write.
	direct := openVersioned(t, restored, 30)
	for i := range 50 {
		k, v, ts := fmt.Sprint(r.IntN(5)), fmt.Sprint(i), int64(200+i)-r.Int64N(40)
		vput(t, s, k, v, ts)
		vput(t, direct, k, v, ts)
	}
	scratch := NewMemory()
	var entries []Entry
	for _, e := range collectAll(t, restored) {
		entries = append(entries, Entry{Key: []byte(e.k), Value: []byte(e.v)})
	}
	require.NoError(t, scratch.Write(entries, 0))
	cached := &changeLog{ReadWriter: scratch}
	viaCache := openVersioned(t, cached, 30)
	for i := range 50 {
		k, v, ts := fmt.Sprint(r.IntN(5)), fmt.Sprint(i), int64(250+i)-r.Int64N(40)
		vput(t, s, k, v, ts)
		vput(t, viaCache, k, v, ts)
	}
	require.NoError(t, restored.Write(cached.entries, 1000))
	part2 := len(log.records)
	randomPuts(t, s, r, 200, 300)
	replayAll(t, restored, log.records[part2:], 16)
	require.Equal(t, collectAll(t, log), collectAll(t, restored))

	require.NoError(t, restored.Reset())
	replayAll(t, restored, log.records, 64)
	require.Equal(t, collectAll(t, log), collectAll(t, restored))
}

// A plain table's record is put whatever its key and value look like: a
// value or a delete under a key shaped as a version key, or a value under
// the observed time's key, is a version of that key like any other.
func TestVersionedChangelogPlainRecordShapedAsOwn(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			shaped := versionKey([]byte("k"), 7)
			records := []Entry{
				{Key: shaped, Value: AppendTimestamped(nil, 20, []byte{versionValue, 'x'}), Time: 1e12, Origin: LoggedRecord},
				{Key: []byte{0, 0}, Value: AppendTimestamped(nil, 30, nil), Time: 1e12, Origin: LoggedRecord},
				{Key: shaped, Time: 1e12, Origin: LoggedRecord},
			}
			restored := NewVersionedChangelog(b.open(t), VersionedOptions{HistoryRetention: 100})
			replayAll(t, restored, records, 2)
			rs := openVersioned(t, restored, 100)
			require.Equal(t, "-", asOf(t, rs, "k", math.MaxInt64), "no version of k is made from a record under another key")
			require.Equal(t, "-", asOf(t, rs, string(shaped), math.MaxInt64), "the plain delete is put")
			require.Equal(t, "\x01x[20,30)", asOf(t, rs, string(shaped), 29))
			require.Equal(t, "[30,∞)", asOf(t, rs, "\x00\x00", math.MaxInt64))
			obs, err := rs.ObservedTime()
			require.NoError(t, err)
			require.Equal(t, int64(30), obs)
		})
	}
}

// A write holding both the store's own entries and changelog records is
// refused and writes nothing: each writer sends one kind.
func TestVersionedChangelogMixedWrite(t *testing.T) {
	inner := NewMemory()
	via := NewVersionedChangelog(inner, VersionedOptions{HistoryRetention: 10})
	err := via.Write([]Entry{
		VersionRecord([]byte("k"), []byte("v"), 5),
		{Key: []byte{0, 0}, Value: make([]byte, 8)},
	}, 3)
	require.ErrorIs(t, err, errMixedWrite)
	require.Empty(t, collectAll(t, inner))
}
