package task

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIDRoundTrip(t *testing.T) {
	for _, id := range []ID{{0, 0}, {3, 11}, {12, 2047}} {
		got, err := ParseID(id.String())
		require.NoError(t, err)
		require.Equal(t, id, got)
	}
	require.Equal(t, "1_7", ID{1, 7}.String())
	for _, bad := range []string{"", "1", "a_1", "1_b", "-1_2", "1_-2", "1_2_3"} {
		_, err := ParseID(bad)
		require.Error(t, err, bad)
	}
	require.Negative(t, ID{0, 5}.Compare(ID{1, 0}))
	require.Negative(t, ID{1, 0}.Compare(ID{1, 1}))
	require.Zero(t, ID{1, 1}.Compare(ID{1, 1}))
}
