package task

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTransitions(t *testing.T) {
	legal := map[[2]State]bool{
		{Created, Restoring}: true, {Created, Closed}: true,
		{Restoring, Running}: true, {Restoring, Suspended}: true, {Restoring, Closed}: true,
		{Running, Suspended}: true, {Running, Closed}: true,
		{Suspended, Restoring}: true, {Suspended, Running}: true, {Suspended, Closed}: true,
	}
	for from := Created; from <= Closed; from++ {
		for to := Created; to <= Closed; to++ {
			require.Equal(t, legal[[2]State{from, to}], CanTransition(from, to), "%s -> %s", from, to)
		}
	}
	require.Equal(t, "restoring", Restoring.String())
}
