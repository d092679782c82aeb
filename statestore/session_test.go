package statestore

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func openSessions(t *testing.T, rw ReadWriter, opts WindowOptions) *SessionStore {
	t.Helper()
	s, err := NewSessionStore(rw, opts)
	require.NoError(t, err)
	return s
}

func sput(t *testing.T, s *SessionStore, k string, start, end int64, v string) {
	t.Helper()
	require.NoError(t, s.Put([]byte(k), start, end, []byte(v)))
}

func testSessionBasics(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 1000, SegmentInterval: 10}
	s := openSessions(t, openSegmented(t, b, opts), opts)
	sput(t, s, "a", 0, 5, "s1")
	sput(t, s, "a", 10, 20, "s2")
	sput(t, s, "a", 30, 30, "s3")
	sput(t, s, "a", 2, 20, "s4")
	sput(t, s, "b", 12, 14, "b")
	sput(t, s, "a\x00", 10, 20, "z")

	s1, s2, s3, s4 := wrow{"a", 0, 5, "s1"}, wrow{"a", 10, 20, "s2"}, wrow{"a", 30, 30, "s3"}, wrow{"a", 2, 20, "s4"}
	require.Equal(t, []wrow{s4, s2}, collectW(t)(s.FindSessions([]byte("a"), 15, 25)), "ordered by end, then start")
	require.Equal(t, []wrow{s1, s4, s2, s3}, collectW(t)(s.FindSessions([]byte("a"), 5, 30)), "both bounds included")
	require.Equal(t, []wrow{s1, s4, s2}, collectW(t)(s.FindSessions([]byte("a"), 0, 29)))
	require.Equal(t, []wrow{s3, s2, s4, s1}, collectW(t)(s.FindSessionsBackward([]byte("a"), 0, 100)))
	require.Equal(t, []wrow{s1, s4, s2, s3}, collectW(t)(s.Fetch([]byte("a"))))
	require.Empty(t, collectW(t)(s.FindSessions([]byte("a"), 31, 100)))
	require.Equal(t, []wrow{s1, s4, s2, s3, {"a\x00", 10, 20, "z"}, {"b", 12, 14, "b"}},
		collectW(t)(s.FindSessionsRange(nil, nil, 0, 100)), "by key, end, start")

	v, found, err := s.Get([]byte("a"), 10, 20)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "s2", string(v))
	require.NoError(t, s.Remove([]byte("a"), 10, 20))
	_, found, err = s.Get([]byte("a"), 10, 20)
	require.NoError(t, err)
	require.False(t, found)
	require.ErrorIs(t, s.Put([]byte("a"), 5, 4, []byte("x")), ErrBadSession)
	require.ErrorIs(t, s.Put([]byte("a"), -5, 4, []byte("x")), ErrNegativeTime)
}

// testSessionMerging aggregates counts per session the way the DSL will:
// find the sessions a record joins, remove them, put the merged one. The
// result must not depend on the order records arrive in.
func testSessionMerging(t *testing.T, b backend) {
	const gap = 5
	r := rand.New(rand.NewPCG(21, 22))
	for round := range 20 {
		opts := WindowOptions{Retention: 1 << 40, SegmentInterval: 7}
		seg := openSegmented(t, b, opts)
		s := openSessions(t, seg, opts)
		times := make([]int64, 30)
		for i := range times {
			times[i] = r.Int64N(150)
		}
		for i, ts := range times {
			it, err := s.FindSessions([]byte("k"), ts-gap, ts+gap)
			require.NoError(t, err)
			merged, count := wrow{start: ts, end: ts}, 1
			var old []wrow
			for it.Next() {
				old = append(old, wrow{start: it.Start(), end: it.End()})
				var n int
				_, err := fmt.Sscan(string(it.Value()), &n)
				require.NoError(t, err)
				count += n
				merged.start, merged.end = min(merged.start, it.Start()), max(merged.end, it.End())
			}
			require.NoError(t, errors.Join(it.Err(), it.Close()))
			for _, o := range old {
				require.NoError(t, s.Remove([]byte("k"), o.start, o.end))
			}
			sput(t, s, "k", merged.start, merged.end, fmt.Sprint(count))
			if i%7 == 0 {
				require.NoError(t, seg.Write(nil, int64(i)))
			}
		}
		sorted := slices.Sorted(slices.Values(times))
		var want []wrow
		for _, ts := range sorted {
			if n := len(want); n > 0 && ts-want[n-1].end <= gap {
				want[n-1].end = ts
				c := 0
				fmt.Sscan(want[n-1].v, &c)
				want[n-1].v = fmt.Sprint(c + 1)
				continue
			}
			want = append(want, wrow{"k", ts, ts, "1"})
		}
		require.Equal(t, want, collectW(t)(s.Fetch([]byte("k"))), "round %d, times %v", round, times)
	}
}

func testSessionRetention(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 30, SegmentInterval: 10}
	seg := openSegmented(t, b, opts)
	s := openSessions(t, seg, opts)
	for end := int64(10); end <= 300; end += 10 {
		sput(t, s, "k", end-8, end, "v")
		got := collectW(t)(s.FindSessions([]byte("k"), 0, math.MaxInt64))
		require.Equal(t, max(10, end-20), got[0].end, "at %d the sessions ending after end-30 are live", end)
		raw := rawTimes(t, seg)
		require.LessOrEqual(t, len(raw), 4)
		require.GreaterOrEqual(t, raw[0], end-39)
	}
	// A long session expires by its end, not its start.
	sput(t, s, "long", 0, 300, "v")
	require.Len(t, collectW(t)(s.Fetch([]byte("long"))), 1)
}
