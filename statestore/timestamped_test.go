package statestore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTimestampedRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		ts int64
		v  []byte
	}{
		{0, []byte("agg")},
		{1234567, binary.BigEndian.AppendUint64(nil, 42)},
		{math.MaxInt64, nil},
		{-1, []byte{0xe1, 0xdd, 0x54, 0x01}},
	} {
		b := AppendTimestamped([]byte("prefix"), tc.ts, tc.v)
		v, ts := SplitTimestamped(b[len("prefix"):])
		if ts != tc.ts || !bytes.Equal(v, tc.v) {
			t.Errorf("round trip of %q at %d: got %q at %d", tc.v, tc.ts, v, ts)
		}
	}
}

// A bare value, as stores held before values carried timestamps, reads as
// itself with NoTimestamp: counts (8 bytes), text, and empty values.
func TestTimestampedReadsBareValues(t *testing.T) {
	for _, bare := range [][]byte{
		binary.BigEndian.AppendUint64(nil, 7),
		binary.BigEndian.AppendUint64(nil, math.MaxUint64),
		[]byte("0+1+2"),
		[]byte(`{"n":1,"when":"2026-12-06T00:00:00Z"}`),
		{0xe1, 0xdd, 0x54, 0x01, 1, 2, 3, 4}, // the mark, but too short
		{},
	} {
		v, ts := SplitTimestamped(bare)
		if ts != NoTimestamp || !bytes.Equal(v, bare) {
			t.Errorf("bare %x: got %x at %d, want itself at NoTimestamp", bare, v, ts)
		}
	}
}

// The timestamped kinds through every backend: a key-value store of
// timestamped values, mixed with bare ones as stores written before
// timestamps hold them, read whole and through BareValues, against a
// model, across a write batch, ranges and a reopen; and a window store of
// timestamped aggregates beside bare ones.
func TestTimestampedConformance(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			t.Run("KeyValueAgainstModel", func(t *testing.T) { testTimestampedKeyValue(t, b) })
			t.Run("WindowValues", func(t *testing.T) { testTimestampedWindows(t, b) })
		})
	}
}

// stampedValue is what the model of a timestamped store holds for a key.
type stampedValue struct {
	v  string
	ts int64
}

func testTimestampedKeyValue(t *testing.T, b backend) {
	s := b.open(t)
	r := rand.New(rand.NewPCG(5, 6))
	model := map[string]stampedValue{}
	key := func() []byte { return fmt.Appendf(nil, "%02d", r.IntN(50)) }
	check := func(s Store) {
		t.Helper()
		bare := BareValues(s)
		for k, want := range model {
			raw, found, err := s.Get([]byte(k))
			require.NoError(t, err)
			require.True(t, found, k)
			v, ts := SplitTimestamped(raw)
			require.Equal(t, want, stampedValue{string(v), ts}, k)
			bv, found, err := bare.Get([]byte(k))
			require.NoError(t, err)
			require.True(t, found, k)
			require.Equal(t, want.v, string(bv), k)
		}
		from, to := key(), key()
		var want []kv
		for k, sv := range model {
			if k >= string(from) && k < string(to) {
				want = append(want, kv{k, sv.v})
			}
		}
		slices.SortFunc(want, func(a, b kv) int { return strings.Compare(a.k, b.k) })
		it, err := bare.Range(from, to)
		require.Equal(t, want, collect(t, it, err), "bare range [%s,%s)", from, to)
		it, err = bare.All()
		require.Len(t, collect(t, it, err), len(model))
	}
	for round := range 30 {
		var batch []Entry
		for i := r.IntN(20); i > 0; i-- {
			k := key()
			switch r.IntN(4) {
			case 0:
				batch = append(batch, Entry{Key: k})
				delete(model, string(k))
			case 1: // as a build before timestamps wrote it
				v := fmt.Sprintf("bare-%d-%d", round, i)
				batch = append(batch, Entry{Key: k, Value: []byte(v)})
				model[string(k)] = stampedValue{v, NoTimestamp}
			default:
				v, ts := fmt.Sprintf("v-%d-%d", round, i), r.Int64N(1<<40)-1<<39
				batch = append(batch, Entry{Key: k, Value: AppendTimestamped(nil, ts, []byte(v))})
				model[string(k)] = stampedValue{v, ts}
			}
		}
		require.NoError(t, s.Write(batch, int64(round)))
		check(s)
	}
	// A value written through BareValues has no time, and stays bare.
	require.NoError(t, BareValues(s).Put([]byte("zz"), []byte("through-bare")))
	model["zz"] = stampedValue{"through-bare", NoTimestamp}
	check(s)
	if b.reopen != nil {
		s = b.reopen(t, s)
		check(s)
	}
}

func testTimestampedWindows(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 1000, SegmentInterval: 100, WindowSize: 10}
	seg := openSegmented(t, b, opts)
	w := openWindows(t, seg, opts)
	require.NoError(t, w.Put([]byte("k"), 0, []byte("old")))
	require.NoError(t, w.Put([]byte("k"), 10, AppendTimestamped(nil, 17, []byte("new"))))
	require.NoError(t, w.Put([]byte("j"), 10, AppendTimestamped(nil, 12, []byte("j10"))))
	read := func(w *WindowStore) []string {
		t.Helper()
		it, err := w.FetchAll(0, 100)
		require.NoError(t, err)
		defer it.Close()
		var out []string
		for it.Next() {
			v, ts := SplitTimestamped(it.Value())
			out = append(out, fmt.Sprintf("%s@[%d,%d) %s %d", it.Key(), it.Start(), it.End(), v, ts))
		}
		require.NoError(t, it.Err())
		return out
	}
	want := []string{
		fmt.Sprintf("k@[0,10) old %d", NoTimestamp),
		"j@[10,20) j10 12",
		"k@[10,20) new 17",
	}
	require.ElementsMatch(t, want, read(w))
	if b.reopen == nil {
		return
	}
	require.NoError(t, seg.Write(nil, 1))
	seg, err := NewSegmentedStore(b.reopen(t, seg.Inner()), opts)
	require.NoError(t, err)
	require.ElementsMatch(t, want, read(openWindows(t, seg, opts)))
}
