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
	// rep is a replica whose lag is confirmed now and whose active
	// committed its input now, so only what a case changes matters.
	rep := func(role Role, lag int64, since time.Duration) ReplicaInfo {
		return ReplicaInfo{Store: "s", Partition: 1, Role: role, Position: 5000 - lag, End: 5000, Lag: lag, CaughtUpAgo: since}
	}
	with := func(i ReplicaInfo, f func(*ReplicaInfo)) ReplicaInfo { f(&i); return i }
	rebuilding := func(i *ReplicaInfo) { i.Rebuilding, i.Position, i.Lag, i.CaughtUpAgo = true, -1, -1, Unknown }
	lagUnknown := func(i *ReplicaInfo) { i.Lag, i.LagConfirmedAgo = -1, 12*time.Second }
	neverConfirmed := func(i *ReplicaInfo) { i.Lag, i.End, i.LagConfirmedAgo = -1, -1, Unknown }
	neverCaughtUp := func(i *ReplicaInfo) { i.CaughtUpAgo = Unknown }
	inputNever := func(i *ReplicaInfo) { i.InputCommittedAgo = Unknown }
	inputAgo := func(d time.Duration) func(*ReplicaInfo) { return func(i *ReplicaInfo) { i.InputCommittedAgo = d } }
	// unconfirmed is an active the group last confirmed 5s ago, as the
	// runtime reports one: its lag unknown since then, its age counted
	// from then.
	unconfirmed := rep(RoleUnconfirmed, 0, 5*time.Second)
	unconfirmed.Lag, unconfirmed.LagConfirmedAgo, unconfirmed.ContactAgo = -1, 5*time.Second, 5*time.Second
	for _, tc := range []struct {
		name  string
		info  ReplicaInfo
		bound Staleness
		ok    bool
		why   string // in the refusal's message
	}{
		// A running active satisfies every bound, whatever its lag says.
		{"active/active", rep(RoleActive, 0, 0), ActiveOnly(), true, ""},
		{"active/lag0 with lag", rep(RoleActive, 50000, time.Hour), MaxLag(0), true, ""},
		{"active/age0", rep(RoleActive, 3, time.Hour), MaxAge(0), true, ""},
		{"active/any", rep(RoleActive, 0, 0), AnyStaleness(), true, ""},
		{"active lag unknown/lag0", with(rep(RoleActive, 0, 0), lagUnknown), MaxLag(0), true, ""},

		// An active the group has not confirmed lately is no active for
		// bounds: no lag, and an age counted from its last contact.
		{"unconfirmed/active", unconfirmed, ActiveOnly(), false, "the group last confirmed this one 5s ago"},
		{"unconfirmed/lag:max", unconfirmed, MaxLag(1 << 62), false, "lag is unknown: the group last confirmed it as the partition's active 5s ago"},
		{"unconfirmed/age:4s", unconfirmed, MaxAge(4 * time.Second), false, "its age 5s exceeds 4s"},
		{"unconfirmed/age:6s", unconfirmed, MaxAge(6 * time.Second), true, ""},
		{"unconfirmed input older/age:6s", with(unconfirmed, inputAgo(7*time.Second)), MaxAge(6 * time.Second), false, "its age 7s exceeds 6s"},
		{"unconfirmed/any", unconfirmed, AnyStaleness(), true, ""},

		// Only a running active satisfies the default.
		{"standby caught up/active", rep(RoleStandby, 0, 0), ActiveOnly(), false, "only a running active"},
		{"restoring caught up/active", rep(RoleRestoring, 0, 0), ActiveOnly(), false, "only a running active"},
		{"warmup/active", rep(RoleWarmup, 0, 0), ActiveOnly(), false, "only a running active"},

		// lag:N: a known lag within N.
		{"standby lag 10/lag:10", rep(RoleStandby, 10, time.Second), MaxLag(10), true, ""},
		{"standby lag 11/lag:10", rep(RoleStandby, 11, time.Second), MaxLag(10), false, "its lag 11 exceeds 10"},
		{"warmup lag 0/lag:0", rep(RoleWarmup, 0, 0), MaxLag(0), true, ""},
		{"standby lag unknown/lag:max", with(rep(RoleStandby, 0, 0), lagUnknown), MaxLag(1 << 62), false, "lag is unknown: the broker last confirmed its changelog's end 12s ago"},
		{"standby never confirmed/lag:max", with(rep(RoleStandby, 0, 0), neverConfirmed), MaxLag(1 << 62), false, "never confirmed"},
		// The acceptable recovery lag (the runtime's default is 10000) no
		// longer caps the caller's bound.
		{"restoring lag 40000/lag:50000", rep(RoleRestoring, 40000, time.Minute), MaxLag(50000), true, ""},
		{"restoring far behind/lag:max", rep(RoleRestoring, 1<<40, time.Hour), MaxLag(1 << 62), true, ""},

		// age:D: a known age within D, the age being the older of the
		// last catch-up and the active's last input commit.
		{"standby 1s/age:2s", rep(RoleStandby, 5, time.Second), MaxAge(2 * time.Second), true, ""},
		{"standby 3s/age:2s", rep(RoleStandby, 5, 3*time.Second), MaxAge(2 * time.Second), false, "its age 3s exceeds 2s (last caught up 3s ago"},
		{"standby caught up now/age:0", rep(RoleStandby, 0, 0), MaxAge(0), true, ""},
		{"standby far behind/age:1h", rep(RoleStandby, 50000, time.Second), MaxAge(time.Hour), true, ""},
		{"standby never caught up/age:1h", with(rep(RoleStandby, 10, 0), neverCaughtUp), MaxAge(time.Hour), false, "never caught up"},
		{"standby of an active never seen committing/age:1h", with(rep(RoleStandby, 0, 0), inputNever), MaxAge(time.Hour), false, "never seen committing"},
		{"standby lag 0 of a dead active/age:5s", with(rep(RoleStandby, 0, 0), inputAgo(6*time.Second)), MaxAge(5 * time.Second), false, "active last committed its input 6s ago"},
		{"standby lag 0 of a live active/age:5s", with(rep(RoleStandby, 0, 0), inputAgo(4*time.Second)), MaxAge(5 * time.Second), true, ""},
		{"standby lag 0 of a dead active/lag:0", with(rep(RoleStandby, 0, 0), inputAgo(time.Hour)), MaxLag(0), true, ""},

		// A rebuilding replica answers only any, whatever the number.
		{"rebuilding/lag:max", with(rep(RoleRestoring, 0, 0), rebuilding), MaxLag(1 << 62), false, "rebuilding"},
		{"rebuilding lag 0/lag:max", with(rep(RoleStandby, 0, 0), func(i *ReplicaInfo) { i.Rebuilding = true }), MaxLag(1 << 62), false, "rebuilding"},
		{"rebuilding/age:max", with(rep(RoleStandby, 0, 0), func(i *ReplicaInfo) { i.Rebuilding = true }), MaxAge(1 << 62), false, "rebuilding"},
		{"rebuilding/any", with(rep(RoleRestoring, 0, 0), rebuilding), AnyStaleness(), true, ""},

		// any: everything.
		{"warmup far/any", rep(RoleWarmup, 1<<40, time.Hour), AnyStaleness(), true, ""},
		{"zero role/any", ReplicaInfo{}, AnyStaleness(), true, ""},
		{"zero role/lag", ReplicaInfo{Lag: 1 << 40}, MaxLag(0), false, "exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.ok, tc.bound.Allows(tc.info))
			err := tc.bound.Check(tc.info)
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
			require.Equal(t, tc.info.Rebuilding, se.Rebuilding)
			require.Equal(t, tc.bound, se.Bound)
			require.Contains(t, err.Error(), "staleness bound "+tc.bound.String())
			require.Contains(t, err.Error(), tc.why)
			if tc.info.Lag < 0 {
				require.Contains(t, err.Error(), "lag unknown")
			}
			if tc.info.Rebuilding {
				require.Contains(t, err.Error(), "no consistent position")
			}

			// Across the wire the refusal keeps what it says.
			st, w := toWireError(err)
			var back *StaleError
			require.ErrorAs(t, fromWireError(st, w), &back)
			require.Equal(t, *se, *back)
			require.Equal(t, err.Error(), back.Error())
		})
	}
}

func TestRoleText(t *testing.T) {
	for r := RoleActive; r <= lastRole; r++ {
		b, err := r.MarshalText()
		require.NoError(t, err)
		var back Role
		require.NoError(t, back.UnmarshalText(b))
		require.Equal(t, r, back)
		require.Equal(t, string(b), r.String())
	}
	require.Equal(t, "active|restoring|standby|warmup|unconfirmed",
		RoleActive.String()+"|"+RoleRestoring.String()+"|"+RoleStandby.String()+"|"+RoleWarmup.String()+"|"+RoleUnconfirmed.String())
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
