package serde

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRoundTrips(t *testing.T) {
	for _, s := range []string{"", "hello", "héllo wörld"} {
		b, err := String.Encode(s)
		require.NoError(t, err)
		got, err := String.Decode(b)
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	for _, v := range []int64{0, 1, -1, 1 << 40, -1 << 62} {
		b, err := Int64.Encode(v)
		require.NoError(t, err)
		require.Len(t, b, 8)
		got, err := Int64.Decode(b)
		require.NoError(t, err)
		require.Equal(t, v, got)
	}
	type point struct{ X, Y int }
	js := JSON[point]()
	b, err := js.Encode(point{1, 2})
	require.NoError(t, err)
	p, err := js.Decode(b)
	require.NoError(t, err)
	require.Equal(t, point{1, 2}, p)

	raw := []byte{1, 2, 3}
	cp, err := Bytes.Decode(raw)
	require.NoError(t, err)
	raw[0] = 9
	require.Equal(t, []byte{1, 2, 3}, cp, "Bytes.Decode must copy")
}

func TestInt64MatchesKafkaLongSerializer(t *testing.T) {
	b, err := Int64.Encode(258)
	require.NoError(t, err)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 1, 2}, b)
}

func TestDecodeErrors(t *testing.T) {
	_, err := Int64.Decode([]byte{1, 2, 3})
	require.Error(t, err)
	_, err = JSON[map[string]int]().Decode([]byte("{not json"))
	require.Error(t, err)
	_, err = JSON[int]().Decode(nil)
	require.Error(t, err)
}
