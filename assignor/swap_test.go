package assignor

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An item over its group's share swaps with the partner whose own group is
// over its share on the partner's bin, which takes both back within their
// shares in one swap, rather than with the first partner found; the bins
// no swap needs keep their items.
func TestSwapGroupsPrefersSwapThatRelievesBothGroups(t *testing.T) {
	const a, b, c, d = 0, 1, 2, 3
	// Bin 0: a a c (a over); bin 1: b c c (c over, its b fits bin 0 but
	// relieves only a); bin 2: b b d (b over: its b relieves a and b).
	group := []int{a, a, c, b, c, c, b, b, d}
	placed := []int{0, 0, 0, 1, 1, 1, 2, 2, 2}
	caps := []int{1, 1, 1}
	prev := filled(len(group), -1)
	s := &spreader{caps: caps, lo: []int{0, 0, 0}, hi: []int{9, 9, 9}, group: group, groups: 4}
	sp := s.begin(prev, make([]int, len(caps)))
	for i, bin := range placed {
		sp.put(i, bin)
	}
	sp.swapGroups()

	require.Equal(t, 1, sp.owner[3], "bin 1's b moved though a swap with bin 2's b relieves two groups at once")
	require.Equal(t, 0, sp.owner[6], "bin 2's first b should take a's place on bin 0")
	for g := range 4 {
		for bin := range caps {
			require.LessOrEqual(t, sp.groupAt(bin, g), sp.share(bin, g), "group %d on bin %d", g, bin)
		}
	}
}
