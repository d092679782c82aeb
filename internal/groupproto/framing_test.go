package groupproto

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/task"
)

func sampleGroupSubscription() GroupSubscription {
	return GroupSubscription{
		Framing:         FramingConsumer,
		Topics:          []string{"app-repartition", "events", "left"},
		OwnedPartitions: map[string][]int32{"events": {1, 4}, "left": {0}},
		Info:            sampleSubscription(),
	}
}

func sampleGroupAssignment() GroupAssignment {
	return GroupAssignment{
		Framing:    FramingConsumer,
		Partitions: map[string][]int32{"left": {1}, "right": {1}, "events": {1}},
		Info:       sampleAssignment(),
	}
}

func TestGroupSubscriptionRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    GroupSubscription
	}{
		{"consumer", sampleGroupSubscription()},
		{"consumer, nothing owned", GroupSubscription{Framing: FramingConsumer, Topics: []string{"in"}, Info: SubscriptionInfo{ProcessID: "p"}}},
		{"consumer, empty", GroupSubscription{Framing: FramingConsumer}},
		{"bare", GroupSubscription{Framing: FramingBare, Info: sampleSubscription()}},
	} {
		for v := MinSupportedVersion; v <= LatestSupportedVersion; v++ {
			t.Run(fmt.Sprintf("%s/v%d", tc.name, v), func(t *testing.T) {
				b, err := EncodeGroupSubscription(tc.g, v)
				require.NoError(t, err)
				got, err := DecodeGroupSubscription(b)
				require.NoError(t, err)
				want := tc.g
				want.Info.Version, want.Info.LatestSupportedVersion = v, LatestSupportedVersion
				if v < 2 {
					want.Info.ShutdownReason = ""
				}
				require.Equal(t, want, got)
				again, err := EncodeGroupSubscription(got, v)
				require.NoError(t, err)
				require.Equal(t, b, again)

				inner, err := EncodeSubscription(tc.g.Info, v)
				require.NoError(t, err)
				if tc.g.Framing == FramingBare {
					// Exactly what builds before the framing sent.
					require.Equal(t, inner, b)
					return
				}
				// Any consumer-protocol decoder sees the topics, the owned
				// partitions and Eddy's bytes as user data.
				var m kmsg.ConsumerMemberMetadata
				require.NoError(t, m.ReadFrom(b))
				require.Equal(t, consumerMetadataVersion, m.Version)
				require.Equal(t, tc.g.Topics, nilIfEmpty(m.Topics))
				owned := map[string][]int32{}
				for _, op := range m.OwnedPartitions {
					owned[op.Topic] = op.Partitions
				}
				require.Equal(t, tc.g.OwnedPartitions, nilIfEmptyMap(owned))
				require.Equal(t, inner, m.UserData)
			})
		}
	}
}

func TestGroupAssignmentRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    GroupAssignment
	}{
		{"consumer", sampleGroupAssignment()},
		{"consumer, no partitions", GroupAssignment{Framing: FramingConsumer, Info: AssignmentInfo{Standby: []task.ID{tid(0, 1)}}}},
		{"consumer, probing", GroupAssignment{Framing: FramingConsumer, Info: AssignmentInfo{ErrorCode: ErrVersionProbing}}},
		{"bare", GroupAssignment{Framing: FramingBare, Info: sampleAssignment()}},
	} {
		for v := MinSupportedVersion; v <= LatestSupportedVersion; v++ {
			t.Run(fmt.Sprintf("%s/v%d", tc.name, v), func(t *testing.T) {
				b, err := EncodeGroupAssignment(tc.g, v)
				require.NoError(t, err)
				got, err := DecodeGroupAssignment(b)
				require.NoError(t, err)
				want := tc.g
				want.Info = inVersion(want.Info, v)
				require.Equal(t, want, got)
				again, err := EncodeGroupAssignment(got, v)
				require.NoError(t, err)
				require.Equal(t, b, again)

				inner, err := EncodeAssignment(tc.g.Info, v)
				require.NoError(t, err)
				if tc.g.Framing == FramingBare {
					require.Equal(t, inner, b)
					return
				}
				var a kmsg.ConsumerMemberAssignment
				require.NoError(t, a.ReadFrom(b))
				parts := map[string][]int32{}
				for _, at := range a.Topics {
					parts[at.Topic] = at.Partitions
				}
				require.Equal(t, tc.g.Partitions, nilIfEmptyMap(parts))
				require.True(t, slices.IsSortedFunc(a.Topics, func(x, y kmsg.ConsumerMemberAssignmentTopic) int {
					return strings.Compare(x.Topic, y.Topic)
				}))
				require.Equal(t, inner, a.UserData)
			})
		}
	}
}

func TestGroupDecodeMalformed(t *testing.T) {
	sub, err := EncodeGroupSubscription(sampleGroupSubscription(), LatestSupportedVersion)
	require.NoError(t, err)
	asg, err := EncodeGroupAssignment(sampleGroupAssignment(), LatestSupportedVersion)
	require.NoError(t, err)

	consumerSub := func(edit func(*kmsg.ConsumerMemberMetadata)) []byte {
		var m kmsg.ConsumerMemberMetadata
		require.NoError(t, m.ReadFrom(sub))
		edit(&m)
		return m.AppendTo(nil)
	}
	consumerAsg := func(edit func(*kmsg.ConsumerMemberAssignment)) []byte {
		var a kmsg.ConsumerMemberAssignment
		require.NoError(t, a.ReadFrom(asg))
		edit(&a)
		return a.AppendTo(nil)
	}

	subCases := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"trailing byte", append(slices.Clone(sub), 0)},
		{"negative version", consumerSub(func(m *kmsg.ConsumerMemberMetadata) { m.Version = -1 })},
		{"user data of another protocol", consumerSub(func(m *kmsg.ConsumerMemberMetadata) { m.UserData = []byte("sticky user data") })},
		{"no user data", consumerSub(func(m *kmsg.ConsumerMemberMetadata) { m.UserData = nil })},
		{"user data with a trailing byte", consumerSub(func(m *kmsg.ConsumerMemberMetadata) { m.UserData = append(m.UserData, 0) })},
		{"topic twice", consumerSub(func(m *kmsg.ConsumerMemberMetadata) { m.Topics = []string{"a", "a"} })},
		{"empty topic", consumerSub(func(m *kmsg.ConsumerMemberMetadata) { m.Topics = []string{""} })},
		{"negative owned partition", consumerSub(func(m *kmsg.ConsumerMemberMetadata) {
			m.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "a", Partitions: []int32{-1}}}
		})},
		{"bare, malformed", []byte{0xED, 0xD1, 0, 0, 0, 1, 0, 0, 0, 1, 0xff}},
	}
	for _, tc := range subCases {
		t.Run("subscription/"+tc.name, func(t *testing.T) {
			_, err := DecodeGroupSubscription(tc.b)
			require.ErrorIs(t, err, ErrMalformed)
		})
	}
	asgCases := []struct {
		name string
		b    []byte
	}{
		{"trailing byte", append(slices.Clone(asg), 0)},
		{"negative version", consumerAsg(func(a *kmsg.ConsumerMemberAssignment) { a.Version = -2 })},
		{"user data of another protocol", consumerAsg(func(a *kmsg.ConsumerMemberAssignment) { a.UserData = []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10} })},
		{"partitions without user data", consumerAsg(func(a *kmsg.ConsumerMemberAssignment) { a.UserData = nil })},
		{"partition twice", consumerAsg(func(a *kmsg.ConsumerMemberAssignment) {
			a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "a", Partitions: []int32{3, 3}}}
		})},
		{"topic twice", consumerAsg(func(a *kmsg.ConsumerMemberAssignment) {
			a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "a"}, {Topic: "a"}}
		})},
	}
	for _, tc := range asgCases {
		t.Run("assignment/"+tc.name, func(t *testing.T) {
			_, err := DecodeGroupAssignment(tc.b)
			require.ErrorIs(t, err, ErrMalformed)
		})
	}
	// Every truncation of a valid encoding is an error, never a panic.
	for n := range len(sub) {
		_, err := DecodeGroupSubscription(sub[:n])
		require.Error(t, err, "subscription cut at %d", n)
	}
	for n := range len(asg) {
		_, err := DecodeGroupAssignment(asg[:n])
		require.Error(t, err, "assignment cut at %d", n)
	}

	t.Run("an empty consumer assignment is no tasks", func(t *testing.T) {
		// What a broker may stand in for an empty assignment.
		var a kmsg.ConsumerMemberAssignment
		g, err := DecodeGroupAssignment(a.AppendTo(nil))
		require.NoError(t, err)
		require.Equal(t, GroupAssignment{Framing: FramingConsumer}, g)
	})
	t.Run("a later consumer protocol version may append fields", func(t *testing.T) {
		var m kmsg.ConsumerMemberMetadata
		require.NoError(t, m.ReadFrom(sub))
		m.Version = maxStrictConsumerVersion + 1
		b := append(m.AppendTo(nil), 0xAB, 0xCD)
		g, err := DecodeGroupSubscription(b)
		require.NoError(t, err)
		require.Equal(t, sampleGroupSubscription().Info.Tasks, g.Info.Tasks)
	})
	t.Run("a newer Eddy version inside the framing is reported with its framing", func(t *testing.T) {
		b, err := formatV4().encodeGroupSubscription(sampleGroupSubscription(), 4)
		require.NoError(t, err)
		g, err := DecodeGroupSubscription(b)
		var uv *UnsupportedVersionError
		require.ErrorAs(t, err, &uv)
		require.Equal(t, int32(4), uv.Version)
		require.Equal(t, FramingConsumer, g.Framing)
		require.Equal(t, sampleGroupSubscription().Topics, g.Topics)
	})
}

// formatV4 is a build one version ahead, whose version 4 is version 3's body.
func formatV4() *format {
	return &format{min: 1, latest: 4, codecs: map[int32]codec{1: v1Codec, 2: v2Codec, 3: v3Codec, 4: v3Codec}}
}

// Members of builds before the consumer framing send and read the bare
// format, whose codec this build still has unchanged. A rolling upgrade
// works both ways: a new leader reads old members and answers each in its
// own framing; old leaders read members that set BareFraming.
func TestFramingRollingUpgrade(t *testing.T) {
	t.Run("new leader, old member", func(t *testing.T) {
		g := newFixture(t, 4, 2)
		nu := g.add("m-1", "proc-1", "a:1", defaultFormat) // leader
		old := g.add("m-2", "proc-2", "b:1", defaultFormat)
		old.b.framing = FramingBare
		got := g.rebalance()
		requireWholeDisjoint(t, g.tasks, got)

		// The old member's join metadata is the bare encoding, and what
		// it was sent is readable by the bare decoder old builds run.
		_, err := DecodeSubscription(old.join)
		require.NoError(t, err)
		a, err := DecodeAssignment(old.raw)
		require.NoError(t, err)
		require.Equal(t, old.last(), a)
		require.NotEmpty(t, a.Active)

		// The new member got the consumer framing, listing the
		// partitions it consumes.
		var ca kmsg.ConsumerMemberAssignment
		require.NoError(t, ca.ReadFrom(nu.raw))
		listed := map[string][]int32{}
		for _, at := range ca.Topics {
			listed[at.Topic] = at.Partitions
		}
		require.Equal(t, got[nu.id], listed)
		_, err = DecodeAssignment(nu.raw)
		require.ErrorIs(t, err, ErrMalformed, "an old build could not read it")
	})

	t.Run("old leader, new member with BareFraming", func(t *testing.T) {
		g := newFixture(t, 4, 0)
		nu := g.add("m-2", "proc-2", "", defaultFormat)
		// Without BareFraming an old leader cannot read the member.
		_, err := DecodeSubscription(nu.b.JoinGroupMetadata(nil, nil, 0))
		require.ErrorIs(t, err, ErrMalformed)

		nu.b.framing = FramingBare
		s, err := DecodeSubscription(nu.b.JoinGroupMetadata(nil, nil, 0))
		require.NoError(t, err)
		require.Equal(t, "proc-2", s.ProcessID)
		// An old leader answers in the bare format.
		enc, err := EncodeAssignment(AssignmentInfo{Active: []task.ID{tid(0, 1), tid(0, 3)}}, LatestSupportedVersion)
		require.NoError(t, err)
		parts, err := nu.b.ParseSyncAssignment(enc)
		require.NoError(t, err)
		require.Equal(t, map[string][]int32{"left": {1, 3}, "right": {1, 3}}, parts)
	})
}

// The size check counts the full bytes sent to and stored by the
// coordinator, framing included.
func TestBalancerSizeLimitCountsFraming(t *testing.T) {
	g := newFixture(t, 8, 8)
	for i := range 3 {
		g.add(fmt.Sprintf("m-%d", i), fmt.Sprintf("proc-%d", i), fmt.Sprintf("h%d:1", i), defaultFormat)
	}
	leader := g.members[0].b
	var join []kmsg.JoinGroupResponseMember
	subBytes, innerSub := 0, 0
	for _, m := range g.members {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.id
		jm.ProtocolMetadata = m.b.JoinGroupMetadata(nil, nil, 1)
		join = append(join, jm)
		subBytes += len(jm.ProtocolMetadata)
		gs, err := DecodeGroupSubscription(jm.ProtocolMetadata)
		require.NoError(t, err)
		inner, err := EncodeSubscription(gs.Info, LatestSupportedVersion)
		require.NoError(t, err)
		innerSub += len(inner)
	}
	require.Greater(t, subBytes, innerSub)
	counts := map[string]int32{"left": 8, "right": 8, "events": 8}

	balance := func(limit int) (kgo.IntoSyncAssignment, error) {
		leader.cfg.MaxGroupMetadataBytes = limit
		mb, _, err := leader.MemberBalancer(join)
		require.NoError(t, err)
		return mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(counts)
	}
	plan, err := balance(assignor.DefaultMaxGroupMetadataBytes)
	require.NoError(t, err)
	asgBytes := 0
	for _, a := range plan.IntoSyncAssignment() {
		asgBytes += len(a.MemberAssignment)
	}
	total := subBytes + asgBytes + groupMetadataOverhead*len(join)

	_, err = balance(total)
	require.NoError(t, err, "a group record of exactly the limit fits")
	_, err = balance(total - 1)
	var tooLarge *assignor.GroupMetadataTooLargeError
	require.ErrorAs(t, err, &tooLarge)
	require.Equal(t, assignor.GroupMetadataTooLargeError{Bytes: total, Subscriptions: subBytes, Assignments: asgBytes,
		Members: 3, Tasks: 16, Limit: total - 1}, *tooLarge)
}

func FuzzDecodeGroupSubscription(f *testing.F) {
	for _, g := range []GroupSubscription{sampleGroupSubscription(), {}, {Framing: FramingBare, Info: sampleSubscription()}} {
		for v := MinSupportedVersion; v <= LatestSupportedVersion; v++ {
			b, err := EncodeGroupSubscription(g, v)
			require.NoError(f, err)
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := DecodeGroupSubscription(b)
		if err != nil {
			requireDecodeError(t, err)
			return
		}
		enc, err := EncodeGroupSubscription(g, g.Info.Version)
		require.NoError(t, err)
		g2, err := DecodeGroupSubscription(enc)
		require.NoError(t, err)
		g.Info.LatestSupportedVersion = LatestSupportedVersion
		require.Equal(t, g, g2)
	})
}

func FuzzDecodeGroupAssignment(f *testing.F) {
	for _, g := range []GroupAssignment{sampleGroupAssignment(), {}, {Framing: FramingBare, Info: sampleAssignment()},
		{Info: AssignmentInfo{ErrorCode: ErrShutdownApplication, ShutdownReason: "poison record"}}} {
		for v := MinSupportedVersion; v <= LatestSupportedVersion; v++ {
			b, err := EncodeGroupAssignment(g, v)
			require.NoError(f, err)
			f.Add(b)
		}
	}
	var empty kmsg.ConsumerMemberAssignment
	f.Add(empty.AppendTo(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := DecodeGroupAssignment(b)
		if err != nil {
			requireDecodeError(t, err)
			return
		}
		if g.Framing == FramingConsumer && g.Info.Version == 0 {
			// No user data: an empty assignment.
			require.Empty(t, g.Partitions)
			require.Equal(t, AssignmentInfo{}, g.Info)
			return
		}
		enc, err := EncodeGroupAssignment(g, g.Info.Version)
		require.NoError(t, err)
		g2, err := DecodeGroupAssignment(enc)
		require.NoError(t, err)
		g.Info.LatestSupportedVersion = LatestSupportedVersion
		require.Equal(t, g, g2)
	})
}

func requireDecodeError(t *testing.T, err error) {
	t.Helper()
	var uv *UnsupportedVersionError
	if !errors.Is(err, ErrMalformed) && !errors.As(err, &uv) {
		t.Fatalf("unexpected error type %T: %v", err, err)
	}
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func nilIfEmptyMap[K comparable, V any](m map[K]V) map[K]V {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
