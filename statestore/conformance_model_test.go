package statestore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// testRandomModel runs random writes against a map and compares reads.
func testRandomModel(t *testing.T, b backend) {
	s := b.open(t)
	r := rand.New(rand.NewPCG(3, 4))
	model := map[string]string{}
	key := func() []byte { return fmt.Appendf(nil, "%02d", r.IntN(60)) }
	for round := 0; round < 40; round++ {
		var batch []Entry
		for i := r.IntN(30); i > 0; i-- {
			k := key()
			if r.IntN(3) == 0 {
				batch = append(batch, Entry{Key: k})
				delete(model, string(k))
			} else {
				v := fmt.Sprint(round, i)
				batch = append(batch, Entry{Key: k, Value: []byte(v)})
				model[string(k)] = v
			}
		}
		require.NoError(t, s.Write(batch, int64(round)))
		for i := 0; i < 5; i++ {
			k := key()
			v, found, err := s.Get(k)
			require.NoError(t, err)
			mv, ok := model[string(k)]
			require.Equal(t, ok, found)
			require.Equal(t, mv, string(v))
		}
		from, to := key(), key()
		it, err := s.Range(from, to)
		got := collect(t, it, err)
		var want []kv
		for k, v := range model {
			if k >= string(from) && k < string(to) {
				want = append(want, kv{k, v})
			}
		}
		slices.SortFunc(want, func(a, b kv) int { return bytes.Compare([]byte(a.k), []byte(b.k)) })
		require.Equal(t, want, got)
		n, err := s.ApproximateCount()
		require.NoError(t, err)
		require.Equal(t, int64(len(model)), n)
	}
}

// bigKeys returns keys around and far beyond badger's 65,000-byte key
// limit, many sharing long prefixes (so that the badger backend's slots
// must be put in order by real key), with short neighbours on both sides.
func bigKeys() [][]byte {
	m := func(n int, tail string) []byte { return append(bytes.Repeat([]byte("m"), n), tail...) }
	r := rand.New(rand.NewPCG(5, 6))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return b
	}
	keys := [][]byte{
		[]byte("a"),
		[]byte("z"),
		m(1, ""),
		m(64_966, ""),
		m(64_967, ""),
		m(64_967, "z"),
		m(64_998, ""),
		m(64_999, ""),
		m(65_000, ""),
		m(65_001, ""),
		m(69_999, "a"),
		m(70_000, ""),
		m(70_000, "\x00"),
		m(69_999, "\xff"),
		m(900_000, ""),
		m(64_999, "\x00"),
		// The same limits for a store in a shared DB, whose keys are
		// prefixed.
		m(64_962, ""),
		m(64_963, ""),
		m(64_963, "z"),
		m(64_993, ""),
		m(64_994, ""),
		append(bytes.Repeat([]byte("l"), 70_000), "m"...),
		append([]byte("n"), bytes.Repeat([]byte{0xff}, 69_999)...),
		append(m(65_500, ""), random(10)...),
		append(m(65_500, ""), random(10)...),
		random(70_000),
		random(64_999),
		random(900_000),
	}
	return keys
}

func sortedKeys(model map[string][]byte) []string {
	keys := make([]string, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return bytes.Compare([]byte(a), []byte(b)) })
	return keys
}

// checkModel compares every read of s with model: Get, All, Range over
// many bounds (every key, and just past and just before some), and count.
func checkModel(t *testing.T, s ReadWriter, model map[string][]byte, probes [][]byte) {
	t.Helper()
	for _, k := range probes {
		v, found, err := s.Get(k)
		require.NoError(t, err)
		want, ok := model[string(k)]
		require.Equal(t, ok, found, "Get of a key of %d bytes", len(k))
		if ok {
			require.True(t, bytes.Equal(want, v), "Get of a key of %d bytes: value of %d bytes, want %d", len(k), len(v), len(want))
		}
	}
	sorted := sortedKeys(model)
	rangeKeys := func(from, to []byte) []string {
		it, err := s.Range(from, to)
		require.NoError(t, err)
		var got []string
		for it.Next() {
			got = append(got, string(it.Key()))
			require.True(t, bytes.Equal(model[string(it.Key())], it.Value()), "value of a key of %d bytes", len(it.Key()))
		}
		require.NoError(t, it.Err())
		require.NoError(t, it.Close())
		return got
	}
	wantRange := func(from, to []byte) []string {
		var want []string
		for _, k := range sorted {
			if (from == nil || k >= string(from)) && (to == nil || k < string(to)) {
				want = append(want, k)
			}
		}
		return want
	}
	lens := func(ks []string) []int {
		out := make([]int, len(ks))
		for i, k := range ks {
			out[i] = len(k)
		}
		return out
	}
	requireRange := func(from, to []byte) {
		t.Helper()
		got, want := rangeKeys(from, to), wantRange(from, to)
		require.True(t, slices.Equal(want, got), "Range [%d bytes, %d bytes): got key lengths %v, want %v", len(from), len(to), lens(got), lens(want))
	}
	requireRange(nil, nil)
	bounds := [][]byte{nil}
	for _, k := range probes {
		bounds = append(bounds, k, append(bytes.Clone(k), 0), k[:len(k)/2])
	}
	for i, from := range bounds {
		// Every bound as from and as to, paired with a few others.
		requireRange(from, nil)
		requireRange(nil, from)
		requireRange(from, bounds[(i*7+3)%len(bounds)])
	}
	n, err := s.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(len(model)), n)
}

// testBigKeysAndValues stores keys of up to 900,000 bytes and values near a
// megabyte, the sizes Kafka accepts, and checks every read against a model
// through puts, overwrites, deletes, a reopen and a reset.
func testBigKeysAndValues(t *testing.T, b backend) {
	s := b.open(t)
	keys := bigKeys()
	bigValue := func(i int) []byte {
		v := bytes.Repeat([]byte{byte(i)}, 1_000_000-i)
		return binary.BigEndian.AppendUint32(v, uint32(i))
	}
	model := map[string][]byte{}
	for i, k := range keys {
		v := fmt.Appendf(nil, "v%d", i)
		if i%3 == 0 {
			v = bigValue(i)
		}
		require.NoError(t, s.Put(k, v), "Put of a key of %d bytes", len(k))
		model[string(k)] = v
	}
	probes := append(keys, bytes.Repeat([]byte("m"), 80_000), bytes.Repeat([]byte("m"), 64_968))
	checkModel(t, s, model, probes)

	// Overwrite and delete, through Put/Delete and through Write.
	for i, k := range keys {
		switch i % 4 {
		case 0:
			require.NoError(t, s.Delete(k))
			delete(model, string(k))
		case 1:
			v := bigValue(i + 1)
			require.NoError(t, s.Put(k, v))
			model[string(k)] = v
		}
	}
	var batch []Entry
	for i, k := range keys {
		switch i % 4 {
		case 2:
			batch = append(batch, Entry{Key: k})
			delete(model, string(k))
		case 3:
			v := []byte{}
			batch = append(batch, Entry{Key: k, Value: v})
			model[string(k)] = v
		}
	}
	require.NoError(t, s.Delete(bytes.Repeat([]byte("m"), 80_000)), "deleting an absent long key")
	require.NoError(t, s.Write(batch, 77))
	checkModel(t, s, model, probes)

	if b.reopen != nil {
		s = b.reopen(t, s)
		pos, err := s.Position()
		require.NoError(t, err)
		require.Equal(t, int64(77), pos)
		checkModel(t, s, model, probes)
	}

	require.NoError(t, s.Reset())
	checkModel(t, s, map[string][]byte{}, probes)
	require.NoError(t, s.Write([]Entry{{Key: keys[len(keys)-1], Value: bigValue(1)}}, 3))
	if b.reopen != nil {
		s = b.reopen(t, s)
	}
	checkModel(t, s, map[string][]byte{string(keys[len(keys)-1]): bigValue(1)}, probes)
}
