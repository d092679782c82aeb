package assignor

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Items whose bin is gone (a client that left) go to the bins they are
// warmest on, which can leave a bin below its lower limit; that bin then
// takes one of them, not an item another bin kept from before: the placed
// item moves anyway, so taking it changes no other owner.
func TestRaiseLowTakesPlacedItemsBeforeKeptOnes(t *testing.T) {
	caps := []int{1, 1, 1}
	// Bin 0 keeps item 0 and bin 2 item 1; items 2 and 3 lost their bin
	// and are warm on bin 0, half warm on bin 2 and cold on bin 1.
	prev := []int{0, 2, -1, -1}
	lo, hi := bounds(len(prev), caps, len(prev))
	sp := spreader{
		caps: caps, lo: lo, hi: hi,
		affinity: func(i, b int) int {
			switch {
			case b == prev[i] || (prev[i] < 0 && b == 0):
				return 0
			case prev[i] < 0 && b == 2:
				return 1
			}
			return 2
		},
	}
	owner, load := sp.spread(prev, make([]int, len(caps)))
	for b := range caps {
		require.GreaterOrEqual(t, load[b], lo[b], "bin %d", b)
		require.LessOrEqual(t, load[b], hi[b], "bin %d", b)
	}
	for i, b := range prev {
		if b >= 0 {
			require.Equal(t, b, owner[i], "item %d moved off the bin it kept", i)
		}
	}
}
