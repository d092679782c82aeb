package statestore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The versioned store conformance suite, run on every backend.
func TestVersionedConformance(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			t.Run("Basics", func(t *testing.T) { testVersionedBasics(t, b) })
			t.Run("OutOfOrder", func(t *testing.T) { testVersionedOutOfOrder(t, b) })
			t.Run("Retention", func(t *testing.T) { testVersionedRetention(t, b) })
			t.Run("NoHistory", func(t *testing.T) { testVersionedNoHistory(t, b) })
			t.Run("RandomAgainstModel", func(t *testing.T) { testVersionedRandomModel(t, b) })
			t.Run("Restore", func(t *testing.T) { testVersionedRestore(t, b) })
			if b.reopen != nil {
				t.Run("Reopen", func(t *testing.T) { testVersionedReopen(t, b) })
			}
		})
	}
}

func openVersioned(t *testing.T, rw ReadWriter, retention int64) *VersionedStore {
	t.Helper()
	s, err := NewVersionedStore(rw, VersionedOptions{HistoryRetention: retention})
	require.NoError(t, err)
	return s
}

func vput(t *testing.T, s *VersionedStore, key string, value any, ts int64) (int64, bool) {
	t.Helper()
	var v []byte
	if value != nil {
		v = []byte(value.(string))
	}
	validTo, put, err := s.Put([]byte(key), v, ts)
	require.NoError(t, err)
	return validTo, put
}

// asOf renders key's version at ts as "value[from,to)", or "-" when there
// is none; ts math.MaxInt64 asks for the latest.
func asOf(t *testing.T, s *VersionedStore, key string, ts int64) string {
	t.Helper()
	var (
		v     Version
		found bool
		err   error
	)
	if ts == math.MaxInt64 {
		v, found, err = s.Get([]byte(key))
	} else {
		v, found, err = s.GetAsOf([]byte(key), ts)
	}
	require.NoError(t, err)
	if !found {
		return "-"
	}
	to := "∞"
	if v.ValidTo != OpenEnded {
		to = fmt.Sprint(v.ValidTo)
	}
	return fmt.Sprintf("%s[%d,%s)", v.Value, v.ValidFrom, to)
}

const latest = math.MaxInt64

func testVersionedBasics(t *testing.T, b backend) {
	s := openVersioned(t, b.open(t), 1000)
	require.Equal(t, "-", asOf(t, s, "k", latest))
	obs, err := s.ObservedTime()
	require.NoError(t, err)
	require.Equal(t, int64(math.MinInt64), obs)

	to, put := vput(t, s, "k", "a", 10)
	require.True(t, put)
	require.Equal(t, OpenEnded, to)
	vput(t, s, "k", "b", 20)
	vput(t, s, "k", nil, 30)
	vput(t, s, "k", "d", 40)
	vput(t, s, "other", "x", 25)
	// A key with a zero byte and an empty key keep their own versions.
	vput(t, s, "k\x00", "z", 15)
	vput(t, s, "", "e", 15)

	require.Equal(t, "d[40,∞)", asOf(t, s, "k", latest))
	require.Equal(t, "-", asOf(t, s, "k", 9))
	require.Equal(t, "a[10,20)", asOf(t, s, "k", 10))
	require.Equal(t, "a[10,20)", asOf(t, s, "k", 19))
	require.Equal(t, "b[20,30)", asOf(t, s, "k", 20))
	require.Equal(t, "-", asOf(t, s, "k", 35), "a tombstone is a version with no value")
	require.Equal(t, "d[40,∞)", asOf(t, s, "k", 1000))
	require.Equal(t, "x[25,∞)", asOf(t, s, "other", 30))
	require.Equal(t, "z[15,∞)", asOf(t, s, "k\x00", 30))
	require.Equal(t, "e[15,∞)", asOf(t, s, "", latest))
	obs, err = s.ObservedTime()
	require.NoError(t, err)
	require.Equal(t, int64(40), obs)

	// A put at an existing version's time replaces it.
	to, put = vput(t, s, "k", "b2", 20)
	require.True(t, put)
	require.Equal(t, int64(30), to)
	require.Equal(t, "b2[20,30)", asOf(t, s, "k", 25))

	// The latest version deleted: the key reads as absent now.
	vput(t, s, "k", nil, 50)
	require.Equal(t, "-", asOf(t, s, "k", latest))
	require.Equal(t, "d[40,50)", asOf(t, s, "k", 45))
}

func testVersionedOutOfOrder(t *testing.T, b backend) {
	s := openVersioned(t, b.open(t), 1000)
	vput(t, s, "k", "a", 10)
	vput(t, s, "k", "c", 30)
	to, put := vput(t, s, "k", "b", 20)
	require.True(t, put)
	require.Equal(t, int64(30), to, "an out-of-order put reports the version that ends it")
	require.Equal(t, "c[30,∞)", asOf(t, s, "k", latest), "nor does it change the latest value")
	require.Equal(t, "a[10,20)", asOf(t, s, "k", 15))
	require.Equal(t, "b[20,30)", asOf(t, s, "k", 29))
	// Older than every version: valid until the first.
	to, _ = vput(t, s, "k", "z", 5)
	require.Equal(t, int64(10), to)
	require.Equal(t, "z[5,10)", asOf(t, s, "k", 7))
	// An out-of-order tombstone cuts a version short.
	vput(t, s, "k", nil, 25)
	require.Equal(t, "b[20,25)", asOf(t, s, "k", 24))
	require.Equal(t, "-", asOf(t, s, "k", 27))
}

// countKeys counts the store's keys, the observed time's included.
func countKeys(t *testing.T, rw ReadWriter) int {
	t.Helper()
	return len(collectAll(t, rw))
}

func testVersionedRetention(t *testing.T, b backend) {
	st := b.open(t)
	s := openVersioned(t, st, 100)
	for ts := int64(0); ts <= 1000; ts += 10 {
		vput(t, s, "k", fmt.Sprint(ts), ts)
	}
	// Observed time 1000, retention 100: versions whose validity ended at
	// or before 900 are gone. [890,900) ended at 900; [900,910) remains.
	require.Equal(t, "-", asOf(t, s, "k", 899), "older than the retention")
	require.Equal(t, "900[900,910)", asOf(t, s, "k", 900))
	require.Equal(t, "1000[1000,∞)", asOf(t, s, "k", latest))
	require.Equal(t, 11+1, countKeys(t, st), "expired versions are removed by the key's puts")

	// Too late to put.
	_, put := vput(t, s, "k", "late", 899)
	require.False(t, put)
	_, put = vput(t, s, "new", "late", 899)
	require.False(t, put, "the cut-off is the store's, not the key's")
	require.Equal(t, "-", asOf(t, s, "new", latest))
	_, put = vput(t, s, "k", "ok", 900)
	require.True(t, put)
	require.Equal(t, "ok[900,910)", asOf(t, s, "k", 905))

	// The latest version never expires, however old.
	vput(t, s, "old", "v", 950)
	for ts := int64(1010); ts <= 5000; ts += 10 {
		vput(t, s, "k", fmt.Sprint(ts), ts)
	}
	require.Equal(t, "v[950,∞)", asOf(t, s, "old", latest))
	require.Equal(t, "v[950,∞)", asOf(t, s, "old", 4900))
	require.Equal(t, "-", asOf(t, s, "old", 4899))
	require.Equal(t, 11+1+1, countKeys(t, st))
}

func testVersionedNoHistory(t *testing.T, b backend) {
	st := b.open(t)
	s := openVersioned(t, st, 0)
	vput(t, s, "k", "a", 10)
	vput(t, s, "k", "b", 20)
	_, put := vput(t, s, "k", "late", 15)
	require.False(t, put)
	require.Equal(t, "b[20,∞)", asOf(t, s, "k", latest))
	require.Equal(t, "-", asOf(t, s, "k", 19))
	require.Equal(t, "b[20,∞)", asOf(t, s, "k", 20))
	require.Equal(t, 2, countKeys(t, st), "the latest version and the observed time")
	_, err := NewVersionedStore(st, VersionedOptions{HistoryRetention: -1})
	require.Error(t, err)
}

// vmodel is a reference versioned store: every put's version, by key and
// time, and the observed time.
type vmodel struct {
	versions  map[string]map[int64]*string
	observed  int64
	retention int64
}

func (m *vmodel) put(k string, v *string, ts int64) bool {
	if ts < m.observed-m.retention {
		return false
	}
	m.observed = max(m.observed, ts)
	if m.versions[k] == nil {
		m.versions[k] = map[int64]*string{}
	}
	m.versions[k][ts] = v
	return true
}

func (m *vmodel) asOf(k string, at int64) string {
	if at != latest && at < m.observed-m.retention {
		return "-"
	}
	from, to := int64(math.MinInt64), OpenEnded
	var v *string
	found := false
	for ts, val := range m.versions[k] {
		switch {
		case ts <= at && (!found || ts > from):
			from, v, found = ts, val, true
		}
	}
	if !found || v == nil {
		return "-"
	}
	for ts := range m.versions[k] {
		if ts > from && ts < to {
			to = ts
		}
	}
	end := "∞"
	if to != OpenEnded {
		end = fmt.Sprint(to)
	}
	return fmt.Sprintf("%s[%d,%s)", *v, from, end)
}

func testVersionedRandomModel(t *testing.T, b backend) {
	s := openVersioned(t, b.open(t), 50)
	m := &vmodel{versions: map[string]map[int64]*string{}, observed: -1 << 40, retention: 50}
	r := rand.New(rand.NewPCG(7, 9))
	clock := int64(0)
	for i := range 3000 {
		clock += r.Int64N(5)
		k := fmt.Sprint(r.IntN(8))
		ts := clock - r.Int64N(80) // some late, some too late
		var v *string
		if r.IntN(6) > 0 {
			val := fmt.Sprint(i)
			v = &val
		}
		var raw any
		if v != nil {
			raw = *v
		}
		_, put := vput(t, s, k, raw, ts)
		require.Equal(t, m.put(k, v, ts), put, "put %d of %s at %d", i, k, ts)
		if i%10 == 0 {
			for q := range 8 {
				at := clock - r.Int64N(120)
				if q == 0 {
					at = latest
				}
				kk := fmt.Sprint(r.IntN(8))
				require.Equal(t, m.asOf(kk, at), asOf(t, s, kk, at), "after put %d: %s as of %d", i, kk, at)
			}
		}
	}
}

// changeLog is a ReadWriter that records every write it passes on, as the
// record cache sends them to the changelog.
type changeLog struct {
	ReadWriter
	entries []Entry
}

func (c *changeLog) Put(k, v []byte) error {
	c.entries = append(c.entries, Entry{Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)})
	return c.ReadWriter.Put(k, v)
}

func (c *changeLog) Delete(k []byte) error {
	c.entries = append(c.entries, Entry{Key: append([]byte(nil), k...)})
	return c.ReadWriter.Delete(k)
}

// A store rebuilt by replaying what a versioned store wrote, in order,
// answers as the original does: versions, deletions and the observed
// time all travel through the changelog.
func testVersionedRestore(t *testing.T, b backend) {
	log := &changeLog{ReadWriter: b.open(t)}
	s := openVersioned(t, log, 30)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		vput(t, s, fmt.Sprint(r.IntN(5)), fmt.Sprint(i), int64(i)-r.Int64N(40))
	}
	restored := b.open(t)
	for i := 0; i < len(log.entries); i += 64 {
		require.NoError(t, restored.Write(log.entries[i:min(i+64, len(log.entries))], int64(i)))
	}
	require.Equal(t, collectAll(t, log), collectAll(t, restored))
	rs := openVersioned(t, restored, 30)
	for k := range 5 {
		for at := int64(400); at <= 510; at++ {
			require.Equal(t, asOf(t, s, fmt.Sprint(k), at), asOf(t, rs, fmt.Sprint(k), at))
		}
	}
	// The restored store goes on where the original left off.
	_, put := vput(t, rs, "0", "late", 400)
	require.False(t, put)
}

func testVersionedReopen(t *testing.T, b backend) {
	st := b.open(t)
	s := openVersioned(t, st, 100)
	vput(t, s, "k", "a", 10)
	vput(t, s, "k", "b", 200)
	st = b.reopen(t, st)
	s = openVersioned(t, st, 100)
	require.Equal(t, "b[200,∞)", asOf(t, s, "k", latest))
	require.Equal(t, "a[10,200)", asOf(t, s, "k", 150))
	require.Equal(t, "-", asOf(t, s, "k", 99))
	_, put := vput(t, s, "k", "late", 99)
	require.False(t, put, "the observed time survives a reopen")
}

// The layout checks accept an empty store either way, and a plain table
// store whose key is 00 00 (its value timestamped, longer than an
// observed time); each refuses the other layout's entries.
func TestLayoutChecks(t *testing.T) {
	empty := NewMemory()
	require.NoError(t, CheckVersionedLayout(empty))
	require.NoError(t, CheckPlainLayout(empty))

	plain := NewMemory()
	require.NoError(t, plain.Put([]byte{0, 0}, AppendTimestamped(nil, 5, []byte("v"))))
	require.NoError(t, plain.Put([]byte("k"), AppendTimestamped(nil, 5, []byte("v"))))
	require.NoError(t, CheckPlainLayout(plain))
	require.ErrorIs(t, CheckVersionedLayout(plain), ErrLayoutMismatch)

	versioned := NewMemory()
	vs, err := NewVersionedStore(versioned, VersionedOptions{HistoryRetention: 10})
	require.NoError(t, err)
	_, _, err = vs.Put([]byte("k"), []byte("v"), 5)
	require.NoError(t, err)
	require.NoError(t, CheckVersionedLayout(versioned))
	require.ErrorIs(t, CheckPlainLayout(versioned), ErrLayoutMismatch)
}
