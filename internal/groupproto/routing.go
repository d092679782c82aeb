package groupproto

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/task"
)

// Routing is the group's routing table as of one balance: the tasks each
// process endpoint holds in each role, each list sorted. Processes without
// an endpoint are left out.
type Routing struct {
	// Epoch is the balance's AssignmentInfo.Epoch; 0 for a table carried
	// by a version 1 or 2 assignment.
	Epoch                   int64
	Active, Standby, Warmup map[string][]task.ID
}

// AssignmentRouting returns the routing table an assignment carries
// itself: ok is false from version 3 on, whose assignments carry only an
// epoch and leave the table to GroupRouting.
func AssignmentRouting(a AssignmentInfo) (r Routing, ok bool) {
	if a.Version >= 3 || a.Epoch != 0 {
		return Routing{}, false
	}
	return Routing{Active: a.PartitionsByHost, Standby: a.StandbyPartitionsByHost, Warmup: a.WarmupPartitionsByHost}, true
}

// ErrRoutingUnsettled is wrapped by GroupRouting's errors for a group whose
// description does not show one finished balance: it is rebalancing, or the
// members' assignments come from different balances. Describing it again
// shortly usually succeeds.
var ErrRoutingUnsettled = errors.New("assignor: the group is not settled on one balance")

// GroupRouting rebuilds the routing table of a balance from the group's
// DescribeGroups answer: each member's subscription names its endpoint, and
// its assignment its tasks and the balance's epoch. A coordinator shows
// members' metadata and assignments only once the group is Stable, that is
// once the leader's SyncGroup has stored every member's assignment, so a
// Stable group whose assignments all carry one non-zero epoch describes
// exactly the balance of that epoch, with the subscriptions it was computed
// from. Anything else is an error wrapping ErrRoutingUnsettled, or
// ErrMalformed for bytes that are not Eddy's.
func GroupRouting(g kmsg.DescribeGroupsResponseGroup) (Routing, error) {
	return defaultFormat.groupRouting(g)
}

func (f *format) groupRouting(g kmsg.DescribeGroupsResponseGroup) (Routing, error) {
	if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
		return Routing{}, fmt.Errorf("assignor: describing group %q: %w", g.Group, err)
	}
	if g.State != "Stable" {
		return Routing{}, fmt.Errorf("%w: group %q is %s", ErrRoutingUnsettled, g.Group, g.State)
	}
	if g.Protocol != ProtocolName {
		return Routing{}, fmt.Errorf("%w: group %q runs protocol %q, not %q", ErrMalformed, g.Group, g.Protocol, ProtocolName)
	}
	if len(g.Members) == 0 {
		return Routing{}, fmt.Errorf("%w: group %q has no members", ErrRoutingUnsettled, g.Group)
	}
	r := Routing{Active: map[string][]task.ID{}, Standby: map[string][]task.ID{}, Warmup: map[string][]task.ID{}}
	for _, m := range g.Members {
		if len(m.MemberAssignment) == 0 {
			return Routing{}, fmt.Errorf("%w: member %s has no assignment", ErrRoutingUnsettled, m.MemberID)
		}
		ga, err := f.decodeGroupAssignment(m.MemberAssignment)
		if err != nil {
			return Routing{}, fmt.Errorf("assignor: member %s's assignment: %w", m.MemberID, err)
		}
		a := ga.Info
		switch {
		case a.ErrorCode != ErrNone:
			return Routing{}, fmt.Errorf("%w: member %s's assignment carries %v", ErrRoutingUnsettled, m.MemberID, a.ErrorCode)
		case a.Epoch == 0:
			return Routing{}, fmt.Errorf("%w: member %s's assignment is version %d, without an epoch", ErrRoutingUnsettled, m.MemberID, a.Version)
		case r.Epoch != 0 && a.Epoch != r.Epoch:
			return Routing{}, fmt.Errorf("%w: member %s's assignment is of epoch %d, another's of %d", ErrRoutingUnsettled, m.MemberID, a.Epoch, r.Epoch)
		}
		r.Epoch = a.Epoch
		gs, err := f.decodeGroupSubscription(m.ProtocolMetadata)
		if err != nil {
			return Routing{}, fmt.Errorf("assignor: member %s's subscription: %w", m.MemberID, err)
		}
		host := gs.Info.Endpoint
		if host == "" {
			continue
		}
		r.Active[host] = append(r.Active[host], a.Active...)
		r.Standby[host] = append(r.Standby[host], a.Standby...)
		r.Warmup[host] = append(r.Warmup[host], a.Warmup...)
	}
	// The same shape as the leader's maps: every host in Active and
	// Standby, only hosts with warmups in Warmup.
	for _, m := range []map[string][]task.ID{r.Active, r.Standby, r.Warmup} {
		for _, h := range slices.Collect(maps.Keys(m)) {
			m[h] = sortedIDs(m[h])
		}
	}
	maps.DeleteFunc(r.Warmup, func(_ string, ts []task.ID) bool { return len(ts) == 0 })
	return r, nil
}
