package broker

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupGuard makes kfake's classic consumer groups behave as a real Kafka
// coordinator does in two places Eddy depends on, through kfake's request
// control hooks only:
//
//   - A member with a JoinGroup or SyncGroup request waiting at the
//     coordinator is kept alive, as Kafka keeps every member "with a request
//     in purgatory": kfake instead expires it at its session timeout, so a
//     rebalance that waits for a member that died (up to the rebalance
//     timeout) drops the live members waiting with it; they rejoin, the
//     rebalance starts over, and repeated kills wedge the group. The guard
//     heartbeats on behalf of waiting members while they wait.
//   - A SyncGroup whose group metadata (every member's subscription and
//     assignment, which Kafka stores as one record in its offsets topic)
//     exceeds message.max.bytes fails with UNKNOWN_SERVER_ERROR, the code
//     Kafka turns MESSAGE_TOO_LARGE into for group metadata; kfake accepts
//     any size.
//   - Members outlive a broker that was killed (see memberFile): the guard
//     tells the member file what the hooks see.
type groupGuard struct {
	cluster  *kfake.Cluster
	members  *memberFile // nil without a data directory
	maxBytes int
	cl       *kgo.Client
	stop     context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	waiting map[memberKey]waitingReq
	// subs is the size of each member's latest JoinGroup metadata: part of
	// the group metadata record a SyncGroup makes the coordinator store.
	subs map[memberKey]int
}

type memberKey struct{ group, member string }

// waitingReq is a JoinGroup or SyncGroup a member sent and is waiting on.
type waitingReq struct {
	instanceID *string
	join       bool
	// generation is the group's generation when the request came: a join
	// is answered when the generation moves on, a sync when the group is
	// stable at it (or moves on).
	generation int32
	// at is when the request came; a look at the group taken before it
	// says nothing about it.
	at time.Time
}

// keepAliveEvery is how often the guard heartbeats for waiting members:
// well under the smallest session timeout the broker accepts by default.
const keepAliveEvery = 150 * time.Millisecond

// groupMetadataOverhead approximates what Kafka's group metadata record
// holds per member beyond its subscription and assignment (member, client
// and instance IDs, host, timeouts).
const groupMetadataOverhead = 128

func newGroupGuard(c *kfake.Cluster, clientOpts []kgo.Opt, maxBytes int, members *memberFile) (*groupGuard, error) {
	cl, err := kgo.NewClient(clientOpts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &groupGuard{
		cluster:  c,
		members:  members,
		maxBytes: maxBytes,
		cl:       cl,
		stop:     cancel,
		done:     make(chan struct{}),
		waiting:  make(map[memberKey]waitingReq),
		subs:     make(map[memberKey]int),
	}
	// Control functions run while kfake's request loop waits for them
	// (serving admin calls such as GroupInfo meanwhile): they only record
	// and return.
	c.ControlKey(int16(kmsg.JoinGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.JoinGroupRequest)
		g.joined(req)
		if members != nil {
			members.joined(req)
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.SyncGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.SyncGroupRequest)
		if resp := g.synced(req); resp != nil {
			return resp, nil, true
		}
		if members != nil {
			members.synced(req)
		}
		return nil, nil, false
	})
	if members != nil {
		c.ControlKey(int16(kmsg.Heartbeat), func(r kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			members.heartbeat(r.(*kmsg.HeartbeatRequest))
			return nil, nil, false
		})
	}
	go g.keepAlive(ctx)
	return g, nil
}

func (g *groupGuard) close() {
	g.stop()
	<-g.done
	g.cl.Close()
	if g.members != nil {
		g.members.close()
	}
}

func (g *groupGuard) joined(req *kmsg.JoinGroupRequest) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if req.MemberID == "" {
		// kfake answers a first join at once with the member ID to use.
		return
	}
	k := memberKey{req.Group, req.MemberID}
	size := 0
	for _, p := range req.Protocols {
		size = max(size, len(p.Metadata))
	}
	g.subs[k] = size
	gen := int32(-1)
	if info := g.cluster.GroupInfo(req.Group); info != nil {
		gen = info.Epoch
	}
	g.waiting[k] = waitingReq{instanceID: req.InstanceID, join: true, generation: gen, at: time.Now()}
}

// synced records a waiting SyncGroup, or returns the error answer for one
// whose group metadata would not fit in a record.
func (g *groupGuard) synced(req *kmsg.SyncGroupRequest) kmsg.Response {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(req.GroupAssignment) > 0 && g.maxBytes > 0 {
		size := 0
		for _, a := range req.GroupAssignment {
			size += len(a.MemberAssignment) + g.subs[memberKey{req.Group, a.MemberID}] + groupMetadataOverhead
		}
		if size > g.maxBytes {
			resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
			resp.ErrorCode = kerr.UnknownServerError.Code
			return resp
		}
	}
	g.waiting[memberKey{req.Group, req.MemberID}] = waitingReq{instanceID: req.InstanceID, generation: req.Generation, at: time.Now()}
	return nil
}

// keepAlive heartbeats for every member with a request waiting, until the
// request is answered or the member is gone.
func (g *groupGuard) keepAlive(ctx context.Context) {
	defer close(g.done)
	t := time.NewTicker(keepAliveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.mu.Lock()
		groups := make(map[string]bool)
		for k := range g.waiting {
			groups[k.group] = true
		}
		g.mu.Unlock()
		for group := range groups {
			asOf := time.Now()
			info := g.cluster.GroupInfo(group)
			for _, hb := range g.due(group, info, asOf) {
				hb.RequestWith(ctx, g.cl) // the answer does not matter; the heartbeat does
			}
		}
	}
}

// due settles which of a group's waiting requests are still waiting, given
// the group as it is now, and returns a heartbeat for each.
func (g *groupGuard) due(group string, info *kfake.GroupInfo, asOf time.Time) []*kmsg.HeartbeatRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	members := make(map[string]bool)
	if info != nil {
		for _, m := range info.Members {
			members[m.MemberID] = true
		}
	}
	var out []*kmsg.HeartbeatRequest
	for k, w := range g.waiting {
		if k.group != group || !w.at.Before(asOf) {
			continue
		}
		if !members[k.member] {
			delete(g.waiting, k)
			delete(g.subs, k)
			continue
		}
		// A join waits while the group prepares the rebalance at the
		// generation it came in; a sync while the group completes it.
		// Anything else means the coordinator answered.
		waits := "CompletingRebalance"
		if w.join {
			waits = "PreparingRebalance"
		}
		if info.Epoch != w.generation || info.State != waits {
			delete(g.waiting, k)
			continue
		}
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Group = group
		hb.MemberID = k.member
		hb.InstanceID = w.instanceID
		hb.Generation = info.Epoch
		out = append(out, hb)
	}
	return out
}
