package broker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinedMember polls cl, a group member, until the group is stable with it
// as its only member, and returns the group as described.
func joinedMember(ctx context.Context, t *testing.T, cl *kgo.Client, adm *kadm.Client, group string) kadm.DescribedGroup {
	t.Helper()
	for {
		poll, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		cl.PollFetches(poll)
		cancel()
		require.NoError(t, ctx.Err(), "the member never joined")
		groups, err := adm.DescribeGroups(ctx, group)
		if err == nil && groups[group].State == "Stable" && len(groups[group].Members) == 1 {
			return groups[group]
		}
	}
}

// TestMembersOutliveABrokerKill checks that a broker restarted on the data
// of one that was killed (no Close) still has the group's members, with
// their IDs, generation and partitions, as Kafka reloads a group from its
// offsets topic: the member's next heartbeat is answered as if nothing had
// happened, and nobody else is given its partitions.
func TestMembersOutliveABrokerKill(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	b1 := start(t, Config{DataDir: dir, Partitions: 2})
	createTopic(ctx, t, b1, "in", 2, nil)
	member := newClient(t, b1, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"), kgo.SessionTimeout(time.Minute))
	before := joinedMember(ctx, t, member, kadm.NewClient(newClient(t, b1)), "g")
	id := before.Members[0].MemberID
	held, _ := before.Members[0].Assigned.AsConsumer()
	require.NotNil(t, held)
	require.Len(t, held.Topics, 1)
	require.ElementsMatch(t, []int32{0, 1}, held.Topics[0].Partitions)

	// The member file lists the member once the writer has seen it.
	for {
		var kept sessionFile
		data, err := os.ReadFile(filepath.Join(dir, memberFileName))
		if err == nil && json.Unmarshal(data, &kept) == nil && len(kept.ClassicGroups["g"].Members) == 1 {
			break
		}
		require.NoError(t, ctx.Err(), "the member file never listed the member")
		time.Sleep(10 * time.Millisecond)
	}

	b2 := start(t, Config{DataDir: crashImage(t, dir), Partitions: 2})
	adm := kadm.NewClient(newClient(t, b2))
	groups, err := adm.DescribeGroups(ctx, "g")
	require.NoError(t, err)
	after := groups["g"]
	require.Equal(t, "Stable", after.State)
	require.Len(t, after.Members, 1, "members of a group whose session timeout is a minute")
	require.Equal(t, id, after.Members[0].MemberID)
	kept, _ := after.Members[0].Assigned.AsConsumer()
	require.NotNil(t, kept, "the member's assignment")
	require.Equal(t, held.Topics, kept.Topics)

	gen := generationOf(ctx, t, b2, "g")
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "g", id, gen
	resp, err := hb.RequestWith(ctx, newClient(t, b2))
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode), "the restored member's heartbeat at its generation")
}

// generationOf is the group's generation as its coordinator reports it.
func generationOf(ctx context.Context, t *testing.T, b *Broker, group string) int32 {
	t.Helper()
	info := b.Cluster().GroupInfo(group)
	require.NotNil(t, info)
	return info.Epoch
}

// TestClosedBrokerLeavesMembersToKfake checks that a broker that closes
// removes its member file (kfake saves the members itself), and that the
// next broker still has them.
func TestClosedBrokerLeavesMembersToKfake(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	b1 := start(t, Config{DataDir: dir, Partitions: 1})
	createTopic(ctx, t, b1, "in", 1, nil)
	member := newClient(t, b1, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"), kgo.SessionTimeout(time.Minute))
	before := joinedMember(ctx, t, member, kadm.NewClient(newClient(t, b1)), "g")
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, memberFileName))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the member file was never written")
	b1.Close()
	_, err := os.Stat(filepath.Join(dir, memberFileName))
	require.ErrorIs(t, err, os.ErrNotExist, "the member file after Close")

	b2 := start(t, Config{DataDir: dir, Partitions: 1})
	groups, err := kadm.NewClient(newClient(t, b2)).DescribeGroups(ctx, "g")
	require.NoError(t, err)
	require.Len(t, groups["g"].Members, 1)
	require.Equal(t, before.Members[0].MemberID, groups["g"].Members[0].MemberID)
}
