package groupproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/task"
)

// formatV1 is a build that speaks only version 1, as Eddy did before
// version 2 added the shutdown reason: the older side of every mixed-version
// test below.
var formatV1 = &format{min: 1, latest: 1, codecs: map[int32]codec{1: v1Codec}}

// formatV2 is a build before version 3 dropped the host maps from
// assignments.
var formatV2 = &format{min: 1, latest: 2, codecs: map[int32]codec{1: v1Codec, 2: v2Codec}}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func sampleSubscription() SubscriptionInfo {
	return SubscriptionInfo{
		ProcessID: "6f1c2a9e-process",
		Endpoint:  "10.0.0.7:8080",
		Capacity:  3,
		Tags:      map[string]string{"zone": "eu-1a", "rack": "r7"},
		Tasks: []TaskOffsets{
			{Task: tid(0, 1), Role: RoleActive, Positions: map[string]int64{"app-counts-changelog": 1234, "app-other-changelog": 0}},
			{Task: tid(0, 3), Role: RoleStandby, Positions: map[string]int64{"app-counts-changelog": 1 << 40}},
			{Task: tid(2, 0), Role: RoleNone, Positions: map[string]int64{"app-x-changelog": -1}},
			{Task: tid(3, 7), Role: RoleNone},
		},
		OwnedActive:  []task.ID{tid(0, 1), tid(1, 1)},
		OwnedStandby: []task.ID{tid(0, 3)},
	}
}

func sampleAssignment() AssignmentInfo {
	return AssignmentInfo{
		ErrorCode:              ErrNone,
		Active:                 []task.ID{tid(0, 1), tid(1, 1)},
		Standby:                []task.ID{tid(0, 3)},
		Warmup:                 []task.ID{tid(0, 5)},
		NextProbingRebalanceMs: 1_767_225_600_000,
		PartitionsByHost: map[string][]task.ID{
			"10.0.0.7:8080": {tid(0, 1), tid(1, 1)},
			"10.0.0.8:8080": {tid(0, 0), tid(0, 3)},
		},
		StandbyPartitionsByHost: map[string][]task.ID{
			"10.0.0.7:8080": {tid(0, 3)},
		},
		WarmupPartitionsByHost: map[string][]task.ID{
			"10.0.0.7:8080": {tid(0, 5)},
		},
		Epoch: 1_767_225_600_000_000_123,
	}
}

// inVersion is a as it decodes after encoding in version v: what the
// version does not carry is dropped.
func inVersion(a AssignmentInfo, v int32) AssignmentInfo {
	a.Version, a.LatestSupportedVersion = v, LatestSupportedVersion
	if v < 2 {
		a.ShutdownReason = ""
	}
	if v < 3 {
		a.Epoch = 0
	} else {
		a.PartitionsByHost, a.StandbyPartitionsByHost, a.WarmupPartitionsByHost = nil, nil, nil
	}
	return a
}

func TestSubscriptionRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    SubscriptionInfo
	}{
		{"full", sampleSubscription()},
		{"empty", SubscriptionInfo{}},
		{"unicode", SubscriptionInfo{ProcessID: "prøcess-ü", Endpoint: "[::1]:9", Tags: map[string]string{"zöne": ""}}},
		{"shutdown", SubscriptionInfo{ProcessID: "p", ShutdownReason: "task 0_1 failed: panic: boom"}},
		{"owned both ways, owned without a directory", SubscriptionInfo{ProcessID: "p",
			Tasks:        []TaskOffsets{{Task: tid(0, 0), Role: RoleActive}, {Task: tid(0, 1), Role: RoleStandby}},
			OwnedActive:  []task.ID{tid(0, 0), tid(0, 1), tid(5, 5)},
			OwnedStandby: []task.ID{tid(0, 1), tid(6, 6)}}},
		{"topics with no common affix", topicsSub("a", "b-changelog", "zz")},
		{"one topic", topicsSub("app-counts-changelog")},
		{"affixes that would overlap", topicsSub("a", "aa", "aaa", "ba")},
		{"common suffix only", topicsSub("a", "xa", "ya")},
		{"prefix of another", topicsSub("app-x-changelog", "app-x-changelog-changelog")},
	} {
		for v := MinSupportedVersion; v <= LatestSupportedVersion; v++ {
			t.Run(fmt.Sprintf("%s/v%d", tc.name, v), func(t *testing.T) {
				b, err := EncodeSubscription(tc.s, v)
				require.NoError(t, err)
				got, err := DecodeSubscription(b)
				require.NoError(t, err)
				want := tc.s
				want.Version, want.LatestSupportedVersion = v, LatestSupportedVersion
				if v < 2 {
					want.ShutdownReason = "" // version 1 cannot carry it
				}
				require.Equal(t, want, got)

				again, err := EncodeSubscription(got, v)
				require.NoError(t, err)
				require.Equal(t, b, again)
			})
		}
	}
}

// topicsSub holds one task directory with a position in each of topics.
func topicsSub(topics ...string) SubscriptionInfo {
	s := SubscriptionInfo{ProcessID: "p"}
	for i, t := range topics {
		s.Tasks = append(s.Tasks, TaskOffsets{Task: tid(i, 0), Role: RoleStandby, Positions: map[string]int64{t: int64(i)}})
	}
	return s
}

// Version 3 subscriptions hold the same information in fewer bytes.
func TestSubscriptionV3IsSmaller(t *testing.T) {
	s := SubscriptionInfo{ProcessID: "process-00042", Endpoint: "10.0.0.42:8080", Capacity: 1}
	for sub := range 10 {
		for p := range 3 {
			id := tid(sub, int32(100*p+sub))
			s.Tasks = append(s.Tasks, TaskOffsets{Task: id, Role: RoleStandby,
				Positions: map[string]int64{fmt.Sprintf("wordcount-app-store-%d-changelog", sub): 1 << 20}})
			s.OwnedStandby = append(s.OwnedStandby, id)
		}
	}
	v2 := must(EncodeSubscription(s, 2))
	v3 := must(EncodeSubscription(s, 3))
	t.Logf("30 task directories over 10 changelogs: v2 %d B, v3 %d B", len(v2), len(v3))
	require.Less(t, len(v3), len(v2)*2/3)
	got, err := DecodeSubscription(v3)
	require.NoError(t, err)
	require.Equal(t, s.Tasks, got.Tasks)
	require.Equal(t, sortedIDs(s.OwnedStandby), got.OwnedStandby)
}

func TestSubscriptionEncodingIsDeterministic(t *testing.T) {
	a := sampleSubscription()
	b := sampleSubscription()
	// Same content, other order: the bytes must not change, or the broker
	// would see changed metadata and rebalance for nothing.
	b.Tasks[0], b.Tasks[2] = b.Tasks[2], b.Tasks[0]
	b.OwnedActive[0], b.OwnedActive[1] = b.OwnedActive[1], b.OwnedActive[0]
	for v := MinSupportedVersion; v <= LatestSupportedVersion; v++ {
		var first []byte
		for i := range 20 {
			s := a
			if i%2 == 1 {
				s = b
			}
			enc, err := EncodeSubscription(s, v)
			require.NoError(t, err)
			if first == nil {
				first = enc
			}
			require.Equal(t, first, enc, "v%d", v)
		}
	}
}

func TestAssignmentRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    AssignmentInfo
	}{
		{"full", sampleAssignment()},
		{"empty", AssignmentInfo{}},
		{"probing", AssignmentInfo{ErrorCode: ErrVersionProbing}},
		{"shutdown", AssignmentInfo{ErrorCode: ErrShutdownApplication, ShutdownReason: "poison record"}},
		{"negative epoch", AssignmentInfo{Active: []task.ID{tid(0, 0)}, Epoch: -7}},
	} {
		for v := MinSupportedVersion; v <= LatestSupportedVersion; v++ {
			t.Run(fmt.Sprintf("%s/v%d", tc.name, v), func(t *testing.T) {
				b, err := EncodeAssignment(tc.a, v)
				require.NoError(t, err)
				got, err := DecodeAssignment(b)
				require.NoError(t, err)
				require.Equal(t, inVersion(tc.a, v), got)
			})
		}
	}
}

// Version 3 assignments do not grow with the group: the same member's
// assignment encodes to the same bytes whatever the other members hold.
func TestAssignmentV3SizeIsTheMembersOwn(t *testing.T) {
	a := sampleAssignment()
	small, err := EncodeAssignment(a, 3)
	require.NoError(t, err)
	for h := range 500 {
		a.PartitionsByHost[fmt.Sprintf("10.0.%d.%d:8080", h/256, h%256)] = []task.ID{tid(1, int32(h))}
	}
	big, err := EncodeAssignment(a, 3)
	require.NoError(t, err)
	require.Equal(t, small, big)
	v2, err := EncodeAssignment(a, 2)
	require.NoError(t, err)
	require.Greater(t, len(v2), len(big)+500*8)
}

func TestDecodeMalformed(t *testing.T) {
	good, err := EncodeSubscription(sampleSubscription(), 1)
	require.NoError(t, err)
	goodA, err := EncodeAssignment(sampleAssignment(), 1)
	require.NoError(t, err)
	goodA3, err := EncodeAssignment(sampleAssignment(), 3)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"short header", []byte{0xED, 0xD1, 0, 0, 0, 1}},
		{"no magic", []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}},
		{"version above sender's latest", []byte{0xED, 0xD1, 0, 0, 0, 2, 0, 0, 0, 1}},
		{"header only", []byte{0xED, 0xD1, 0, 0, 0, 1, 0, 0, 0, 1}},
		{"trailing byte", append(append([]byte{}, good...), 0)},
		{"huge length", []byte{0xED, 0xD1, 0, 0, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSubscription(tc.b)
			require.ErrorIs(t, err, ErrMalformed)
			_, err = DecodeAssignment(tc.b)
			require.ErrorIs(t, err, ErrMalformed)
		})
	}
	// Every truncation of a valid encoding is an error, never a panic.
	for n := range len(good) {
		_, err := DecodeSubscription(good[:n])
		require.Error(t, err, "subscription cut at %d", n)
	}
	for n := range len(goodA) {
		_, err := DecodeAssignment(goodA[:n])
		require.Error(t, err, "assignment cut at %d", n)
	}
	for n := range len(goodA3) {
		_, err := DecodeAssignment(goodA3[:n])
		require.Error(t, err, "v3 assignment cut at %d", n)
	}
	_, err = DecodeAssignment(append(append([]byte{}, goodA3...), 0))
	require.ErrorIs(t, err, ErrMalformed)
}

func TestVersionNegotiation(t *testing.T) {
	sub := sampleSubscription()

	t.Run("encoding an unsupported version fails", func(t *testing.T) {
		_, err := EncodeSubscription(sub, LatestSupportedVersion+1)
		var uv *UnsupportedVersionError
		require.ErrorAs(t, err, &uv)
		_, err = EncodeAssignment(AssignmentInfo{}, 0)
		require.ErrorAs(t, err, &uv)
	})

	t.Run("a v1 build reads the header of a v2 subscription", func(t *testing.T) {
		b, err := defaultFormat.encodeSubscription(sub, 2)
		require.NoError(t, err)
		got, err := formatV1.decodeSubscription(b)
		var uv *UnsupportedVersionError
		require.ErrorAs(t, err, &uv)
		require.Equal(t, UnsupportedVersionError{Version: 2, LatestSupported: 3, MinSupported: 1, MaxSupported: 1}, *uv)
		require.Equal(t, SubscriptionInfo{Version: 2, LatestSupportedVersion: 3}, got)
	})

	t.Run("a v3 build reads v1, v2 and v3", func(t *testing.T) {
		for _, v := range []int32{1, 2, 3} {
			b, err := defaultFormat.encodeSubscription(sub, v)
			require.NoError(t, err)
			got, err := defaultFormat.decodeSubscription(b)
			require.NoError(t, err)
			require.Equal(t, v, got.Version)
			require.Equal(t, int32(3), got.LatestSupportedVersion)
			require.Equal(t, sub.Tasks, got.Tasks)
		}
		// A v3 sender downgraded to v1 is readable by v1 builds.
		b, err := defaultFormat.encodeSubscription(sub, 1)
		require.NoError(t, err)
		got, err := formatV1.decodeSubscription(b)
		require.NoError(t, err)
		require.Equal(t, int32(3), got.LatestSupportedVersion)
	})

	t.Run("a v2 build reads v2 assignments from a v3 leader, host maps included", func(t *testing.T) {
		b, err := defaultFormat.encodeAssignment(sampleAssignment(), 2)
		require.NoError(t, err)
		got, err := formatV2.decodeAssignment(b)
		require.NoError(t, err)
		want := inVersion(sampleAssignment(), 2)
		require.Equal(t, want, got)
		require.NotEmpty(t, got.PartitionsByHost)
		_, err = formatV2.decodeAssignment(must(defaultFormat.encodeAssignment(sampleAssignment(), 3)))
		var uv *UnsupportedVersionError
		require.ErrorAs(t, err, &uv)
		require.Equal(t, int32(3), uv.Version)
	})

	t.Run("a v1 member given a v2 assignment reports it", func(t *testing.T) {
		b, err := defaultFormat.encodeAssignment(sampleAssignment(), 2)
		require.NoError(t, err)
		got, err := formatV1.decodeAssignment(b)
		var uv *UnsupportedVersionError
		require.ErrorAs(t, err, &uv)
		require.Equal(t, int32(2), got.Version)
	})

	t.Run("leader encodes for the lowest", func(t *testing.T) {
		require.Equal(t, int32(1), negotiate(2, []int32{2, 1, 2}))
		require.Equal(t, int32(2), negotiate(2, []int32{2, 3}))
		require.Equal(t, int32(1), negotiate(1, []int32{2}))
		require.Equal(t, int32(2), negotiate(2, nil))
		require.Equal(t, int32(2), negotiate(3, []int32{3, 2, 3}))
	})
}

func FuzzDecodeSubscription(f *testing.F) {
	for _, s := range []SubscriptionInfo{sampleSubscription(), {}} {
		b, err := EncodeSubscription(s, 1)
		require.NoError(f, err)
		f.Add(b)
	}
	b, _ := defaultFormat.encodeSubscription(SubscriptionInfo{ShutdownReason: "poison record"}, 2)
	f.Add(b)
	for _, s := range []SubscriptionInfo{sampleSubscription(), topicsSub("a", "xa", "ya"), {ShutdownReason: "poison record"}} {
		f.Add(must(defaultFormat.encodeSubscription(s, 3)))
	}
	f.Add([]byte{})
	f.Add([]byte{0xED, 0xD1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSubscription(b)
		if err != nil {
			var uv *UnsupportedVersionError
			if !errors.Is(err, ErrMalformed) && !errors.As(err, &uv) {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			return
		}
		// Whatever decodes re-encodes to something that decodes equal,
		// the sender's latest version aside (the header carries ours).
		enc, err := EncodeSubscription(s, s.Version)
		require.NoError(t, err)
		s2, err := DecodeSubscription(enc)
		require.NoError(t, err)
		s.LatestSupportedVersion = LatestSupportedVersion
		require.Equal(t, s, s2)
	})
}

func FuzzDecodeAssignment(f *testing.F) {
	for _, a := range []AssignmentInfo{sampleAssignment(), {}, {ErrorCode: ErrVersionProbing}} {
		b, err := EncodeAssignment(a, 1)
		require.NoError(f, err)
		f.Add(b)
	}
	b, _ := defaultFormat.encodeAssignment(AssignmentInfo{ErrorCode: ErrShutdownApplication, ShutdownReason: "poison record"}, 2)
	f.Add(b)
	for _, a := range []AssignmentInfo{sampleAssignment(), {Epoch: 1}, {ErrorCode: ErrShutdownApplication, ShutdownReason: "poison record"}} {
		f.Add(must(defaultFormat.encodeAssignment(a, 3)))
	}
	f.Add(binary.BigEndian.AppendUint32([]byte{0xED, 0xD1, 0, 0, 0, 1}, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAssignment(b)
		if err != nil {
			var uv *UnsupportedVersionError
			if !errors.Is(err, ErrMalformed) && !errors.As(err, &uv) {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			return
		}
		enc, err := EncodeAssignment(a, a.Version)
		require.NoError(t, err)
		a2, err := DecodeAssignment(enc)
		require.NoError(t, err)
		a.LatestSupportedVersion = LatestSupportedVersion
		require.Equal(t, a, a2)
	})
}
