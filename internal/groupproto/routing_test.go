package groupproto

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestGroupRoutingRefusesWhatIsNotOneBalance(t *testing.T) {
	settled := func(t *testing.T) (*groupFixture, kmsg.DescribeGroupsResponseGroup) {
		g := newFixture(t, 4, 2)
		g.add("m-1", "proc-1", "a:1", defaultFormat)
		g.add("m-2", "proc-2", "b:1", defaultFormat)
		g.add("m-3", "proc-3", "", defaultFormat) // no endpoint: not routed to
		g.rebalance()
		d := g.describe()
		r, err := GroupRouting(d)
		require.NoError(t, err)
		require.Len(t, r.Active, 2)
		return g, d
	}
	for _, tc := range []struct {
		name   string
		change func(g *groupFixture, d *kmsg.DescribeGroupsResponseGroup)
		want   error
	}{
		{"rebalancing", func(_ *groupFixture, d *kmsg.DescribeGroupsResponseGroup) { d.State = "PreparingRebalance" }, ErrRoutingUnsettled},
		{"no members", func(_ *groupFixture, d *kmsg.DescribeGroupsResponseGroup) { d.Members = nil }, ErrRoutingUnsettled},
		{"a member without its assignment", func(_ *groupFixture, d *kmsg.DescribeGroupsResponseGroup) { d.Members[1].MemberAssignment = nil }, ErrRoutingUnsettled},
		{"assignments of two balances", func(g *groupFixture, d *kmsg.DescribeGroupsResponseGroup) {
			g.rebalance()
			d.Members[0].MemberAssignment = g.members[0].raw
		}, ErrRoutingUnsettled},
		{"a version probing answer", func(_ *groupFixture, d *kmsg.DescribeGroupsResponseGroup) {
			d.Members[0].MemberAssignment = must(EncodeGroupAssignment(GroupAssignment{Info: AssignmentInfo{ErrorCode: ErrVersionProbing}}, 3))
		}, ErrRoutingUnsettled},
		{"another protocol", func(_ *groupFixture, d *kmsg.DescribeGroupsResponseGroup) { d.Protocol = "range" }, ErrMalformed},
		{"garbage assignment", func(_ *groupFixture, d *kmsg.DescribeGroupsResponseGroup) {
			d.Members[2].MemberAssignment = []byte{0, 0, 0}
		}, ErrMalformed},
		{"garbage subscription", func(_ *groupFixture, d *kmsg.DescribeGroupsResponseGroup) {
			d.Members[0].ProtocolMetadata = []byte{0xED, 0xD1}
		}, ErrMalformed},
		{"coordinator error", func(_ *groupFixture, d *kmsg.DescribeGroupsResponseGroup) { d.ErrorCode = kerr.NotCoordinator.Code }, kerr.NotCoordinator},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, d := settled(t)
			tc.change(g, &d)
			_, err := GroupRouting(d)
			require.ErrorIs(t, err, tc.want)
		})
	}
}
