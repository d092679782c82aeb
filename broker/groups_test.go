package broker

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawMember drives the classic group protocol by hand, so that a test
// decides exactly when a member joins, syncs and heartbeats.
type rawMember struct {
	t          *testing.T
	cl         *kgo.Client
	group      string
	id         string
	generation int32
}

func newRawMember(t *testing.T, b *Broker, group string) *rawMember {
	return &rawMember{t: t, cl: newClient(t, b), group: group}
}

// join sends JoinGroup (twice for a new member: the first answer names its
// member ID) and returns the answer.
func (m *rawMember) join(ctx context.Context, meta []byte) (*kmsg.JoinGroupResponse, error) {
	for {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group = m.group
		req.MemberID = m.id
		req.SessionTimeoutMillis = 1000
		req.RebalanceTimeoutMillis = 10000
		req.ProtocolType = "consumer"
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name = "test"
		p.Metadata = meta
		req.Protocols = append(req.Protocols, p)
		resp, err := req.RequestWith(ctx, m.cl)
		if err != nil {
			return nil, err
		}
		if resp.ErrorCode == kerr.MemberIDRequired.Code {
			m.id = resp.MemberID
			continue
		}
		if resp.ErrorCode == 0 {
			m.generation = resp.Generation
		}
		return resp, nil
	}
}

func (m *rawMember) sync(ctx context.Context, assignments map[string][]byte) (*kmsg.SyncGroupResponse, error) {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group = m.group
	req.MemberID = m.id
	req.Generation = m.generation
	for id, a := range assignments {
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID = id
		ga.MemberAssignment = a
		req.GroupAssignment = append(req.GroupAssignment, ga)
	}
	return req.RequestWith(ctx, m.cl)
}

func (m *rawMember) heartbeat(ctx context.Context) int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group = m.group
	req.MemberID = m.id
	req.Generation = m.generation
	resp, err := req.RequestWith(ctx, m.cl)
	require.NoError(m.t, err)
	return resp.ErrorCode
}

// A SyncGroup whose group metadata exceeds message.max.bytes fails with
// the code Kafka returns; one that fits succeeds.
func TestSyncGroupOverMessageMaxBytesFails(t *testing.T) {
	b := start(t, Config{MessageMaxBytes: 4000})
	ctx := testCtx(t)
	for _, tc := range []struct {
		name     string
		size     int
		wantCode int16
	}{
		{"fits", 1000, 0},
		{"too large", 5000, kerr.UnknownServerError.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newRawMember(t, b, "size-"+tc.name)
			resp, err := m.join(ctx, []byte("meta"))
			require.NoError(t, err)
			require.Zero(t, resp.ErrorCode)
			require.Equal(t, m.id, resp.LeaderID)
			sresp, err := m.sync(ctx, map[string][]byte{m.id: bytes.Repeat([]byte{'a'}, tc.size)})
			require.NoError(t, err)
			require.Equal(t, tc.wantCode, sresp.ErrorCode)
		})
	}
}

// A member waiting in JoinGroup longer than its session timeout, for a
// member that is alive but slow to rejoin, is kept in the group, as Kafka
// keeps every member whose join is waiting.
func TestMemberWaitingInJoinIsNotExpired(t *testing.T) {
	b := start(t, Config{})
	ctx := testCtx(t)
	a := newRawMember(t, b, "wait")
	slow := newRawMember(t, b, "wait")

	// A stable group of both: a alone first, then slow joins and a rejoins
	// when its heartbeat says a rebalance is on.
	r, err := a.join(ctx, []byte("a"))
	require.NoError(t, err)
	require.Zero(t, r.ErrorCode)
	sr, err := a.sync(ctx, map[string][]byte{a.id: []byte("x")})
	require.NoError(t, err)
	require.Zero(t, sr.ErrorCode)
	slowJoined := make(chan *kmsg.JoinGroupResponse, 1)
	go func() { r, _ := slow.join(ctx, []byte("slow")); slowJoined <- r }()
	for a.heartbeat(ctx) != kerr.RebalanceInProgress.Code {
		time.Sleep(20 * time.Millisecond)
	}
	ra, err := a.join(ctx, []byte("a"))
	require.NoError(t, err)
	rs := <-slowJoined
	require.NotNil(t, rs)
	require.Zero(t, ra.ErrorCode)
	require.Zero(t, rs.ErrorCode)
	require.Equal(t, ra.Generation, rs.Generation)
	leader, follower := a, slow
	if ra.LeaderID == slow.id {
		leader, follower = slow, a
	}
	synced := make(chan error, 1)
	go func() { _, err := follower.sync(ctx, nil); synced <- err }()
	_, err = leader.sync(ctx, map[string][]byte{a.id: []byte("x"), slow.id: []byte("y")})
	require.NoError(t, err)
	require.NoError(t, <-synced)

	// a rejoins at once (a rebalance begins); slow keeps heartbeating and
	// rejoins only after three of a's session timeouts.
	done := make(chan *kmsg.JoinGroupResponse, 1)
	go func() { r, _ := a.join(ctx, []byte("a2")); done <- r }()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		code := slow.heartbeat(ctx)
		require.Contains(t, []int16{0, kerr.RebalanceInProgress.Code}, code, "slow stays a member while it heartbeats")
		time.Sleep(200 * time.Millisecond)
	}
	r, err = slow.join(ctx, []byte("slow2"))
	require.NoError(t, err)
	require.Zero(t, r.ErrorCode)
	ra = <-done
	require.NotNil(t, ra)
	require.Zero(t, ra.ErrorCode, "a's join is answered, not dropped")
	require.Equal(t, r.Generation, ra.Generation)
	var ids []string
	for _, m := range append(r.Members, ra.Members...) {
		ids = append(ids, m.MemberID)
	}
	require.Contains(t, ids, a.id, "a waited in JoinGroup past its session timeout and is still a member")
}
