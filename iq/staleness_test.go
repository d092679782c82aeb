package iq

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseStaleness(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Staleness
		str  string
		err  bool
	}{
		{in: "", want: ActiveOnly(), str: "active"},
		{in: "active", want: ActiveOnly(), str: "active"},
		{in: " any ", want: AnyStaleness(), str: "any"},
		{in: "lag:0", want: MaxLag(0), str: "lag:0"},
		{in: "lag:10000", want: MaxLag(10000), str: "lag:10000"},
		{in: "age:1.5s", want: MaxAge(1500 * time.Millisecond), str: "age:1.5s"},
		{in: "age:0s", want: MaxAge(0), str: "age:0s"},
		{in: "lag:", err: true},
		{in: "lag:-1", err: true},
		{in: "lag:ten", err: true},
		{in: "lag:1.5", err: true},
		{in: "age:-1s", err: true},
		{in: "age:5", err: true},
		{in: "age:", err: true},
		{in: "ANY", err: true},
		{in: "stale", err: true},
		{in: "lag", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseStaleness(tc.in)
			if tc.err {
				require.Error(t, err)
				require.ErrorIs(t, err, ErrInvalidQuery)
				require.Contains(t, err.Error(), tc.in)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.str, got.String())
			back, err := ParseStaleness(got.String())
			require.NoError(t, err)
			require.Equal(t, got, back)

			txt, err := got.MarshalText()
			require.NoError(t, err)
			var un Staleness
			require.NoError(t, un.UnmarshalText(txt))
			require.Equal(t, got, un)
		})
	}
	require.Equal(t, MaxLag(0), MaxLag(-5))
	require.Equal(t, MaxAge(0), MaxAge(-time.Second))
}

func TestStalenessGate(t *testing.T) {
	const arl = 1000
	rep := func(role Role, lag int64, since time.Duration) ReplicaInfo {
		return ReplicaInfo{Store: "s", Partition: 1, Role: role, Position: 5000 - lag, End: 5000, Lag: lag, CaughtUpAgo: since}
	}
	for _, tc := range []struct {
		name  string
		info  ReplicaInfo
		bound Staleness
		ok    bool
	}{
		// A running active satisfies every bound, whatever its lag says.
		{"active/active", rep(RoleActive, 0, 0), ActiveOnly(), true},
		{"active/lag0 with lag", rep(RoleActive, 50000, time.Hour), MaxLag(0), true},
		{"active/age0", rep(RoleActive, 3, time.Hour), MaxAge(0), true},
		{"active/any", rep(RoleActive, 0, 0), AnyStaleness(), true},

		// Only a running active satisfies the default.
		{"standby caught up/active", rep(RoleStandby, 0, 0), ActiveOnly(), false},
		{"restoring caught up/active", rep(RoleRestoring, 0, 0), ActiveOnly(), false},
		{"warmup/active", rep(RoleWarmup, 0, 0), ActiveOnly(), false},

		// lag:N: within N and within the acceptable recovery lag.
		{"standby lag 10/lag:10", rep(RoleStandby, 10, time.Second), MaxLag(10), true},
		{"standby lag 11/lag:10", rep(RoleStandby, 11, time.Second), MaxLag(10), false},
		{"restoring lag 1000/lag:5000", rep(RoleRestoring, 1000, time.Minute), MaxLag(5000), true},
		{"restoring lag 1001/lag:5000 (beyond arl)", rep(RoleRestoring, 1001, time.Minute), MaxLag(5000), false},
		{"rebuilding from scratch/lag:max", rep(RoleRestoring, 1<<40, time.Hour), MaxLag(1 << 62), false},
		{"warmup lag 0/lag:0", rep(RoleWarmup, 0, 0), MaxLag(0), true},

		// age:D: caught up within D and within the acceptable recovery lag.
		{"standby 1s/age:2s", rep(RoleStandby, 5, time.Second), MaxAge(2 * time.Second), true},
		{"standby 3s/age:2s", rep(RoleStandby, 5, 3*time.Second), MaxAge(2 * time.Second), false},
		{"standby caught up now/age:0", rep(RoleStandby, 0, 0), MaxAge(0), true},
		{"standby beyond arl/age:1h", rep(RoleStandby, 2000, time.Second), MaxAge(time.Hour), false},

		// any: everything.
		{"rebuilding/any", rep(RoleRestoring, 1<<40, time.Hour), AnyStaleness(), true},
		{"warmup far/any", rep(RoleWarmup, 1<<40, time.Hour), AnyStaleness(), true},
		{"zero role/any", ReplicaInfo{}, AnyStaleness(), true},
		{"zero role/lag", ReplicaInfo{Lag: 1 << 40}, MaxLag(0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.ok, tc.bound.Allows(tc.info, arl))
			err := tc.bound.Check(tc.info, arl)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrTooStale)
			var se *StaleError
			require.True(t, errors.As(err, &se))
			require.Equal(t, tc.info.Role, se.Role)
			require.Equal(t, tc.info.Lag, se.Lag)
			require.Equal(t, tc.info.Position, se.Position)
			require.Equal(t, tc.bound, se.Bound)
			require.Contains(t, err.Error(), "staleness="+tc.bound.String())
		})
	}
}

func TestRoleText(t *testing.T) {
	for r := RoleActive; r <= RoleWarmup; r++ {
		b, err := r.MarshalText()
		require.NoError(t, err)
		var back Role
		require.NoError(t, back.UnmarshalText(b))
		require.Equal(t, r, back)
		require.Equal(t, string(b), r.String())
	}
	require.Equal(t, "active|restoring|standby|warmup", RoleActive.String()+"|"+RoleRestoring.String()+"|"+RoleStandby.String()+"|"+RoleWarmup.String())
	_, err := Role(0).MarshalText()
	require.Error(t, err)
	var r Role
	require.Error(t, r.UnmarshalText([]byte("leader")))
}

func TestSentinelFamilies(t *testing.T) {
	require.ErrorIs(t, ErrNotStarted, ErrNotRunning)
	require.ErrorIs(t, ErrShuttingDown, ErrNotRunning)
	require.NotErrorIs(t, ErrRebalancing, ErrNotRunning)
	require.NotErrorIs(t, ErrNotRunning, ErrNotStarted)
	ue := &UnavailableError{Store: "s", Partition: 2, Cause: ErrNotStarted}
	require.ErrorIs(t, ue, ErrNotAvailable)
	require.ErrorIs(t, ue, ErrNotStarted)
	require.ErrorIs(t, &BehindError{}, ErrBehind)
	require.ErrorIs(t, &StaleError{}, ErrTooStale)
}
