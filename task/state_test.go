package task

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTransitions(t *testing.T) {
	legal := map[[2]State]bool{
		{Created, Restoring}: true, {Created, Standby}: true, {Created, Warmup}: true, {Created, Closed}: true,
		{Restoring, Running}: true, {Restoring, Parked}: true, {Restoring, Closed}: true,
		{Running, Parked}: true, {Running, Closed}: true,
		{Parked, Restoring}: true, {Parked, Standby}: true, {Parked, Warmup}: true, {Parked, Closed}: true,
		{Standby, Restoring}: true, {Standby, Warmup}: true, {Standby, Closed}: true,
		{Warmup, Restoring}: true, {Warmup, Standby}: true, {Warmup, Closed}: true,
	}
	n := 0
	for from := Created - 1; from <= Closed+1; from++ {
		for to := Created - 1; to <= Closed+1; to++ {
			require.Equal(t, legal[[2]State{from, to}], CanTransition(from, to), "%s -> %s", from, to)
			if CanTransition(from, to) {
				n++
			}
		}
	}
	require.Equal(t, len(legal), n)
}

func TestStateNames(t *testing.T) {
	require.Equal(t, []string{"created", "restoring", "running", "parked", "standby", "warmup", "closed", "State(7)"},
		[]string{Created.String(), Restoring.String(), Running.String(), Parked.String(), Standby.String(), Warmup.String(), Closed.String(), State(7).String()})
	// The values App.Tasks reported before the state covered standbys.
	require.Equal(t, []State{0, 1, 2}, []State{Created, Restoring, Running})
	for s := Created; s <= Closed; s++ {
		require.Equal(t, s == Restoring || s == Running, s.Active(), s)
		require.Equal(t, s == Standby || s == Warmup, s.Following(), s)
	}
}
